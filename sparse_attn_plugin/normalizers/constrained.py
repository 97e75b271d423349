"""Constrained softmax and constrained sparsemax: attention with upper bounds.

Malaviya, Ferreira & Martins (2018), "Sparse and Constrained Attention for Neural
Machine Translation", bound the attention each source word may receive. Given scores
``z`` and upper bounds ``u >= 0`` over the keys (last dimension)::

    csoftmax(z; u)   = argmin_{p in simplex, p <= u} KL(p || softmax(z))
                     : p_i = min(u_i, c exp(z_i)),        c > 0 such that sum p = 1
    csparsemax(z; u) = argmin_{p in simplex, p <= u} ||p - z||^2
                     : p_j = max(0, min(u_j, z_j - tau)), tau such that sum p = 1

(csoftmax is Martins & Kreutzer 2017; csparsemax is new in Malaviya et al. 2018).
csoftmax is dense below its bounds; csparsemax can also give exact zeros.

Algorithms (vectorised, no loop over rows):

* csoftmax: the saturated set ``S = {i: p_i = u_i}`` is a prefix of the keys sorted by
  ``z_i - log u_i`` descending. One sort, a prefix sum of ``u`` and a suffix
  log-sum-exp of ``z`` find the longest prefix of keys whose share
  ``(1 - sum of u before it) exp(z_i) / (sum of exp(z) from it on)`` reaches ``u_i``
  (compared in log space, so no ``exp`` underflows); then the free keys get
  ``p_i = (1 - sum_S u) softmax(z over the free keys)_i``.
* csparsemax: ``sum_j clip(z_j - tau, 0, u_j)`` is piecewise linear in tau with
  breakpoints ``z_j`` and ``z_j - u_j``. One sort of the ``2n`` breakpoints and prefix
  sums give its value at each breakpoint, hence the linear piece where it crosses 1;
  tau is then solved exactly on the free set ``A = {0 < p < u}`` and upper set
  ``R = {p = u}`` found: ``tau = (sum_A z + sum_R u - 1) / |A|``.

Gradients (closed form, for both ``z`` and ``u``; ``g`` is the upstream gradient):

* csoftmax, with ``s = sum_S u`` and ``m = sum_{i not in S} p_i g_i / (1 - s)``:
  ``dz_i = [i not in S] p_i (g_i - m)``, ``du_i = [i in S] (g_i - m)``;
* csparsemax, with ``m = mean_{j in A} g_j``:
  ``dz_j = [j in A] (g_j - m)``, ``du_j = [j in R] (g_j - m)``;

with ``m = 0`` when there is no free key.

Masks and special bounds: masked keys have score ``-inf`` and get weight 0 whatever
their bound; a bound of 0 gives weight 0; a bound of ``+inf`` (the ``<SINK>`` token,
unbounded fertility) is never reached and gets gradient 0. Rows whose keys are all
masked give all-zero weights and zero gradients. Half precision is computed in
float32 and returned in float32, as :func:`.base.guarded` does.

Feasibility: weights ``0 <= p <= u`` summing to 1 exist iff the bounds are
non-negative and sum to at least 1 over the unmasked keys. With ``check=True`` an
infeasible row raises :class:`InfeasibleBounds` (the check reads a value back, which
stalls a GPU stream). Without it, an infeasible row (bounds summing to 1 or less) is
clamped: every key is saturated, so the weights equal the bounds and sum to less
than 1, with gradients from the formulas above (``dz = 0``, ``du = g``).

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
from torch.autograd.function import once_differentiable

from ..errors import SparseAttnError

#: ``check=True`` accepts bound sums down to ``1 - FEASIBILITY_TOL`` (rounding slack:
#: bounds ``f - beta`` from float32 cumulative attention rarely sum to exactly 1).
FEASIBILITY_TOL = 1e-6


class InfeasibleBounds(SparseAttnError, ValueError):
    """Upper bounds under which no attention weights can sum to 1."""


def _prepare(scores: Tensor, upper: Tensor):
    """Broadcast to one shape and compute in float32 or wider."""
    dtype = torch.promote_types(scores.dtype, upper.dtype)
    if dtype in (torch.float16, torch.bfloat16):
        dtype = torch.float32
    scores, upper = torch.broadcast_tensors(scores.to(dtype), upper.to(dtype))
    return scores, upper


def _check_feasible(valid: Tensor, upper: Tensor, total: Tensor) -> None:
    """Raise InfeasibleBounds if a row with unmasked keys cannot reach sum 1."""
    nonempty = valid.any(-1, keepdim=True)
    negative = valid & (upper < 0)
    if bool(negative.any()):
        raise InfeasibleBounds(
            f"attention upper bounds must be >= 0: {int(negative.sum())} unmasked keys "
            f"have negative bounds (smallest {upper[negative].min().item():.4g})")
    bad = nonempty & (total < 1.0 - FEASIBILITY_TOL)
    if bool(bad.any()):
        raise InfeasibleBounds(
            f"infeasible attention upper bounds: in {int(bad.sum())} of {nonempty.numel()} "
            f"rows they sum to less than 1 over the unmasked keys (smallest sum "
            f"{total[bad].min().item():.6g}), so no weights p <= u can sum to 1")


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


class _CSoftmax(Function):
    @staticmethod
    def forward(ctx, scores, upper, check):
        zero = torch.zeros_like(scores)
        valid = scores > float("-inf")
        total = _bound_total(valid, upper)
        if check:
            _check_feasible(valid, upper, total)
        # Saturation order: z - log u descending; +inf for u <= 0, -inf (never
        # saturated) for u = +inf and for masked keys (NaN when also u = 0).
        key = (scores - torch.log(upper.clamp_min(0))).nan_to_num_(nan=float("-inf"))
        key, order = key.sort(-1, descending=True)
        u_sorted = upper.gather(-1, order)
        # Key j (in this order) saturates, given the keys before it did, iff its softmax
        # share of the mass they leave reaches its bound:
        #   (1 - sum_{k<j} u_k) exp(z_j) / sum_{k>=j} exp(z_k) >= u_j,
        # tested in log space so that exp(z) may underflow (scores far below the top
        # key, which is often the one saturated). Only the leading run of saturations
        # counts, so the inf / NaN that +inf bounds bring into the sums after the run
        # (where the key is -inf) do no harm.
        before = u_sorted.cumsum(-1) - u_sorted
        from_here = scores.gather(-1, order).flip(-1).logcumsumexp(-1).flip(-1)
        reaches = (key > float("-inf")) & (key + torch.log1p(-before) >= from_here)
        prefix = (~reaches).cumsum(-1) == 0
        saturated = torch.zeros_like(valid).scatter(-1, order, prefix)
        # A row whose bounds sum to <= 1 has every key saturated (clamped if < 1).
        saturated = torch.where(_tight(total), valid, saturated)
        # The free keys share what the saturated ones leave, in proportion to exp(z).
        rest = (1 - upper.masked_fill(~saturated, 0.0).sum(-1, keepdim=True)).clamp_min(0)
        free_scores = scores.masked_fill(saturated, float("-inf"))
        norm = torch.logsumexp(free_scores, -1, keepdim=True)
        norm = torch.where(torch.isfinite(norm), norm, torch.zeros_like(norm))
        probs = torch.where(saturated, upper, torch.minimum(rest * torch.exp(free_scores - norm),
                                                            upper))
        probs = torch.where(valid, probs, zero)
        ctx.save_for_backward(probs, saturated)
        return probs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        probs, saturated = ctx.saved_tensors
        free = probs.masked_fill(saturated, 0.0)
        mass = free.sum(-1, keepdim=True)                            # = 1 - s
        weighted = (free * grad).sum(-1, keepdim=True)
        m = torch.where(mass > 0, weighted / mass.clamp_min(torch.finfo(mass.dtype).tiny),
                        torch.zeros_like(mass))
        centred = grad - m
        d_scores = free * centred if ctx.needs_input_grad[0] else None
        d_upper = centred.masked_fill(~saturated, 0.0) if ctx.needs_input_grad[1] else None
        return d_scores, d_upper, None


class _CSparsemax(Function):
    @staticmethod
    def forward(ctx, scores, upper, check):
        zero = torch.zeros_like(scores)
        neg_inf = torch.full_like(zero, float("-inf"))
        valid = scores > float("-inf")
        total = _bound_total(valid, upper)
        if check:
            _check_feasible(valid, upper, total)
        bounded = valid & torch.isfinite(upper)
        z = torch.where(valid, scores, zero)
        u = torch.where(bounded, upper, zero)
        # As tau falls past z_j, key j turns free (slope +1); past z_j - u_j it hits its
        # bound (slope -1, constant +u_j). Masked keys and +inf bounds add no breakpoint.
        points = torch.cat([torch.where(valid, z, neg_inf),
                            torch.where(bounded, z - u, neg_inf)], -1)
        d_count = torch.cat([valid.to(z.dtype), -bounded.to(z.dtype)], -1)
        d_const = torch.cat([z, u - torch.where(bounded, z, zero)], -1)
        points, order = points.sort(-1, descending=True)
        # Below breakpoint k, sum_j p_j(tau) = const_k - count_k tau: the free keys
        # give z_j - tau, the keys at their bound u_j.
        count = d_count.gather(-1, order).cumsum(-1)
        const = d_const.gather(-1, order).cumsum(-1)
        # sum_j p_j(tau) at each breakpoint (NaN or +inf past the last finite one).
        mass = const - count * points
        last = ((mass <= 1).sum(-1, keepdim=True) - 1).clamp_min(0)
        tau = (const.gather(-1, last) - 1) / count.gather(-1, last).clamp_min(1)
        # tau lies between breakpoint ``last`` and the next; clamping keeps it there when
        # the segment is flat (every key at 0 or its bound, mass exactly 1: any tau on it
        # gives the same weights, but the formula above would not land on it).
        below = points.gather(-1, (last + 1).clamp_max(points.size(-1) - 1))
        below = torch.where(last + 1 < points.size(-1), below, torch.full_like(below, -math.inf))
        tau = torch.minimum(torch.maximum(tau, below), points.gather(-1, last))
        # Exact solve of tau on the sets this tau gives (removes the prefix sums' rounding).
        free, upper_set = _sets(scores - tau, upper, valid)
        n_free = free.sum(-1, keepdim=True)
        exact = (torch.where(free, z, zero).sum(-1, keepdim=True)
                 + torch.where(upper_set, u, zero).sum(-1, keepdim=True) - 1)
        tau = torch.where(n_free > 0, exact / n_free.clamp_min(1), tau)
        shifted = scores - tau
        probs = torch.minimum(shifted.clamp_min(0), upper)
        free, upper_set = _sets(shifted, upper, valid)
        # A row whose bounds sum to <= 1 has every key at its bound (clamped if < 1).
        tight = _tight(total)
        probs = torch.where(tight, u, probs)
        probs = torch.where(valid, probs, zero)
        free = free & ~tight
        upper_set = torch.where(tight, valid, upper_set)
        ctx.save_for_backward(free, upper_set)
        return probs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        free, upper_set = ctx.saved_tensors
        n_free = free.sum(-1, keepdim=True)
        m = grad.masked_fill(~free, 0.0).sum(-1, keepdim=True) / n_free.clamp_min(1)
        centred = grad - m                                           # m = 0 if A is empty
        d_scores = centred.masked_fill(~free, 0.0) if ctx.needs_input_grad[0] else None
        d_upper = centred.masked_fill(~upper_set, 0.0) if ctx.needs_input_grad[1] else None
        return d_scores, d_upper, None


def _sets(shifted: Tensor, upper: Tensor, valid: Tensor):
    """Free set ``0 < z - tau < u`` and upper set ``z - tau >= u`` of csparsemax."""
    free = valid & (shifted > 0) & (shifted < upper)
    at_upper = valid & torch.isfinite(upper) & (shifted >= upper)
    return free, at_upper


def csoftmax(scores: Tensor, upper: Tensor, check: bool = False) -> Tensor:
    """Constrained softmax over the last dimension (Martins & Kreutzer 2017):
    ``argmin_{p in simplex, p <= u} KL(p || softmax(z))``, i.e.
    ``p_i = min(u_i, c exp(z_i))``.

    Args:
        scores: ``(..., S)``, ``-inf`` on masked keys.
        upper: bounds ``u >= 0`` (``+inf`` allowed), broadcastable to ``scores``.
        check: raise :class:`InfeasibleBounds` on a row whose bounds sum to < 1.

    Returns:
        Weights of the broadcast shape, float32 for half-precision inputs.
    """
    scores, upper = _prepare(scores, upper)
    return _CSoftmax.apply(scores, upper, check)


def csparsemax(scores: Tensor, upper: Tensor, check: bool = False) -> Tensor:
    """Constrained sparsemax over the last dimension (Malaviya et al. 2018):
    ``argmin_{p in simplex, p <= u} ||p - z||^2``, i.e.
    ``p_j = max(0, min(u_j, z_j - tau))``.

    Args, returns: as :func:`csoftmax`.
    """
    scores, upper = _prepare(scores, upper)
    return _CSparsemax.apply(scores, upper, check)


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
