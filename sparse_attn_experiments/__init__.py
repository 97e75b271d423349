"""The experiment tooling built on the plugin: nothing under ``--user-dir`` imports it.

* :mod:`.compare` (``sparse-attn-compare``, with :mod:`.comparison`): kinds of attention
  trained and scored side by side on one corpus, the demo included;
* :mod:`.reproduce` (``sparse-attn-reproduce``, with :mod:`.reproduction`): a paper's
  tables from its file in ``configs/``;
* :mod:`.results_index` (``sparse-attn-results-index``): ``results/README.md``;
* :mod:`.toy_example` (``sparse-attn-toy-example``): Malaviya et al.'s Figure 1;
* :mod:`.pipeline`: fairseq-train / fairseq-generate runs and their logs;
* :mod:`.checkpoint_averaging`, :mod:`.timing`, :mod:`.provenance`: averaged
  checkpoints, the benchmarks' timers, and the command, commit and machine every
  result file names.
"""
