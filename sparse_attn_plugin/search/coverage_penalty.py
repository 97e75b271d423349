"""Coverage-penalty rescoring of finished beam hypotheses (Wu et al. 2016, GNMT).

Each sentence's finished hypotheses are rescored with::

    score(Y) = log P(Y | X) / lp(Y) + cp(X; Y)
    lp(Y) = (5 + |Y|)^a / 6^a
    cp(X; Y) = b * sum_j log(max(eps, min(1, sum_t a_tj)))

where ``a_tj`` is the attention the model returned at step ``t`` on source token ``j``
(padding excluded; the sink, when the model has one, is not a source token and never
reaches here), ``a`` is fairseq's ``--lenpen`` and ``b`` is ``--coverage-penalty-beta``.
Malaviya et al. (2018) grid-searched ``a`` and ``b`` in {0, 0.2, ..., 1.0}, eps = 0.1.
"""

import math

import torch

from .zero_probability import ZeroProbabilitySequenceGenerator


def gnmt_score(positional_scores, attention, source_mask, alpha: float, beta: float,
               eps: float) -> float:
    """The rescored hypothesis: ``positional_scores`` ``(|Y|,)`` log-probabilities (EOS
    included), ``attention`` ``(S, |Y|)`` and ``source_mask`` ``(S,)`` True on real tokens."""
    length_penalty = ((5.0 + positional_scores.numel()) / 6.0) ** alpha
    coverage = attention.float().sum(dim=1)[source_mask].clamp(max=1.0).clamp(min=eps)
    return (positional_scores.sum().item() / length_penalty
            + beta * coverage.log().sum().item())


class CoverageSequenceGenerator(ZeroProbabilitySequenceGenerator):
    """fairseq's beam search (finishing on exact zeros, :mod:`.zero_probability`),
    then GNMT rescoring of each sentence's finished beam.

    Args:
        coverage_beta: ``b``; ``alpha`` is the generator's ``len_penalty``.
        coverage_eps: the floor ``eps`` of each token's coverage.
    """

    def __init__(self, models, tgt_dict, coverage_beta: float = 0.0,
                 coverage_eps: float = 0.1, **kwargs):
        super().__init__(models, tgt_dict, **kwargs)
        self.coverage_beta = coverage_beta
        self.coverage_eps = coverage_eps

    def _generate(self, sample, *args, **kwargs):
        finalized = super()._generate(sample, *args, **kwargs)
        src_tokens = sample["net_input"]["src_tokens"]
        for sentence, hypos in enumerate(finalized):
            source_mask = src_tokens[sentence].ne(self.pad)
            for hypo in hypos:
                if hypo["attention"].numel() == 0:
                    raise RuntimeError("--coverage-penalty-beta needs a model that returns "
                                       "its attention")
                hypo["score"] = torch.tensor(gnmt_score(
                    hypo["positional_scores"], hypo["attention"], source_mask,
                    self.len_penalty, self.coverage_beta, self.coverage_eps))
            hypos.sort(key=lambda hypo: -hypo["score"].item()
                       if math.isfinite(hypo["score"].item()) else math.inf)
        return finalized
