"""alpha-entmax over long rows (an output layer's vocabulary) from their largest entries.

Every alpha > 1 has ``tau >= -1`` over ``x = (alpha - 1)(s - max s)`` (the largest weight,
``(-tau)^r``, is at most 1), so the support lies among a row's largest entries. The
threshold of the ``k`` largest (:func:`largest`, by groups' maxima) is the row's exactly
when the ``k``-th of them is outside that threshold's support. It is also a lower bound of
the row's (more entries raise it), so the other rows are solved once more over their
entries above it (:func:`_above_bound`, by the Newton solver). Each first try solves only
``k`` entries (closed form at alpha 2 and 1.5, :mod:`.entmax_newton` in (1, 2), above 2
Newton steps on the last support entry's weight, :func:`_weights_above_two`): a row of
``V`` costs a pass for its groups' maxima and a scatter when the support is short, where a
full sort costs ``V log V``. docs/methods.md, "Long rows".
"""

import math
from functools import partial
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .base import check_count, guarded
from .entmax_grad import entmax_function
from .entmax_newton import entmax_threshold, newton_solve
from .sorted_threshold import sparsemax_tau_of_sorted, threshold_of_sorted

#: The first ``k`` when the caller gives none: the supports of trained output layers are
#: shorter (docs/methods.md, "Long rows"); above alpha 2, a few entries (``FIRST_K_ABOVE_2``).
FIRST_K, FIRST_K_ABOVE_2 = 64, 4
#: The lower bound of a threshold is lowered by this many machine epsilons (relative), so
#: that no support entry is left out by a rounding.
CUT_MARGIN = 16
#: Columns per group of :func:`largest`, and how many times ``k`` groups' columns a row
#: must hold for it to take them rather than ``topk`` the row.
GROUP, GROUPS_FROM = 16, 4


class Support(NamedTuple):
    """Some rows' largest entries: ``rows`` (``None``: every row), and for each the columns
    ``index`` ``(n, k)`` of its ``k`` largest scores, those scores less the row's maximum
    (``shifted``), and their weights ``p`` (0 past the support). A row may come more than
    once in ``rows``, each time with other entries."""

    rows: Optional[Tensor]
    index: Tensor
    shifted: Tensor
    p: Tensor


def _top_weights(shifted: Tensor, alpha: float) -> Tensor:
    """alpha-entmax weights of rows ``shifted = s - max s`` sorted descending (``-inf``
    allowed after the first entry), as if they were the whole row."""
    x = shifted if alpha == 2.0 else shifted * (alpha - 1)
    if alpha > 2.0:
        return _weights_above_two(x, 1 / (alpha - 1))
    if alpha == 2.0:
        return (x - sparsemax_tau_of_sorted(x)).clamp_min(0)
    if alpha == 1.5:
        tau, _ = threshold_of_sorted(x, 1.5)
        return (x - tau).clamp_min(0).square()
    u, ur1 = entmax_threshold(x, 1 / (alpha - 1))
    p = ur1 * u
    return p / p.sum(-1, keepdim=True)


def _weights_above_two(x: Tensor, r: float, tol: float = 1e-14, max_steps: int = 50) -> Tensor:
    """Weights ``(x_j - tau)_+^r`` summing to 1 over rows ``x`` sorted descending with
    ``x_1 = 0`` (``-inf`` allowed after it), for ``0 < r < 1`` (alpha above 2), solved in
    float64. The support is read off ``F(x_j) = sum_i (x_i - x_j)_+^r`` (below 1 exactly
    for its ``s`` entries). On it the unknown is the last entry's weight ``w = (x_s -
    tau)^r``: with ``d_i = x_i - x_s`` and ``v = w^(1/r)``, ``Psi(w) = sum_i (d_i + v)^r - 1``
    rises from ``F(x_s) - 1 < 0`` at 0 with a slope ``sum_i (v / (d_i + v))^(1 - r)`` between
    1 and ``s``: no infinite slope where the last entry leaves the support, as ``tau`` has,
    so Newton steps (bisecting where one leaves ``[0, 1]``) converge in a few."""
    given = x.dtype
    x = x.double()
    width = x.size(-1)
    gaps = (x.unsqueeze(-1) - x.unsqueeze(-2)).clamp_min(0)     # x_i - x_j, NaN at -inf
    support = (gaps.pow(r).sum(-2) < 1).sum(-1, keepdim=True)    # F(x_1) = 0: at least 1
    on = torch.arange(width, device=x.device) < support
    d = torch.where(on, x - x.gather(-1, support - 1), 0.0)
    w, lo, hi = torch.zeros_like(d[..., :1]), torch.zeros_like(d[..., :1]), torch.ones_like(
        d[..., :1])
    for _ in range(max_steps):
        v = w.pow(1 / r)
        excess = torch.where(on, (d + v).pow(r), 0.0).sum(-1, keepdim=True) - 1
        if bool((excess.abs() <= tol).all()):
            break
        below = excess < 0
        lo, hi = torch.where(below, w, lo), torch.where(below, hi, w)
        ratio = torch.where(d == 0, 1.0, v / (d + v))
        slope = torch.where(on, ratio.pow(1 - r), 0.0).sum(-1, keepdim=True)
        newton = w - excess / slope
        step = torch.where((newton >= lo) & (newton <= hi), newton, (lo + hi) / 2)
        w = torch.where(excess.abs() <= tol, w, step)      # a solved row stays
    p = torch.where(on, (d + w.pow(1 / r)).pow(r), 0.0)
    return (p / p.sum(-1, keepdim=True)).to(given)


