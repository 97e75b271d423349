"""Sparsemax and 1.5-entmax by sorting, exactly, and the threshold of alpha-entmax.

alpha-entmax is ``p_j = [(alpha - 1) s_j - tau]_+ ^ (1 / (alpha - 1))`` with ``tau`` such
that ``sum_j p_j = 1``. With ``x = (alpha - 1)(s - max s)`` sorted descending, ``x_(1) >= ...``,
and ``c_k = sum_{j <= k} x_(j)``, the support is ``k*`` entries and ``tau`` in closed form,

sparsemax's (alpha = 2; Martins & Astudillo 2016) and 1.5-entmax's (Peters, Niculae &
Martins 2019, algorithm 2) as :mod:`.sorted_threshold` gives them. Given ``k``, the ``k``
largest entries are sorted first and more only where the support needs them
(:mod:`.entmax_partial`). Rows with every entry ``-inf`` get zero weights, rows with a NaN
or ``+inf`` NaN weights, and none raises.
"""

import math
from functools import partial
from typing import Optional, Tuple

import torch
from torch import Tensor

from .base import at_least_float32, check_scores, guarded
from .entmax_general import entmax_general
from .entmax_newton import newton_solve
from .entmax_partial import partial_sort_solve
from .sorted_threshold import sparsemax_tau_of_sorted, threshold_of_sorted

#: The alphas solved by a sort here; :func:`threshold_and_support` reads any other
#: alpha's threshold from a solver's weights.
SORTED_ALPHAS = (2.0, 1.5)


def _shifted(scores: Tensor, alpha: float) -> Tuple[Tensor, Tensor]:
    """``x = (alpha - 1)(s - max s)`` over the last dim, and the maxima; a row whose maximum
    is not finite gets a NaN in ``x`` (NaN weights, which empty rows then fill with 0)."""
    top = scores.amax(-1, keepdim=True)
    x = scores - top
    return (x if alpha == 2.0 else x * (alpha - 1)), top


@torch.no_grad()
def _sort_solve(scores: Tensor, alpha: float, dim: int, k: Optional[int],
                empty_rows: bool = True) -> Tensor:
    """alpha-entmax weights along ``dim`` by the sort (from the ``k`` largest entries, if
    given), for alpha 2 or 1.5; without ``empty_rows`` (the caller knows every row has an
    unmasked key) no fill."""
    scores = at_least_float32(scores)
    if dim not in (-1, scores.dim() - 1):
        scores = scores.movedim(dim, -1)
    if scores.size(-1) == 0:
        return scores.clone().movedim(-1, dim)
    if k is not None:
        p = guarded(partial(partial_sort_solve, alpha=alpha, k=k), scores)
        return p if dim in (-1, p.dim() - 1) else p.movedim(-1, dim)
    x, top = _shifted(scores, alpha)
    xs = x.sort(-1, descending=True).values
    tau = sparsemax_tau_of_sorted(xs) if alpha == 2.0 else threshold_of_sorted(xs, alpha)[0]
    u = (x - tau).clamp_min(0)                   # NaN stays NaN
    p = u if alpha == 2.0 else u * u
    if empty_rows:
        p = p.masked_fill(torch.isneginf(top), 0.0)
    return p if dim in (-1, p.dim() - 1) else p.movedim(-1, dim)


def sparsemax_sort(scores: Tensor, dim: int = -1, k: Optional[int] = None) -> Tensor:
    """sparsemax of float32/float64 ``scores`` along ``dim`` by the sort, with no graph
    (:func:`.entmax_family.by_sort` gives it gradients). ``k``: the partial sort from the
    ``k`` largest (:mod:`.entmax_partial`), exact whatever ``k``."""
    return _sort_solve(scores, 2.0, dim, k)


def entmax15_sort(scores: Tensor, dim: int = -1, k: Optional[int] = None) -> Tensor:
    """1.5-entmax of float32/float64 ``scores`` along ``dim`` by the sort, as
    :func:`sparsemax_sort` (no graph; ``k`` the same)."""
    return _sort_solve(scores, 1.5, dim, k)


def sorted_step(scores: Tensor, alpha: float) -> Tensor:
    """alpha-entmax (2 or 1.5) over the last dim of rows with an unmasked key each, by the
    sort, with no graph: the same weights as :func:`sparsemax_sort` and
    :func:`entmax15_sort` (a NaN or ``+inf`` already makes its row NaN), less the empty-row
    fill."""
    return _sort_solve(scores, alpha, -1, None, empty_rows=False)


@torch.no_grad()
def threshold_and_support(scores: Tensor, alpha: float, dim: int = -1) -> Tuple[Tensor, Tensor]:
    """``(tau, support_size)`` of alpha-entmax along ``dim`` for a finite number ``alpha >
    1``: ``tau`` such that ``p_j = [(alpha - 1) s_j - tau]_+ ^ (1 / (alpha - 1))`` in the
    scores' own scale (unshifted), and ``|{j : p_j > 0}|`` (int64), both with ``dim`` kept
    at size 1. Exactly by the sort at alpha 2 and 1.5, else from the weights of the Newton
    solver (alpha < 2) or :mod:`.entmax_general`'s (alpha > 2): ``tau = (alpha - 1) max s -
    (max p)^(alpha - 1)`` (at alpha <= 1 every entry is in the support: no threshold). The
    entmax package's convention: its ``_sparsemax_threshold_and_support(s)`` at alpha 2,
    ``_entmax_threshold_and_support(s / 2)`` at 1.5. No gradient. A row with every entry
    ``-inf`` has support 0 and ``tau = +inf`` (no entry passes); a NaN or ``+inf`` score is
    a ValueError (no threshold exists)."""
    check_scores(scores, "threshold_and_support")
    try:
        value = math.nan if isinstance(alpha, (bool, Tensor)) else float(alpha)
    except (TypeError, ValueError):
        value = math.nan
    if not 1.0 < value < math.inf:
        shown = " ".join(repr(alpha).split())
        raise ValueError(f"threshold_and_support needs a finite number alpha > 1, got {shown}")
    scores = at_least_float32(scores).movedim(dim, -1)
    top = scores.amax(-1, keepdim=True) if scores.size(-1) else scores.new_full(
        (*scores.shape[:-1], 1), -math.inf)     # an empty slice: as if all masked
    invalid = torch.isnan(top) | torch.isposinf(top)
    if bool(invalid.any()):
        raise ValueError(f"threshold_and_support: {int(invalid.sum())} of {invalid.numel()} "
                         "slices have a NaN or +inf score, and no threshold")
    if scores.size(-1) == 0:
        tau, support = top, torch.zeros_like(top, dtype=torch.long)
    elif value in SORTED_ALPHAS:
        xs = _shifted(scores, value)[0].sort(-1, descending=True).values
        tau, support = threshold_of_sorted(xs, value)
    else:
        p, _ = (newton_solve if value < 2.0 else entmax_general)(scores, value)
        support = (p > 0).sum(-1, keepdim=True)
        tau = -p.amax(-1, keepdim=True) ** (value - 1)
    empty = torch.isneginf(top)
    tau = torch.where(empty, math.inf, tau + (value - 1) * top.masked_fill(empty, 0.0))
    return tau.movedim(-1, dim), support.masked_fill(empty, 0).movedim(-1, dim)
