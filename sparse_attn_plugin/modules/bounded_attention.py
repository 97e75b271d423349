"""Attention over decoder steps with the cumulative attention ``beta`` as state.

Constrained attention (Malaviya et al. 2018) bounds what each source token may still
receive by its fertility ``f`` minus what it has received so far::

    u_t = max(0, f - beta_{t-1}),   p_t = csparsemax(z_t + c u_t, u_t),   beta_t = beta_{t-1} + p_t

(or csoftmax; the exhaustion term ``c u_t`` favours tokens with fertility left). The sink
(fertility ``inf``) gets the never-binding bound 1 and no exhaustion bonus. Unconstrained
normalisers ignore the bounds; their ``beta`` still feeds the coverage vector and penalty.
"""

from typing import Tuple

import torch
from torch import Tensor, nn

from ..normalizers.constrained import ConstrainedNormalizer


def upper_bounds(fertility: Tensor, coverage: Tensor) -> Tensor:
    """``u = max(0, f - beta)``, and 1 on the sink (``f = inf``)."""
    bounds = (fertility - coverage).clamp(min=0.0)
    return torch.where(torch.isinf(fertility), torch.ones_like(bounds), bounds)


class BoundedAttention(nn.Module):
    """Attention weights step by step, tracking the cumulative attention.

    Args:
        normalizer: the site's normaliser (:mod:`sparse_attn_plugin.site_normalizers`);
            the constrained ones (``csoftmax``, ``csparsemax``) use the bounds.
        exhaustion: ``c`` of the exhaustion strategy (constrained normalisers only).
    """

    def __init__(self, normalizer: nn.Module, exhaustion: float = 0.0):
        super().__init__()
        self.normalizer = normalizer
        self.constrained = isinstance(self.normalizer, ConstrainedNormalizer)
        self.exhaustion = exhaustion

    def step(self, scores: Tensor, coverage: Tensor, fertility: Tensor) -> Tensor:
        """Weights ``(B, H, T, S)`` for scores ``(B, H, T, S)`` given the coverage ``beta``
        and fertilities, both broadcastable to the scores (``T`` must be 1 when
        constrained: bounds change after every step)."""
        if not self.constrained:
            return self.normalizer(scores)
        upper = upper_bounds(fertility, coverage).expand_as(scores)
        if self.exhaustion:
            bonus = torch.where(torch.isinf(fertility), 0.0, self.exhaustion * upper)
            scores = scores + bonus.detach()
        return self.normalizer(scores, upper)

    def forward(self, scores: Tensor, coverage: Tensor, fertility: Tensor
                ) -> Tuple[Tensor, Tensor]:
        """Weights for ``T`` consecutive steps, scores ``(B, H, T, S)``, starting from the
        coverage ``(B, H, S)``; returns the weights and the coverage after step ``T``."""
        if not self.constrained:
            weights = self.normalizer(scores)
            return weights, coverage + weights.sum(dim=2)
        steps = []
        for t in range(scores.size(2)):
            weights = self.step(scores[:, :, t:t + 1], coverage[:, :, None], fertility)
            coverage = coverage + weights[:, :, 0]
            steps.append(weights)
        return torch.cat(steps, dim=2), coverage