def _reaches_last(shifted: Tensor, alpha: float) -> Tensor:
    """Whether the support of rows ``shifted`` (as :func:`_top_weights` takes them) would
    hold their last entry: ``F(x_last) < 1`` for ``F(tau) = sum_j (x_j - tau)_+^r``, which
    decreases in ``tau``, so that the threshold lies below ``x_last``. One pass, no solve
    (NaN, as where ``x_last`` is ``-inf`` among others, says no)."""
    x = shifted if alpha == 2.0 else shifted * (alpha - 1)
    gaps = x - x[:, -1:]
    if alpha != 2.0:
        gaps = gaps.pow(1 / (alpha - 1))
    return gaps.sum(-1) < 1


def check_first_k(k: Optional[int], alpha, name: str) -> Optional[int]:
    """``k`` as given to a function or loss (an integer >= 1, for one alpha above 1: the
    partial sort's first guess), or ``None``; a one-line ValueError naming ``name``
    otherwise."""
    if k is None:
        return None
    if isinstance(alpha, Tensor) or alpha is None or alpha <= 1:
        raise ValueError(f"{name}: k (the partial sort's first guess) needs one alpha above 1")
    return check_count(k, "k", name)


def first_k(alpha: float) -> int:
    """The partial sort's first ``k`` at ``alpha`` when the caller gives none."""
    return FIRST_K_ABOVE_2 if alpha > 2 else FIRST_K


def top_supports(scores: Tensor, alpha: float, k: Optional[int] = None) -> List[Support]:
    """The supports of alpha-entmax (a number > 1) of rows ``scores`` ``(N, V)`` (float32 or
    float64, each with a finite maximum; ``-inf`` allowed elsewhere), found among each row's
    ``k`` largest entries (:func:`first_k` if not given), or for the rows whose support
    reached that many among their entries above a lower bound of their threshold
    (:func:`_above_bound`). Exact: each row's weights are those of the whole row."""
    k = first_k(alpha) if k is None else check_count(k, "k", "the partial sort")
    width = scores.size(-1)
    top, index = largest(scores, min(k, width))
    shifted = top - top[:, :1]
    p = _top_weights(shifted, alpha)
    if k >= width or not bool((longer := _reaches_last(shifted, alpha)).any()):
        return [Support(None, index, shifted, p)]
    kept = ~longer
    supports = [] if not bool(kept.any()) else [
        Support(_select(None, kept), index[kept], shifted[kept], p[kept])]
    return supports + [_above_bound(scores, alpha, top[:, 0], p[:, 0], longer)]


def _above_bound(scores: Tensor, alpha: float, top: Tensor, first: Tensor,
                 longer: Tensor) -> Support:
    """The supports of rows ``longer`` of ``scores`` from their entries at or above the
    threshold of their ``k`` largest, ``top - first^(alpha - 1) / (alpha - 1)`` (``top``
    the row's maximum, ``first`` its weight among those ``k``): a lower bound of the row's
    threshold, as more entries raise it. Each row's candidates, padded with ``-inf`` to the
    power of two at or above their count (so that a row's digits depend on it alone), are
    solved by :func:`_padded_weights`; each is returned as a row of one (``rows`` gives each
    entry's row)."""
    cut = top - first.pow(alpha - 1) / (alpha - 1)
    cut = cut - CUT_MARGIN * torch.finfo(cut.dtype).eps * (1 + cut.abs())    # rounding
    row, column = (scores >= cut.masked_fill(~longer, math.inf).unsqueeze(-1)).nonzero(
        as_tuple=True)
    counts = torch.bincount(row, minlength=scores.size(0))
    slot = torch.arange(row.numel(), device=row.device) - (counts.cumsum(0) - counts)[row]
    sizes = torch.exp2(torch.log2(counts.clamp_min(1)).ceil()).long().clamp_max(scores.size(-1))
    values, widths = scores[row, column], sizes[row]
    solved = torch.empty_like(values)
    for size in sizes[longer].unique().tolist():
        mine = (widths == size).nonzero().squeeze(-1)
        packed = ((sizes == size) & longer).cumsum(0)[row[mine]] - 1
        padded = values.new_full((int(packed[-1]) + 1, size), -math.inf)
        padded[packed, slot[mine]] = values[mine]
        solved[mine] = _padded_weights(padded, alpha)[packed, slot[mine]]
    return Support(row, column.unsqueeze(-1), (values - top[row]).unsqueeze(-1),
                   solved.unsqueeze(-1))


