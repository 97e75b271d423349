"""Top-k attention (Zhao et al. 2019, "Explicit Sparse Transformer").

With ``t`` the k-th largest unmasked score of a row (``-inf`` when it has fewer than k)::

    topk(s)_j = softmax(m(s))_j,   m(s)_j = s_j if s_j >= t else -inf

Ties at ``t`` are all kept, as in the reference code. ``t`` is a constant for the backward
pass, softmax's on the kept entries in closed form. ``--attn-impl compiled`` fuses the same
function around the ``topk`` kernel with k symbolic; docs/methods.md, "Top-k".
"""

from functools import lru_cache, partial
from typing import Tuple

import torch
from torch import Tensor

from .base import Normalizer, check_count, guarded, softmax_step
from .compiled import compiled
from .dispatch import Implementations, resolve
from .fused_triton import topk_triton

INF = float("inf")


def keep_top(scores: Tensor, k: int) -> Tensor:
    """``m(s)``: the scores with every entry below the row's k-th largest (counted with
    repeats) set to ``-inf``; a row with fewer than k unmasked keys keeps them all, and a
    NaN or ``+inf`` stays (so softmax makes the row NaN)."""
    kth = scores.topk(k, dim=-1, sorted=False).values.amin(-1, keepdim=True)
    return scores.masked_fill(scores < kth, -INF)


def topk_rows(scores: Tensor, k: int) -> Tensor:
    """Top-k weights of each last-dim row (``k`` at most its size): softmax of
    :func:`keep_top`. All zero on a row with every key masked, all NaN on a row with a NaN
    or +inf score."""
    empty = torch.isneginf(scores.amax(-1, keepdim=True))
    return torch.softmax(keep_top(scores, k).masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0)


def _softmax_grad(probs: Tensor, d_probs: Tensor) -> Tensor:
    """``ds = p * (dp - sum(p * dp))``, differentiable in ``p`` and ``dp``."""
    weighted = probs * d_probs
    return weighted - probs * weighted.sum(-1, keepdim=True)


class TopKSoftmax(torch.autograd.Function):
    """:func:`topk_rows` with softmax's gradient on the kept entries; with ``fused``, by the
    compiled kernels (except under ``create_graph=True``, where the backward is recorded
    for double backward in eager operations)."""

    @staticmethod
    def forward(ctx, scores: Tensor, k: int, fused: bool) -> Tensor:
        if fused:  # as a plain tensor: no view's base or grad flag to guard on
            probs = compiled(topk_rows, "k=1" if k == 1 else "")(scores.detach(), k)
        else:
            probs = topk_rows(scores, k)
        ctx.fused = fused
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, d_probs: Tensor):
        (probs,) = ctx.saved_tensors
        if ctx.fused and not torch.is_grad_enabled():
            return compiled(_softmax_grad)(probs, d_probs.detach().contiguous()), None, None
        return _softmax_grad(probs, d_probs), None, None


def topk_softmax(scores: Tensor, k: int, impl: str = "torch") -> Tensor:
    """Top-k attention weights over the last dim (``k`` at most its size); ``impl``
    ``"torch"`` or ``"compiled"`` (whose kernels see the scores as rows, so that no shape
    compiles them again; a single row or key, a graph of its own, runs eagerly). The rows are
    made contiguous, so that the weights of a row do not depend on the layout of the others
    (reductions over strided rows add in another order)."""
    rows = scores.reshape(-1, scores.size(-1)).contiguous()
    fused = impl == "compiled" and 1 < rows.size(-1) < rows.numel()
    return TopKSoftmax.apply(rows, k, fused).view_as(scores)


@lru_cache(maxsize=None)
def _topk(k: int) -> Implementations:
    """The top-k kernels for this k, as ``--attn-impl`` picks them."""
    return Implementations("top-k", {"topk kernel": lambda s: topk_softmax(s, k)},
                           ("fused, compiled", lambda s: topk_softmax(s, k, "compiled")),
                           ("fused, triton", lambda s: topk_triton(s, k)))


def check_k(k) -> int:
    """``k`` as a Python int, or a one-line ValueError (:func:`.base.check_count`)."""
    return check_count(k, "k", "top-k attention")


def topk_weights(scores: Tensor, k: int, impl: str = "auto") -> Tensor:
    """Top-k attention weights over the last dim of float32/float64 scores, by the kernel
    ``impl`` picks (:data:`~.dispatch.IMPLS`); plain softmax where the rows have at most k
    keys (every unmasked key is kept). Rows with every key masked get all-zero weights."""
    if k < scores.size(-1):
        return _topk(k)(impl, scores)
    return guarded(partial(torch.softmax, dim=-1), scores)


class TopK(Normalizer):
    """Softmax over the k largest scores of each row.

    Args:
        k: number of keys kept per query (8 is the paper's best of {4, 8, 16, 32, inf}).
        train_only: select the top k only in training mode; in evaluation mode this is
            plain softmax (the paper's Table 5 ablation).
        impl: ``--attn-impl`` (:data:`~.dispatch.IMPLS`).
    """

    zeroes_empty_rows = True

    def __init__(self, k: int = 8, train_only: bool = False, impl: str = "auto"):
        super().__init__(impl)
        self.k = check_k(k)
        self.train_only = train_only

    def normalize(self, scores: Tensor) -> Tensor:
        if self.training or not self.train_only:
            return topk_weights(scores, self.k, self.impl)
        return guarded(partial(torch.softmax, dim=-1), scores)

    def step_weights(self, scores: Tensor) -> Tensor:
        """Eagerly, softmax of :func:`keep_top` with no empty-row fill (the same weights,
        five operations where the general path has nine); fused kernels as usual."""
        if resolve(self.impl, scores) != "torch":
            return self(scores)
        if (self.training or not self.train_only) and self.k < scores.size(-1):
            kernels = _topk(self.k)
            kernels.announce(self.impl, scores, next(iter(kernels.eager)))
            scores = keep_top(scores, self.k)
        return softmax_step(scores)

    def fused_kind(self) -> Tuple[str, dict]:
        if self.training or not self.train_only:
            return "topk", {"k_top": self.k}
        return "softmax", {}

    def extra_repr(self) -> str:
        return f"k={self.k}, train_only={self.train_only}, impl={self.impl}"
