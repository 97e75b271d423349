"""Constrained softmax and constrained sparsemax: attention with upper bounds.

Malaviya, Ferreira & Martins (2018) bound the attention each source word may receive. With
scores ``z`` and bounds ``u >= 0`` over the keys (last dimension)::

    csoftmax(z; u)   = argmin_{p in simplex, p <= u} KL(p || softmax(z))   (Martins & Kreutzer 2017)
    csparsemax(z; u) = argmin_{p in simplex, p <= u} ||p - z||^2           (Malaviya et al. 2018)

Both are solved for all rows at once by one sort, with closed-form gradients for ``z`` and
``u`` that are differentiable again; the algorithms, gradients and special inputs:
docs/methods.md, "Constrained softmax and sparsemax", and docs/library.md's contract.
"""

import math
from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn
from torch.autograd import Function

from ..errors import SparseAttnError
from .base import at_least_float32, check_scores

#: ``check=True`` accepts bound sums down to ``1 - FEASIBILITY_TOL`` (rounding slack:
#: bounds ``f - beta`` from float32 cumulative attention rarely sum to exactly 1).
FEASIBILITY_TOL = 1e-6


class InfeasibleBounds(SparseAttnError, ValueError):
    """Upper bounds under which no attention weights can sum to 1."""


def _prepare(name: str, scores: Tensor, upper: Tensor):
    """Check the dtypes, broadcast to one shape and compute in the scores' dtype, float32
    for half precision (the bounds follow)."""
    check_scores(scores, name)
    if upper.is_complex():
        raise TypeError(f"{name} needs real upper bounds, got {upper.dtype}")
    dtype = at_least_float32(scores).dtype
    scores, upper = torch.broadcast_tensors(scores.to(dtype), upper.to(dtype))
    return scores, upper


def _first(mask: Tensor) -> str:
    """Where the first True entry of ``mask`` is, for a message (nothing for a 0-d mask)."""
    index = tuple(mask.nonzero()[0].tolist())
    return f" at index {index}" if index else ""


def _check_feasible(scores: Tensor, upper: Tensor) -> None:
    """Raise InfeasibleBounds if a row with unmasked keys has a NaN or negative bound on
    one of them or cannot reach sum 1."""
    valid = ~torch.isneginf(scores)
    outside = valid & ~(upper >= 0)
    if bool(outside.any()):
        raise InfeasibleBounds(
            f"attention upper bounds must be >= 0 (and not NaN): {int(outside.sum())} "
            f"unmasked keys have NaN or negative bounds, the first{_first(outside)} "
            f"({upper[outside][0].item():.4g})")
    nonempty = valid.any(-1, keepdim=True)
    total = _bound_total(valid, upper)
    bad = nonempty & (total < 1.0 - FEASIBILITY_TOL)
    if bool(bad.any()):
        first = _first(bad[..., 0])
        raise InfeasibleBounds(
            f"infeasible attention upper bounds: in {int(bad.sum())} of {nonempty.numel()} "
            f"rows they sum to less than 1 over the unmasked keys (smallest sum "
            f"{total[bad].min().item():.6g}{'; the first' + first if first else ''}), so no "
            f"weights p <= u can sum to 1")


def _bound_total(valid: Tensor, upper: Tensor) -> Tensor:
    """Sum of the bounds over the unmasked keys, ``(..., 1)``."""
    return torch.where(valid, upper, torch.zeros_like(upper)).sum(-1, keepdim=True)


def _tight(total: Tensor) -> Tensor:
    """Rows whose bounds sum to at most 1, up to rounding: every key sits at its bound.

    Bounds ``f - beta`` often sum to 1 plus a few ulps; solving such a row for tau
    subtracts nearly equal prefix sums and can lose all precision (float32 gave weights
    summing to 0.19), while taking the bounds errs by the rounding only.
    """
    return total <= 1 + 64 * torch.finfo(total.dtype).eps


def _rows(scores: Tensor, upper: Tensor):
    """What both solvers start from: the unmasked keys; the bounds, +inf on masked keys
    (ignored); the scores less their row's maximum (the weights do not change, the rounding
    no longer grows with the scores); the rows to return as NaN, ``(..., 1)``: a NaN or +inf
    score (the maximum shows it), a NaN or negative bound on an unmasked key."""
    valid = scores > float("-inf")
    upper = upper.masked_fill(~valid, math.inf)
    top = scores.amax(-1, keepdim=True)
    broken = ~((top < math.inf) & (upper.amin(-1, keepdim=True) >= 0))
    return valid, upper, scores - top.masked_fill(torch.isneginf(top), 0.0), broken


def _zero_beside(keep: Tensor, values: Tensor, probs: Tensor) -> Tensor:
    """``values`` where ``keep``, else 0; NaN where ``probs`` is (NaN rows). Taking the 0
    as ``0 * probs`` keeps it on the graph under ``create_graph=True``; its derivative, 0,
    is the true one (the sets are constant between kinks)."""
    return torch.where(keep, values, probs * 0)


