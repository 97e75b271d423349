"""Constrained softmax and constrained sparsemax: attention with upper bounds.

Malaviya, Ferreira & Martins (2018), "Sparse and Constrained Attention for Neural
Machine Translation", bound the attention each source word may receive. Given scores
``z`` and upper bounds ``u >= 0`` over the keys (last dimension)::

    csoftmax(z; u)   = argmin_{p in simplex, p <= u} KL(p || softmax(z))
                     : p_i = min(u_i, c exp(z_i)),        c > 0 such that sum p = 1
    csparsemax(z; u) = argmin_{p in simplex, p <= u} ||p - z||^2
                     : p_j = max(0, min(u_j, z_j - tau)), tau such that sum p = 1

(csoftmax is Martins & Kreutzer 2017; csparsemax is new in Malaviya et al. 2018).
csoftmax is dense below its bounds; csparsemax can also give exact zeros. Both are
invariant to adding a constant to a row's scores: each row's maximum over its unmasked
keys is taken out first, so the error does not grow with the scores' size.

Algorithms (vectorised, no loop over rows):

* csoftmax: the saturated set ``S = {i: p_i = u_i}`` is a prefix of the keys sorted by
  ``z_i - log u_i`` descending. One sort, a prefix sum of ``u`` and a suffix
  log-sum-exp ``L_i`` of ``z`` find the longest prefix of keys whose share
  ``(1 - sum of u before it) exp(z_i - L_i)`` reaches ``u_i`` (compared in log space,
  ``z_i - L_i`` first, so that neither an underflowing ``exp`` nor a large ``z_i``
  hides ``log u_i``); then the free keys get
  ``p_i = (1 - sum_S u) softmax(z over the free keys)_i``.
* csparsemax: ``sum_j clip(z_j - tau, 0, u_j)`` is piecewise linear in tau with
  breakpoints ``z_j`` and ``z_j - u_j``. One sort of the ``2n`` breakpoints and a
  prefix sum of slope x gap (the gap between a key's two breakpoints is ``u_j`` itself,
  not a difference of large numbers) give its value at each breakpoint, hence the
  breakpoints above tau: the free set ``A = {0 < p < u}`` (one of the key's two
  breakpoints above tau) and upper set ``R = {p = u}`` (both).
  tau is solved on them relative to the top free score ``r``:
  ``tau - r = (sum_A (z - r) + sum_R u - 1) / |A|``.

Gradients (closed form, for both ``z`` and ``u``; ``g`` is the upstream gradient):

* csoftmax, with ``s = sum_S u`` and ``m = sum_{i not in S} p_i g_i / (1 - s)``:
  ``dz_i = [i not in S] p_i (g_i - m)``, ``du_i = [i in S] (g_i - m)``;
* csparsemax, with ``m = mean_{j in A} g_j``:
  ``dz_j = [j in A] (g_j - m)``, ``du_j = [j in R] (g_j - m)``;

with ``m = 0`` when there is no free key. The backward passes are written in torch
operations on the saved weights ``p`` and on ``g``, so they are differentiable again:
second derivatives (double backward, ``torch.autograd.functional.jvp``/``hvp``) are
exact away from the kinks where a key changes set (csparsemax, piecewise linear, has
second derivative 0 there).

Special inputs, row by row (a row is the keys of one query):

* a masked key (score ``-inf``) gets weight 0 and gradient 0 whatever its bound (a
  NaN or negative bound on it is ignored); a row whose keys are all masked gets all-zero
  weights and zero gradients;
* a bound of 0 gives weight 0; a bound of ``+inf`` (the ``<SINK>`` token, unbounded
  fertility) is never reached and gets gradient 0;
* a NaN or ``+inf`` score, or a NaN or negative (``-inf`` too) bound on an unmasked key,
  makes the whole row NaN, weights and gradients (as ``torch.softmax`` does for
  non-finite scores, so fp16 loss scalers see it); other rows are unaffected;
* scores must be floating point (else TypeError); the weights have the scores' dtype,
  except that half precision is computed in float32 and returned in float32, as
  :func:`.base.guarded` does (the bounds are cast to it); an empty last dimension gives an
  empty result.

Feasibility: weights ``0 <= p <= u`` summing to 1 exist iff the bounds are
non-negative and sum to at least 1 over the unmasked keys. With ``check=True`` a row
with a NaN or negative bound on an unmasked key, or whose bounds sum to less than 1,
raises :class:`InfeasibleBounds` (the check reads a value back, which stalls a GPU
stream). Without it, a row whose bounds sum to 1 or less is clamped: every key is
saturated, so the weights equal the bounds and sum to at most 1, with gradients from the
formulas above (``dz = 0``, ``du = g``).

The bounds are computed by the caller, not here: at decoder step t they are
``u_t = max(0, f - beta_{t-1})`` for fertilities ``f`` and cumulative attention
``beta_{t-1} = sum_{t' < t} p_{t'}``; a sink key with ``f = +inf`` keeps every step
feasible.
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
    """Weights (NaN rows as the module docstring says) and saturated set of csoftmax."""
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
    """Weights (NaN rows as the module docstring says), free set and upper set of
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
    ``argmin_{p in simplex, p <= u} KL(p || softmax(z))``, i.e.
    ``p_i = min(u_i, c exp(z_i))``.

    Args:
        scores: ``(..., S)``, floating point, ``-inf`` on masked keys.
        upper: bounds ``u >= 0`` (``+inf`` allowed), broadcastable to ``scores``.
        check: raise :class:`InfeasibleBounds` on a row whose bounds are NaN or negative
            on an unmasked key, or sum to < 1.

    Returns:
        Weights of the broadcast shape in the scores' dtype (float32 for half precision);
        NaN rows where a score is NaN or +inf or a bound is NaN or negative (see the
        module docstring).
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
            (costs a device-to-host read); otherwise such rows are clamped to the
            bounds (see the module docstring).
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
