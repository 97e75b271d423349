"""Comparing kinds of attention on one corpus: ``sparse-attn-compare``.

* :mod:`.corpus`: what a comparison reads from a prepared data folder (or the synthetic
  corpus it builds);
* :mod:`.models`: the architectures and, for each, the rows (kinds of attention) it can
  compare;
* :mod:`.run`: one row trained until it converges or its time budget ends, and scored;
  resumable;
* :mod:`.scorers`: the scorer of every metric, making what a metric needs (Meteor, a word
  aligner) when a row is first scored;
* :mod:`.report`: the table, the JSON record and the figures;
* :mod:`.published`: published figures on the corpora, shown beside ours.
"""