def _solve_csoftmax(scores: Tensor, upper: Tensor):
    """Weights (NaN in the rows :func:`_rows` finds broken) and saturated set of csoftmax."""
    valid, upper, z, broken = _rows(scores, upper)
    log_u = torch.log(upper)
    # Saturation order: z - log u descending; +inf for u = 0, -inf (never saturated)
    # for u = +inf and for masked keys.
    order = (z - log_u).sort(dim=-1, descending=True).indices
    z_sorted, u_sorted = z.gather(-1, order), upper.gather(-1, order)
    # Key j (in this order) saturates, given the keys before it did, iff its softmax
    # share of the mass they leave reaches its bound:
    #   (1 - sum_{k<j} u_k) exp(z_j - L_j) >= u_j,  L_j = log sum_{k>=j} exp(z_k),
    # tested in log space so that exp(z) may underflow (scores far below the top key,
    # which is often the one saturated). Only the leading run of saturations counts,
    # so the inf / NaN that +inf bounds and masked keys bring after it do no harm.
    before = u_sorted.cumsum(-1) - u_sorted
    from_here = z_sorted.flip(-1).logcumsumexp(-1).flip(-1)
    reaches = (z_sorted - from_here) + torch.log1p(-before) >= log_u.gather(-1, order)
    prefix = (~reaches).cumsum(-1) == 0
    saturated = torch.zeros_like(valid).scatter(-1, order, prefix)
    # A row whose bounds sum to <= 1 has every key saturated (clamped if < 1).
    saturated = torch.where(_tight(_bound_total(valid, upper)), valid, saturated) & ~broken
    # The free keys share what the saturated ones leave, in proportion to exp(z).
    rest = (1 - upper.masked_fill(~saturated, 0.0).sum(-1, keepdim=True)).clamp_min(0)
    rest = rest.masked_fill(broken, math.nan)
    free_scores = z.masked_fill(saturated, float("-inf"))
    top_free = free_scores.amax(-1, keepdim=True)
    weight = torch.exp(free_scores - top_free.masked_fill(torch.isneginf(top_free), 0.0))
    # (The top free key gives weight 1, so the sum is >= 1 unless no key is free.)
    shares = torch.minimum(rest * weight / weight.sum(-1, keepdim=True).clamp_min(1), upper)
    return torch.where(saturated, upper, shares), saturated


def _solve_csparsemax(scores: Tensor, upper: Tensor):
    """Weights (NaN in the rows :func:`_rows` finds broken), free set and upper set of
    csparsemax."""
    valid, upper, z, broken = _rows(scores, upper)
    bounded = torch.isfinite(upper)
    n = z.size(-1)
    # Breakpoint z_j - offset: as tau falls past z_j (offset 0) key j turns free
    # (slope +1); past z_j - u_j (offset u_j) it hits its bound (slope -1). Masked keys
    # and +inf bounds give -inf.
    source = torch.cat([z, z.masked_fill(~bounded, float("-inf"))], -1)
    offset = torch.cat([torch.zeros_like(z), upper.masked_fill(~bounded, 0.0)], -1)
    order = (source - offset).sort(dim=-1, descending=True).indices
    source, offset = source.gather(-1, order), offset.gather(-1, order)
    slope = torch.cat([valid.to(z.dtype), -bounded.to(z.dtype)], -1).gather(-1, order).cumsum(-1)
    # sum_j p_j(tau) at each breakpoint, from 0 at the top one by slope x gap (NaN or
    # +inf past the last finite breakpoint).
    gap = (source[..., :-1] - source[..., 1:]) - (offset[..., :-1] - offset[..., 1:])
    mass = torch.cat([torch.zeros_like(z[..., :1]), (slope[..., :-1] * gap).cumsum(-1)], -1)
    last = (mass <= 1).sum(-1, keepdim=True) - 1
    passed = torch.arange(2 * n, device=z.device) <= last
    passed = torch.zeros_like(passed).scatter(-1, order, passed)
    # Key j is free if one of its breakpoints is passed (its two tie where u_j is below
    # z_j's rounding; either may then come first), at its bound if both are.
    at_upper = passed[..., :n] & passed[..., n:] & bounded
    free = (passed[..., :n] ^ passed[..., n:]) & valid
    # A row whose bounds sum to <= 1 has every key at its bound (clamped if < 1).
    tight = _tight(_bound_total(valid, upper))
    at_upper = torch.where(tight, valid, at_upper)
    free = free & ~tight
    # tau = top + t, solved exactly on the sets: its rounding does not grow with z.
    top = z.masked_fill(~free, float("-inf")).amax(-1, keepdim=True)
    below_top = (z - top.masked_fill(torch.isneginf(top), 0.0)).masked_fill(~free, 0.0)
    t = ((below_top.sum(-1, keepdim=True) + upper.masked_fill(~at_upper, 0.0).sum(
        -1, keepdim=True) - 1) / free.sum(-1, keepdim=True).clamp_min(1))
    inside = torch.minimum((below_top - t).clamp_min(0), upper).masked_fill(~free, 0.0)
    probs = torch.where(at_upper, upper, inside).masked_fill_(broken, math.nan)
    return probs, free & ~broken, at_upper & ~broken


