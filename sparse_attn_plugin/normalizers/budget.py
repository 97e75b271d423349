"""Budget sparsemax: sparsemax with weights in [0, 1] that sum to a budget.

For a budget ``0 <= B <= n`` (the entmax package's ``budget_bisect``; with ``B = k`` an
integer, the k-subsets transformation of Santos, Niculae, McNamee & Martins 2024, "Sparse
and Structured Hopfield Networks", a relaxed choice of ``k`` of the ``n`` entries)::

    budget_sparsemax(x) = argmax_{0 <= p <= 1, sum p = B} <x, p> - ||p||^2 / 2
                        = argmin_{0 <= p <= 1, sum p = B} ||p - x||^2,
    p_j = clip(x_j - tau, 0, 1),   tau such that sum_j p_j = B.

``f(tau) = sum_j clip(x_j - tau, 0, 1)`` is piecewise linear, bending where an entry turns
free (``tau = x_j``) or reaches 1 (``tau = x_j - 1``), so one sort of those points and
cumulative sums give ``tau`` exactly; only a row's largest entries can weigh anything, so
over long rows (or a small budget) the sort takes those alone, more where the weights reach
past them (as :mod:`.entmax_partial` does). It is constrained sparsemax of scaled scores
(``p = B q`` with ``q = argmin_{q in simplex, q <= 1/B} ||q - x / B||^2``), so its
closed-form gradient is csparsemax's, the centring on the free set ``0 < p < 1``::

    dx = g - mean_{j free} g_j   on the free entries, 0 elsewhere,

and a tensor ``B`` gets ``dB = mean_{j free} g_j``. ``B = 0`` has one
feasible point, ``p = 0``, so ``dx = 0``; ``dB`` is then the mean of ``g`` over the largest
entries, its value as ``B`` grows from 0 (where they are the free set). The contract:
docs/library.md, "The functions"; a slice with fewer unmasked entries than ``B`` (so no such
weights exist) gets NaN weights and gradient, as a NaN score does.
"""

import math
from functools import partial
from typing import Union

import torch
from torch import Tensor, nn

from .base import check_scores, normalize_along
from .dispatch import long_rows
from .entmax_partial import FIRST_K
from .row_parameters import along_rows, checked

Budget = Union[float, Tensor]
#: How much :func:`_budget_threshold_of_top`'s ``k`` grows each time it falls short.
GROWTH = 8


def check_budget(budget, size: int, what: str = "budget_sparsemax") -> Budget:
    """``budget`` if every value of it lies in ``[0, size]`` (``size``: the entries of a
    slice; ``[0, inf)`` for an empty dim), as a float if it is a number; a one-line
    ValueError otherwise."""
    top = size if size > 0 else math.inf
    return checked(budget, lambda b: (b >= 0) & (b <= top) & torch.isfinite(b), "budget",
                   f"[0, {top}] (0 <= budget <= the size of dim)", what)


def _budget_threshold(x: Tensor, budget: Tensor) -> Tensor:
    """``tau`` with ``sum_j clip(x_j - tau, 0, 1) = B`` in every row of ``x`` (maximum 0,
    ``-inf`` on masked entries, ``0 <= B <=`` the unmasked entries), by one sort of the
    ``2n`` points where ``f(tau) = sum_j clip(x_j - tau, 0, 1)`` bends: ``x_j``, below which
    ``j`` is free, and ``x_j - 1``, below which it is at 1. Between two such points ``f`` is
    ``sum_free x_j - n_free tau + n_at_1``; read at each point in turn (cumulative sums), it
    rises, and ``tau`` solves the piece where it passes ``B`` (any point of a flat piece:
    the weights are the same)."""
    n = x.size(-1)
    masked = torch.isneginf(x)
    values = torch.where(masked, 0.0, x)
    points, order = torch.cat([x, x - 1], -1).sort(-1, descending=True)
    enters = torch.cat([(~masked).to(x.dtype), -(~masked).to(x.dtype)], -1).gather(-1, order)
    entry = torch.cat([values, values], -1).gather(-1, order)
    free = enters.cumsum(-1)
    free_sum = (enters * entry).cumsum(-1)
    at_one = (enters < 0).to(x.dtype).cumsum(-1)
    # f at each point; a masked entry's points (-inf) come last and give NaN, never <= B
    f = free_sum - free * torch.where(torch.isneginf(points), math.nan, points) + at_one
    last = ((f <= budget).sum(-1, keepdim=True) - 1).clamp(0, 2 * n - 1)
    free, free_sum, at_one = (t.gather(-1, last) for t in (free, free_sum, at_one))
    flat = free == 0
    return torch.where(flat, points.gather(-1, last),
                       (free_sum + at_one - budget) / torch.where(flat, 1.0, free))


