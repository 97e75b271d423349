"""fairseq's beam search on distributions with exact zeros (``--criterion entmax_loss``).

fairseq 0.12's ``SequenceGenerator`` finishes a hypothesis only on an EOS of finite score,
and at ``--max-len`` it masks every token but EOS and asserts that every sentence is then
finished. Where the model gives EOS probability 0 there (a greedy hypothesis that has not
ended; a beam wider than the support, whose extra hypotheses have score ``-inf``), no
hypothesis of that sentence can finish and the command dies with ``AssertionError``.

:class:`ZeroProbabilitySequenceGenerator` lets them finish at that step only, where every
token but EOS is ``-inf`` in every row: there a ``-inf`` EOS or hypothesis score takes the
stand-in :data:`IMPOSSIBLE`, and the finished hypotheses are then given what they are:
score ``-inf``, positional scores ``-inf`` from their first zero-probability token on. A
sentence keeps them only where it has no hypothesis of probability above 0. Elsewhere the
search is fairseq's, number for number.
"""

import math

import torch
from fairseq.sequence_generator import SequenceGenerator

#: Stands for log 0 inside the search at the forced-EOS step: finite, so fairseq finishes
#: the hypothesis, and far below any sum of float32 log-probabilities (each >= -104).
IMPOSSIBLE = -1e30


def _finishing_step(search_step, eos: int):
    """``search_step`` (a fairseq ``Search.step``) where, at a step with no token but EOS
    possible in any row, ``-inf`` EOS log-probabilities and hypothesis scores are
    :data:`IMPOSSIBLE`."""

    def step(index, lprobs, scores, *args, **kwargs):
        others = torch.cat([lprobs[..., :eos], lprobs[..., eos + 1:]], dim=-1)
        if others.isneginf().all():
            lprobs = lprobs.clone()
            lprobs[..., eos] = lprobs[..., eos].clamp(min=IMPOSSIBLE)
            if scores is not None:
                scores = scores.clamp(min=IMPOSSIBLE)
        return search_step(index, lprobs, scores, *args, **kwargs)

    return step


def _zero_probability(hypo) -> bool:
    """Give a finished hypothesis that went through :data:`IMPOSSIBLE` or ``-inf`` score
    ``-inf`` and positional scores ``-inf`` from that token on; whether it did."""
    scores = hypo["positional_scores"]
    bad = ~scores.isfinite() | (scores <= IMPOSSIBLE / 2)
    if not bad.any():
        return False
    first = int(bad.nonzero()[0])
    hypo["positional_scores"] = torch.cat(
        [scores[:first], torch.full_like(scores[first:], -math.inf)])
    hypo["score"] = torch.full_like(hypo["score"], -math.inf)
    return True


class ZeroProbabilitySequenceGenerator(SequenceGenerator):
    """fairseq's ``SequenceGenerator`` that finishes at ``--max-len`` on exact zeros (see
    the module); arguments as fairseq's."""

    def __init__(self, models, tgt_dict, *args, **kwargs):
        super().__init__(models, tgt_dict, *args, **kwargs)
        self.search.step = _finishing_step(self.search.step, self.eos)

    def _generate(self, sample, *args, **kwargs):
        finalized = super()._generate(sample, *args, **kwargs)
        for sentence, hypos in enumerate(finalized):
            impossible = [_zero_probability(hypo) for hypo in hypos]
            if not all(impossible):
                finalized[sentence] = [h for h, zero in zip(hypos, impossible) if not zero]
        return finalized
