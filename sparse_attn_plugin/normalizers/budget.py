"""Budget sparsemax: sparsemax with weights in [0, 1] that sum to a budget.

For a budget ``0 <= B <= n`` (the entmax package's ``budget_bisect``; with ``B = k`` an
integer, the k-subsets transformation of Santos, Niculae, McNamee & Martins 2024, "Sparse
and Structured Hopfield Networks", a relaxed choice of ``k`` of the ``n`` entries)::

    budget_sparsemax(x) = argmax_{0 <= p <= 1, sum p = B} <x, p> - ||p||^2 / 2
                        = argmin_{0 <= p <= 1, sum p = B} ||p - x||^2,
    p_j = clip(x_j - tau, 0, 1),   tau such that sum_j p_j = B.

It is constrained sparsemax (:func:`.constrained.csparsemax`, exact, by one sort) of scaled
scores: ``p = B q`` with ``q = argmin_{q in simplex, q <= 1/B} ||q - (x - max x) / B||^2``
(divide the problem by ``B``: ``p / B`` sums to 1 and is at most ``1 / B``), so its
closed-form gradient is csparsemax's, the centring on the free set ``0 < p < 1``::

    dx = g - mean_{j free} g_j   on the free entries, 0 elsewhere,

and a tensor ``B`` gets ``dB = mean_{j free} g_j`` through the same graph. ``B = 0`` has one
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
from .constrained import csparsemax
from .row_parameters import along_rows, checked

Budget = Union[float, Tensor]


def check_budget(budget, size: int, what: str = "budget_sparsemax") -> Budget:
    """``budget`` if every value of it lies in ``[0, size]`` (``size``: the entries of a
    slice; ``[0, inf)`` for an empty dim), as a float if it is a number; a one-line
    ValueError otherwise."""
    top = size if size > 0 else math.inf
    return checked(budget, lambda b: (b >= 0) & (b <= top) & torch.isfinite(b), "budget",
                   f"[0, {top}] (0 <= budget <= the size of dim)", what)


def _budget_rows(scores: Tensor, budget: Budget) -> Tensor:
    """Budget sparsemax over the last dim of float32/float64 rows with a finite maximum;
    NaN rows where the budget exceeds the unmasked entries (a NaN bound is csparsemax's
    sign of a broken row); at ``B = 0``, ``B`` times the uniform weights on the largest
    entries (0, with the gradient in ``B`` of the module docstring)."""
    given = torch.as_tensor(budget, dtype=scores.dtype, device=scores.device)
    zero = given == 0
    budget = torch.where(zero, 1.0, given)
    masked = torch.isneginf(scores)
    infeasible = budget > (~masked).sum(-1, keepdim=True)
    upper = torch.where(infeasible, math.nan, 1 / budget)
    # -inf / B would give the budget a NaN gradient: the masks of feasible rows are put back
    # after dividing (NaN rows keep them, and a NaN gradient on every entry)
    masked &= ~infeasible
    shifted = (scores - scores.detach().amax(-1, keepdim=True)).masked_fill(masked, 0.0)
    shifted = (shifted / budget).masked_fill(masked, -math.inf)
    q = csparsemax(shifted, upper)
    # 1 exactly at the bound (q = 1 / B there, and B q may round either side of 1)
    p = torch.where(q >= upper, 1.0, (budget * q).clamp_max(1.0))
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
    weights. ``B = 1`` is sparsemax. Solved by one sort as constrained sparsemax of ``x /
    B`` under bounds ``1 / B`` (module docstring), with its closed-form gradients (twice
    differentiable); the contract of docs/library.md ("The functions")."""
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
