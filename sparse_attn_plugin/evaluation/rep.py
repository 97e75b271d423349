"""REP: repeated bigrams a translation has and its reference does not (Malaviya et al.
2018, "Sparse and Constrained Attention for NMT", Table 1), as their script computes it
on de-BPE'd whitespace tokens with case kept. With ``c_h`` and ``c_r`` the bigram counts
of the hypothesis and the reference, per sentence::

    a = sum over hypothesis bigrams g with c_h(g) >= 2 of  max(0, c_h(g) - c_r(g))
    b = sum over words w with c_h(w w) >= 1           of  max(0, c_h(w w) - c_r(w w))
    rep(sentence) = a + 2 b

and the corpus score is ``100 * sum of rep(sentence) / number of reference tokens``
(lower is better).
"""

from collections import Counter
from dataclasses import dataclass
from operator import attrgetter
from typing import List, Sequence

from .metric import Metric

REPEAT_WEIGHT = 1
SAME_WORD_WEIGHT = 2


def _bigrams(tokens: Sequence[str]) -> Counter:
    return Counter(zip(tokens, tokens[1:]))


def sentence_rep(hypothesis: Sequence[str], reference: Sequence[str]) -> int:
    """Unnormalised REP of one tokenised sentence pair (``a + 2 b`` above)."""
    hyp, ref = _bigrams(hypothesis), _bigrams(reference)
    repeated = sum(max(0, n - ref[g]) for g, n in hyp.items() if n >= 2)
    same_word = sum(max(0, n - ref[g]) for g, n in hyp.items() if g[0] == g[1])
    return REPEAT_WEIGHT * repeated + SAME_WORD_WEIGHT * same_word


@dataclass(frozen=True)
class RepResult:
    score: float  # 100 * total / reference tokens
    sentences: List[int]  # unnormalised per-sentence scores
    reference_tokens: int


def corpus_rep(hypotheses: Sequence[str], references: Sequence[str]) -> RepResult:
    """REP of a corpus of whitespace-tokenised, de-BPE'd lines."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    hyp_tokens = [line.split() for line in hypotheses]
    ref_tokens = [line.split() for line in references]
    total_ref = sum(map(len, ref_tokens))
    if total_ref == 0:
        raise ValueError("the references have no tokens; REP is normalised by their length")
    sentences = [sentence_rep(h, r) for h, r in zip(hyp_tokens, ref_tokens)]
    return RepResult(100.0 * sum(sentences) / total_ref, sentences, total_ref)


# -- the metric's entry (:data:`.scoring.METRICS`) --------------------------------------------
REP = Metric(
    "REP", "rep", False, lambda inputs: corpus_rep(inputs.hypotheses, inputs.references),
    sentences=attrgetter("sentences"),
    details=lambda result: {"reference_tokens": result.reference_tokens},
    summary="repeated bigrams not in the reference, x100 over reference tokens, lower is "
            "better",
    note=lambda report: ("REP: repeated bigrams beyond the reference's counts plus twice "
                         "the repeated words, per 100 reference tokens (lower is better)."))