class _CSoftmax(Function):
    @staticmethod
    def forward(ctx, scores, upper, check):
        if check:
            _check_feasible(scores, upper)
        probs, saturated = _solve_csoftmax(scores, upper)
        ctx.save_for_backward(probs, saturated)
        return probs

    @staticmethod
    def backward(ctx, grad):
        probs, saturated = ctx.saved_tensors
        free = probs.masked_fill(saturated, 0.0)
        mass = free.sum(-1, keepdim=True)                            # = 1 - s
        empty = mass == 0
        m = ((free * grad).sum(-1, keepdim=True) / mass.masked_fill(empty, 1.0)).masked_fill(
            empty, 0.0)
        centred = grad - m
        d_scores = free * centred if ctx.needs_input_grad[0] else None
        d_upper = centred * saturated if ctx.needs_input_grad[1] else None   # NaN rows stay NaN
        return d_scores, d_upper, None


class _CSparsemax(Function):
    @staticmethod
    def forward(ctx, scores, upper, check):
        if check:
            _check_feasible(scores, upper)
        probs, free, at_upper = _solve_csparsemax(scores, upper)
        ctx.save_for_backward(probs, free, at_upper)
        return probs

    @staticmethod
    def backward(ctx, grad):
        probs, free, at_upper = ctx.saved_tensors
        n_free = free.sum(-1, keepdim=True).clamp_min(1)
        centred = grad - grad.masked_fill(~free, 0.0).sum(-1, keepdim=True) / n_free
        d_scores = _zero_beside(free, centred, probs) if ctx.needs_input_grad[0] else None
        d_upper = _zero_beside(at_upper, centred, probs) if ctx.needs_input_grad[1] else None
        return d_scores, d_upper, None


def _normalize(function, name: str, scores: Tensor, upper: Tensor, check: bool) -> Tensor:
    """``function`` on the prepared inputs; no keys give empty weights, as in torch.softmax
    (the product keeps both inputs on the graph)."""
    scores, upper = _prepare(name, scores, upper)
    if scores.size(-1) == 0:
        return scores * upper
    return function.apply(scores, upper, check)


def csoftmax(scores: Tensor, upper: Tensor, check: bool = False) -> Tensor:
    """Constrained softmax over the last dimension (Martins & Kreutzer 2017):
    ``argmin_{p in simplex, p <= u} KL(p || softmax(z))``, i.e. ``p_i = min(u_i, c exp(z_i))``.

    Args:
        scores: ``(..., S)``, floating point, ``-inf`` on masked keys.
        upper: bounds ``u >= 0`` (``+inf`` allowed), broadcastable to ``scores``.
        check: raise :class:`InfeasibleBounds` on a row whose bounds are NaN or negative
            on an unmasked key, or sum to < 1.

    Returns weights of the broadcast shape in the scores' dtype (float32 for half
    precision); NaN rows where a score is NaN or +inf or a bound is NaN or negative.
    """
    return _normalize(_CSoftmax, "csoftmax", scores, upper, check)


def csparsemax(scores: Tensor, upper: Tensor, check: bool = False) -> Tensor:
    """Constrained sparsemax over the last dimension (Malaviya et al. 2018):
    ``argmin_{p in simplex, p <= u} ||p - z||^2``, i.e.
    ``p_j = max(0, min(u_j, z_j - tau))``.

    Args, returns: as :func:`csoftmax`.
    """
    return _normalize(_CSparsemax, "csparsemax", scores, upper, check)


class ConstrainedNormalizer(nn.Module, ABC):
    """An attention normaliser with per-key upper bounds: ``forward(scores, upper)``.

    Args:
        check: raise :class:`InfeasibleBounds` when a row's bounds sum to < 1
            (costs a device-to-host read); otherwise such rows get the bounds as weights.
    """

    def __init__(self, check: bool = False):
        super().__init__()
        self.check = check

    def forward(self, scores: Tensor, upper: Tensor) -> Tensor:
        return self.normalize(scores, upper)

    @abstractmethod
    def normalize(self, scores: Tensor, upper: Tensor) -> Tensor:
        """Weights for ``scores`` (``-inf`` on masked keys) under bounds ``upper``."""

    def extra_repr(self) -> str:
        return f"check={self.check}"


class CSoftmax(ConstrainedNormalizer):
    """``csoftmax(z; u) = argmin_{p in simplex, p <= u} KL(p || softmax(z))``."""

    def normalize(self, scores: Tensor, upper: Tensor) -> Tensor:
        return csoftmax(scores, upper, self.check)


class CSparsemax(ConstrainedNormalizer):
    """``csparsemax(z; u) = argmin_{p in simplex, p <= u} ||p - z||^2``."""

    def normalize(self, scores: Tensor, upper: Tensor) -> Tensor:
        return csparsemax(scores, upper, self.check)


__all__ = ["FEASIBILITY_TOL", "ConstrainedNormalizer", "CSoftmax", "CSparsemax",
           "InfeasibleBounds", "csoftmax", "csparsemax"]