def _budget_threshold_of_top(x: Tensor, budget: Tensor, k: int) -> Tensor:
    """:func:`_budget_threshold` from each row's ``k`` largest entries, ``k`` growing by
    :data:`GROWTH` up to the row until the ``k``-th is at most the
    threshold they give: then no entry past them weighs anything, and the threshold is
    the row's (docs/methods.md, "Long rows")."""
    while True:
        k = min(k, x.size(-1))
        top = x.topk(k, -1).values
        tau = _budget_threshold(top, budget)
        if k == x.size(-1) or bool((top[..., -1:] <= tau).all()):
            return tau
        k *= GROWTH


class _Budget(torch.autograd.Function):
    """``p = clip(x - tau, 0, 1)`` at :func:`_budget_threshold` (NaN stays NaN), with the
    closed-form gradients of the module docstring: ``dx = g - mean_free g`` on the free entries, 0
    elsewhere, and ``dB = mean_free g`` (0 where nothing is free); NaN on a NaN row (a NaN
    budget's); written in torch operations on the saved weights, so they differentiate
    again."""

    @staticmethod
    def forward(ctx, x: Tensor, budget: Tensor) -> Tensor:
        # the weights are nonzero on at most B entries at 1 and the free ones after them
        first = FIRST_K if long_rows(x) else 4 * (int(budget.nan_to_num(0.0).max()) + 2)
        tau = _budget_threshold(x, budget) if first >= x.size(-1) else \
            _budget_threshold_of_top(x, budget, first)
        # 1 exactly where x_j - 1 >= tau (x_j - tau may round below 1 there)
        p = torch.where(x - 1 >= tau, 1.0, (x - tau).clamp(0.0, 1.0))
        ctx.save_for_backward(p)
        ctx.budget_shape = budget.shape
        return p

    @staticmethod
    def backward(ctx, g: Tensor):
        (p,) = ctx.saved_tensors
        free = ((p > 0) & (p < 1)).to(g.dtype)
        count = free.sum(-1, keepdim=True)
        nan = p.sum(-1, keepdim=True) * 0                   # NaN on a NaN row, else 0
        mean = (g * free).sum(-1, keepdim=True) / count.clamp_min(1.0) + nan
        return (g - mean) * free + nan, mean.sum_to_size(ctx.budget_shape)


def _budget_rows(scores: Tensor, budget: Budget) -> Tensor:
    """Budget sparsemax over the last dim of float32/float64 rows with a finite maximum;
    NaN rows where the budget exceeds the unmasked entries; at ``B = 0``, ``B`` times the
    uniform weights on the largest entries (0, with the gradient in ``B`` of the module
    docstring)."""
    given = torch.as_tensor(budget, dtype=scores.dtype, device=scores.device)
    zero = given == 0
    masked = torch.isneginf(scores)
    infeasible = given > (~masked).sum(-1, keepdim=True)
    shifted = scores - scores.detach().amax(-1, keepdim=True)
    # a budget the row cannot meet is a NaN one: NaN weights, and NaN gradients to the scores
    solvable = torch.where(infeasible, math.nan, given).expand(*shifted.shape[:-1], 1)
    p = _Budget.apply(shifted, solvable)
    top = (scores == scores.amax(-1, keepdim=True)).to(scores.dtype)
    return torch.where(zero, given * top / top.sum(-1, keepdim=True), p)


def budget_sparsemax(x: Tensor, budget: Budget = 2, dim: int = -1) -> Tensor:
    """Budget sparsemax (the entmax package's ``budget_bisect``; k-subsets in Santos et al.
    2024, "Sparse and Structured Hopfield Networks"), exact::

        budget_sparsemax(x) = argmax_{0 <= p <= 1, sum p = B} <x, p> - ||p||^2 / 2,
        p_j = clip(x_j - tau, 0, 1),   tau such that sum_j p_j = B.

    ``budget`` ``B``: in ``[0, n]`` for ``n`` the size of ``dim`` (else ValueError), a number
    or a tensor broadcastable to ``x`` with size 1 along ``dim`` (read back to check, which
    waits for a GPU), differentiable; a slice with fewer than ``B`` unmasked entries gets NaN
    weights. ``B = 1`` is sparsemax. Solved exactly by one sort of the points where the
    weights' sum bends (of the largest entries' alone where they suffice; module docstring),
    with the closed-form gradients (twice differentiable); the contract of docs/library.md
    ("The functions")."""
    check_scores(x, "budget_sparsemax")
    size = x.size(dim) if x.dim() else 1
    budget = along_rows(check_budget(budget, size), x, dim, "budget", "budget_sparsemax")
    return normalize_along(partial(_budget_rows, budget=budget), x, dim,
                           name="budget_sparsemax")


class BudgetSparsemax(nn.Module):
    """:func:`budget_sparsemax` along ``dim`` with ``budget`` fixed."""

    def __init__(self, budget: Budget = 2, dim: int = -1):
        super().__init__()
        self.budget, self.dim = budget, dim

    def forward(self, x: Tensor) -> Tensor:
        return budget_sparsemax(x, self.budget, self.dim)

    def extra_repr(self) -> str:
        budget = "tensor" if isinstance(self.budget, Tensor) else self.budget
        return f"budget={budget}, dim={self.dim}"


__all__ = ["BudgetSparsemax", "budget_sparsemax", "check_budget"]
