"""Top-k attention (Zhao et al. 2019, "Explicit Sparse Transformer").

Per query row, ``t`` is the k-th largest unmasked score; scores below ``t`` become
``-inf`` and the row goes through softmax::

    topk(s)_j = softmax(m(s))_j,   m(s)_j = s_j if s_j >= t else -inf

Entries equal to ``t`` are all kept, as in the reference code, so ties can keep more
than k keys. ``t`` is a constant for the backward pass: gradients reach only the
kept entries, and they are softmax's, ``ds = p * (dp - sum(p * dp))`` (``p = 0`` off the
kept entries), computed in closed form from ``p`` alone rather than through the
masking's own backward. When a row has fewer than k unmasked keys, the k-th largest score is
``-inf`` and every unmasked key is kept, i.e. k is clamped to the number of unmasked
keys, recomputed for each row (and so at every incremental decoding step).
"""

import torch
from torch import Tensor

from .base import Normalizer


class TopKSoftmax(torch.autograd.Function):
    """Softmax over the entries of each last-dim row at least its k-th largest."""

    @staticmethod
    def forward(ctx, scores: Tensor, k: int) -> Tensor:
        kth = scores.topk(k, dim=-1, sorted=False).values.amin(-1, keepdim=True)
        probs = torch.softmax(scores.masked_fill(scores < kth, float("-inf")), dim=-1)
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, d_probs: Tensor):
        (probs,) = ctx.saved_tensors
        weighted = probs * d_probs
        return weighted - probs * weighted.sum(-1, keepdim=True), None


def topk_softmax(scores: Tensor, k: int) -> Tensor:
    """Top-k attention weights over the last dim (``k`` below its size)."""
    return TopKSoftmax.apply(scores, k)


class TopK(Normalizer):
    """Softmax over the k largest scores of each row.

    Args:
        k: number of keys kept per query (8 is the paper's best of {4, 8, 16, 32, inf}).
        train_only: select the top k only in training mode; in evaluation mode this is
            plain softmax (the paper's Table 5 ablation).
    """

    def __init__(self, k: int = 8, train_only: bool = False):
        super().__init__()
        if k < 1:
            raise ValueError(f"top-k attention needs k >= 1, got k={k}")
        self.k = k
        self.train_only = train_only

    def normalize(self, scores: Tensor) -> Tensor:
        if self.k < scores.size(-1) and (self.training or not self.train_only):
            return topk_softmax(scores, self.k)
        return torch.softmax(scores, dim=-1)

    def extra_repr(self) -> str:
        return f"k={self.k}, train_only={self.train_only}"