def _padded_weights(padded: Tensor, alpha: float) -> Tensor:
    """alpha-entmax of rows of candidates padded with ``-inf``: by the Newton solver in (1,
    2]; above 2 sorted and solved on the last support weight (:func:`_weights_above_two`),
    as a threshold solver loses small weights there."""
    if alpha <= 2:
        return newton_solve(padded, alpha)[0]
    top, order = padded.sort(-1, descending=True)
    return torch.empty_like(padded).scatter_(-1, order, _top_weights(top - top[:, :1], alpha))


def largest(scores: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """The ``k`` largest entries of each row of ``scores`` ``(N, V)``, descending, and their
    columns. A long row is cut into ``GROUP`` groups ``j, j + n, j + 2n, ...`` (``n = V //
    GROUP``; the last ``V - n GROUP`` columns join every row's candidates): a group holding
    one of the ``k`` largest values has a maximum at least as large, and fewer than ``k``
    other groups can have a larger one, so the ``k`` groups of largest maxima hold the ``k``
    largest values (ties: the same values). One pass for the maxima, then ``topk`` over
    ``k GROUP`` candidates instead of ``V``."""
    count, width = scores.shape
    if GROUPS_FROM * GROUP * k > width:
        return scores.topk(k, -1)
    n = width // GROUP
    maxima = scores[:, :n * GROUP].reshape(count, GROUP, n).amax(1)
    groups = maxima.topk(k, -1, sorted=False).indices
    columns = (groups.unsqueeze(-1) + torch.arange(0, n * GROUP, n, device=scores.device))
    columns = columns.view(count, k * GROUP)
    if n * GROUP < width:
        tail = torch.arange(n * GROUP, width, device=scores.device)
        columns = torch.cat([columns, tail.expand(count, -1)], -1)
    values, at = scores.gather(-1, columns).topk(k, -1, sorted=False)
    values, order = values.sort(-1, descending=True)
    return values, columns.gather(-1, at.gather(-1, order))


def _select(rows: Optional[Tensor], which: Tensor) -> Tensor:
    """The row numbers ``which`` picks from ``rows`` (``None``: ``0 .. len(which) - 1``)."""
    picked = which.nonzero().squeeze(-1)
    return picked if rows is None else rows[picked]


def scatter_weights(supports: List[Support], shape, scale: Optional[Tensor] = None,
                    log: bool = False) -> Tensor:
    """The dense weights ``(N, V)`` of ``supports`` (zeros off them), each row times its
    ``scale`` ``(N,)`` if given; or, ``log``, their logarithms (``-inf`` off them), taken on
    the supports alone (a logarithm of 0 is slow on a CPU)."""
    weights = supports[0].p.new_full(shape, -math.inf if log else 0.0)
    for rows, index, _, p in supports:
        if log:
            p = p.log()
        if scale is not None:
            p = p * (scale if rows is None else scale[rows]).unsqueeze(-1).to(p.dtype)
        if rows is None:
            weights.scatter_(-1, index, p)
        else:   # at positions of the flattened weights: faster than indexing rows, columns
            flat = index + rows.unsqueeze(-1) * shape[-1]
            weights.view(-1).scatter_(0, flat.view(-1), p.reshape(-1))
    return weights


def row_sums(supports: List[Support], terms, rows: int) -> Tensor:
    """``sum_j terms(shifted, p)_j`` of each of ``rows`` rows, over its support only."""
    sums = supports[0].p.new_zeros(rows)
    for support in supports:
        on = support.p > 0
        total = torch.where(on, terms(support.shifted, support.p), 0.0).sum(-1)
        if support.rows is None:
            sums = total
        else:
            sums.index_add_(0, support.rows, total)
    return sums


@torch.no_grad()
def partial_sort_solve(scores: Tensor, alpha: float, k: Optional[int] = None) -> Tensor:
    """alpha-entmax (a number > 1) over the last dim of float32/float64 scores whose rows each
    have a finite maximum (:func:`.base.guarded` sees to the others), by
    :func:`top_supports`; no graph."""
    rows = scores.reshape(-1, scores.size(-1))
    return scatter_weights(top_supports(rows, alpha, k), rows.shape).view_as(scores)


@torch.no_grad()
def partial_sort_log_weights(scores: Tensor, alpha: float) -> Tensor:
    """``log alpha-entmax`` (``-inf`` off the support) over the last dim of float32/float64
    scores whose rows each have a finite maximum, by :func:`top_supports`; no graph: what a
    decoding step over a vocabulary needs."""
    rows = scores.reshape(-1, scores.size(-1))
    return scatter_weights(top_supports(rows, alpha), rows.shape, log=True).view_as(scores)


def partial_sort_entmax(scores: Tensor, alpha: float, k: Optional[int] = None) -> Tensor:
    """alpha-entmax (a number > 1) over the last dim of float32/float64 scores by the partial
    sort from ``k`` (:func:`first_k` if not given), guarded (:func:`.base.guarded`), with
    :mod:`.entmax_grad`'s closed-form gradients."""
    def solve(rows: Tensor, alpha: float):
        return guarded(partial(partial_sort_solve, alpha=alpha, k=k), rows), None
    return entmax_function(scores, float(alpha), solve)
