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

The general ``topk`` kernel sorts partially, row by row, and costs ten softmaxes on a
CPU; the compiled path (``--attn-impl compiled``) finds ``t``
by k - 1 steps down from the row maximum, fused with the masking and the softmax into one
loop, and falls back on the general kernel for a batch where a tie makes that inexact.
On a GPU, the Triton kernel of :mod:`.fused_triton` (``--attn-impl triton``) finds ``t``
with ties counted, masks and normalises in one pass over each row.
"""

import operator
from functools import lru_cache, partial

import torch
from torch import Tensor

from .base import Normalizer, guarded
from .compiled import compiled
from .dispatch import Implementations
from .fused_triton import topk_triton

NEG_INF = float("-inf")


def kth_largest(scores: Tensor, k: int) -> Tensor:
    """The k-th largest entry of each last-dim row, counted with repeats (``-inf`` when
    a row has fewer than k unmasked keys), by the general ``topk`` kernel."""
    return scores.topk(k, dim=-1, sorted=False).values.amin(-1, keepdim=True)


def _softmax_of_kept(scores: Tensor, keep: Tensor, top: Tensor) -> Tensor:
    """Softmax over the ``keep`` entries of each row, whose largest score is ``top``; all
    zero on a row with every key masked (``top = -inf``)."""
    empty = torch.isneginf(top)
    e = torch.where(keep, torch.exp(scores - top.masked_fill(empty, 0.0)), 0.0)
    return e / e.sum(-1, keepdim=True).masked_fill(empty, 1.0)


def _fused_topk_weights(scores: Tensor, k: int):
    """Top-k weights by k - 1 steps down from the row maximum to the largest score below
    it (elementwise work and row reductions only, which ``torch.compile`` fuses into one
    loop), and whether they are exact: each step passes all repeats of a value, so this
    finds the k-th largest *distinct* value, which is the k-th largest exactly when k
    entries are kept or the row has at most k unmasked keys (every one kept)."""
    top = scores.amax(-1, keepdim=True)
    kth = top
    for _ in range(k - 1):
        kth = torch.where(scores < kth, scores, NEG_INF).amax(-1, keepdim=True)
    keep = scores >= kth
    kept = keep.to(scores.dtype).sum(-1, keepdim=True)
    unmasked = (scores > NEG_INF).to(scores.dtype).sum(-1, keepdim=True)
    exact = ((kept == k) | (unmasked <= k)).all()
    return _softmax_of_kept(scores, keep, top), exact


def _softmax_grad(probs: Tensor, d_probs: Tensor) -> Tensor:
    weighted = probs * d_probs
    return weighted - probs * weighted.sum(-1, keepdim=True)


class TopKSoftmax(torch.autograd.Function):
    """Softmax over the entries of each last-dim row at least its k-th largest (all-zero
    weights on rows with every key masked); with ``fused``, by the compiled kernel (the
    general one where a tie makes it inexact)."""

    @staticmethod
    def forward(ctx, scores: Tensor, k: int, fused: bool) -> Tensor:
        probs = None
        if fused:  # as a plain tensor: no view's base or grad flag to guard on
            probs, exact = compiled(_fused_topk_weights)(scores.detach(), k)
            probs = probs if bool(exact) else None
        if probs is None:
            probs = _softmax_of_kept(scores, scores >= kth_largest(scores, k),
                                     scores.amax(-1, keepdim=True))
        ctx.fused = fused
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, d_probs: Tensor):
        (probs,) = ctx.saved_tensors
        grad = compiled(_softmax_grad) if ctx.fused else _softmax_grad
        return grad(probs, d_probs.detach()), None, None


def topk_softmax(scores: Tensor, k: int, impl: str = "torch") -> Tensor:
    """Top-k attention weights over the last dim (``k`` below its size); ``impl``
    ``"torch"`` or ``"compiled"`` (whose kernels see the scores as rows, so that no shape
    compiles them again; a single row or key, a graph of its own, runs eagerly)."""
    rows = scores.reshape(-1, scores.size(-1))
    fused = impl == "compiled" and 1 < rows.size(-1) < rows.numel()
    return TopKSoftmax.apply(rows, k, fused).view_as(scores)


@lru_cache(maxsize=None)
def _topk(k: int) -> Implementations:
    """The top-k kernels for this k, as ``--attn-impl`` picks them."""
    return Implementations("top-k", {"topk kernel": lambda s: topk_softmax(s, k)},
                           ("fused, compiled", lambda s: topk_softmax(s, k, "compiled")),
                           ("fused, triton", lambda s: topk_triton(s, k)))


def check_k(k: int) -> None:
    """ValueError, one line, unless ``k`` is an integer of at least 1."""
    try:
        whole = operator.index(k) >= 1
    except TypeError:
        whole = False
    if not whole:
        raise ValueError(f"top-k attention needs an integer k >= 1, got k={k!r}")


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
        check_k(k)
        self.k = k
        self.train_only = train_only

    def normalize(self, scores: Tensor) -> Tensor:
        if self.training or not self.train_only:
            return topk_weights(scores, self.k, self.impl)
        return guarded(partial(torch.softmax, dim=-1), scores)

    def extra_repr(self) -> str:
        return f"k={self.k}, train_only={self.train_only}, impl={self.impl}"
