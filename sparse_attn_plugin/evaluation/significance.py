"""Paired bootstrap resampling for corpus BLEU (Koehn 2004, "Statistical Significance
Tests for Machine Translation Evaluation", EMNLP).

Draw :math:`B` test sets of the :math:`N` sentences with replacement, the same draws for
system and baseline, and score both on each from their summed per-sentence BLEU
statistics (exactly sacreBLEU's corpus BLEU). With :math:`d_b` the system's BLEU minus the
baseline's on draw :math:`b`, the 95% interval is the 2.5th to 97.5th percentile of the
:math:`d_b` and the two-sided p-value is
:math:`p = \\min(1, 2\\,(\\min(\\#\\{d_b \\le 0\\}, \\#\\{d_b \\ge 0\\}) + 1) / (B + 1))`
(the +1 keeps :math:`p > 0`). It measures how much the difference depends on the test
sentences, not on training again with another seed (docs/scoring.md).
"""

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from sacrebleu.metrics import BLEU

from .bleu import bleu_metric, checked_pairs

#: Draws, as Koehn (2004) and sacreBLEU's ``--paired-bs`` use.
RESAMPLES = 1000
#: The draws' seed: the same test sets every time, so the numbers can be reproduced.
SEED = 12345
#: The smoothing of sacreBLEU's corpus BLEU, which :func:`~.bleu.corpus_bleu` keeps (it
#: matters only where a draw matches no 4-gram).
SMOOTHING = "exp"


@dataclass(frozen=True)
class PairedBleu:
    """BLEU of a system minus a baseline's on the same sentences: the difference, its
    95% bootstrap interval ``[low, high]``, the two-sided ``p_value``, and how many draws
    made them."""

    difference: float
    low: float
    high: float
    p_value: float
    resamples: int

    def record(self) -> dict:
        return {"difference": self.difference, "low": self.low, "high": self.high,
                "p": self.p_value, "resamples": self.resamples}


def describe(record: dict) -> str:
    """A :meth:`PairedBleu.record` as a table cell: ``+0.42 [-0.10, +0.95], p 0.120``."""
    return (f"{record['difference']:+.2f} [{record['low']:+.2f}, {record['high']:+.2f}], "
            f"p {record['p']:.3f}")


def sentence_statistics(hypotheses: Sequence[str], references: Sequence[str],
                        tokenize: str = "none", lowercase: bool = False,
                        split_compounds: bool = False) -> np.ndarray:
    """``(N, 10)`` integers a sentence: matched 1- to 4-grams, hypothesis 1- to 4-grams,
    hypothesis length, reference length; :func:`~.bleu.corpus_bleu`'s options."""
    hypotheses, references = checked_pairs(hypotheses, references, split_compounds)
    metric = bleu_metric(tokenize, lowercase, effective_order=True)
    rows = []
    for hypothesis, reference in zip(hypotheses, references):
        score = metric.sentence_score(hypothesis, [reference])
        rows.append([*score.counts, *score.totals, score.sys_len, score.ref_len])
    return np.array(rows, dtype=np.int64)


def bleu_of(statistics: np.ndarray) -> float:
    """Corpus BLEU of summed :func:`sentence_statistics` (sacreBLEU's smoothing)."""
    return BLEU.compute_bleu(statistics[:4].tolist(), statistics[4:8].tolist(),
                             int(statistics[8]), int(statistics[9]),
                             smooth_method=SMOOTHING).score


def resample_counts(sentences: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """``(resamples, sentences)``: how often each sentence is in each bootstrap draw."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(sentences, np.full(sentences, 1.0 / sentences), size=resamples)


def paired_bootstrap(system: Sequence[str], baseline: Sequence[str],
                     references: Sequence[str], resamples: int = RESAMPLES,
                     seed: int = SEED, **bleu_options) -> PairedBleu:
    """BLEU of ``system`` minus ``baseline``'s against the same ``references``, with its
    interval and p-value (see the module); ``bleu_options`` as
    :func:`~.bleu.corpus_bleu`'s. ValueError where the counts differ or ``resamples``
    is not positive."""
    if resamples < 1:
        raise ValueError(f"resamples must be positive, not {resamples}")
    if len(system) != len(baseline):
        raise ValueError(f"{len(system)} system hypotheses but {len(baseline)} baseline ones")
    ours = sentence_statistics(system, references, **bleu_options)
    theirs = sentence_statistics(baseline, references, **bleu_options)
    counts = resample_counts(len(references), resamples, seed)
    differences = np.array([bleu_of(a) - bleu_of(b)
                            for a, b in zip(counts @ ours, counts @ theirs)])
    against = min(np.sum(differences <= 0), np.sum(differences >= 0))
    low, high = np.percentile(differences, [2.5, 97.5])
    return PairedBleu(
        difference=bleu_of(ours.sum(0)) - bleu_of(theirs.sum(0)), low=float(low),
        high=float(high), p_value=min(1.0, 2 * (int(against) + 1) / (resamples + 1)),
        resamples=resamples)
