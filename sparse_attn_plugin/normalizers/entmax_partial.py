"""alpha-entmax over long rows (an output layer's vocabulary) by a partial sort that grows.

Every alpha > 1 has ``tau >= -1`` over ``x = (alpha - 1)(s - max s)`` (the largest weight,
``(-tau)^r``, is at most 1), so the support lies among a row's largest entries. The
threshold of the ``k`` largest (``torch.topk``) is the row's exactly when the ``k``-th of
them is outside that threshold's support; the rows where it is not try again with ``8k``
(the entmax package's ``k``, grown; the whole row sorted at the end). Each try solves
only ``k`` entries (closed form at alpha 2 and 1.5, :mod:`.entmax_newton` in (1, 2),
above 2 Newton steps on the last support entry's weight, :func:`_weights_above_two`), so a
row of ``V`` costs one ``topk`` and one scatter when the support is short, where a full
sort costs ``V log V``. docs/methods.md, "Long rows".
"""

import math
from functools import partial
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .base import check_count, guarded
from .entmax_grad import entmax_function
from .entmax_newton import entmax_threshold
from .sorted_threshold import sparsemax_tau_of_sorted, threshold_of_sorted

#: The first ``k`` when the caller gives none: the supports of trained output layers are
#: shorter (docs/methods.md, "Long rows"); above alpha 2, a few entries (``FIRST_K_ABOVE_2``).
FIRST_K, FIRST_K_ABOVE_2 = 64, 4
#: How much ``k`` grows each time a row's support reaches it: ``topk`` costs about ``V log
#: k`` a row, so a large step wastes little.
GROWTH = 8


class Support(NamedTuple):
    """Some rows' largest entries: ``rows`` (``None``: every row), and for each row the
    columns ``index`` ``(n, k)`` of its ``k`` largest scores, those scores less the row's
    maximum (``shifted``, descending), and their weights ``p`` (0 past the support)."""

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
    ``k`` largest entries, then ``GROWTH`` times more for the rows whose support reached that
    many, up to the whole row (``k``: :func:`first_k` if not given). Exact: each row's
    weights are those of the whole row."""
    k = first_k(alpha) if k is None else check_count(k, "k", "the partial sort")
    supports, rows = [], None                    # rows: those still to solve (None: all)
    while True:
        k = min(k, scores.size(-1))
        if rows is None or 4 * rows.numel() > 3 * scores.size(0):
            # most rows go on: reading every row costs less than copying them out
            top, index = scores.topk(k, -1)
            if rows is not None:
                top, index = top[rows], index[rows]
        else:
            top, index = scores[rows].topk(k, -1)
        shifted = top - top[:, :1]
        if k == scores.size(-1) or not bool((longer := _reaches_last(shifted, alpha)).any()):
            return supports + [Support(rows, index, shifted, _top_weights(shifted, alpha))]
        kept = ~longer
        if bool(kept.any()):
            shifted_kept = shifted[kept]
            supports.append(Support(_select(rows, kept), index[kept], shifted_kept,
                                    _top_weights(shifted_kept, alpha)))
        rows = _select(rows, longer)
        k *= GROWTH


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
            sums[support.rows] = total
    return sums


@torch.no_grad()
def partial_sort_solve(scores: Tensor, alpha: float, k: Optional[int] = None) -> Tensor:
    """alpha-entmax (a number > 1) over the last dim of float32/float64 scores whose rows each
    have a finite maximum (:func:`.base.guarded` sees to the others), by
    :func:`top_supports`; no graph."""
    rows = scores.reshape(-1, scores.size(-1))
    return scatter_weights(top_supports(rows, alpha, k), rows.shape).view_as(scores)


@torch.no_grad()
def partial_sort_log_weights(scores: Tensor, alpha: float,
                             k: Optional[int] = None) -> Tuple[Tensor, int]:
    """``log alpha-entmax`` (``-inf`` off the support) over the last dim of float32/float64
    scores whose rows each have a finite maximum, by :func:`top_supports`, and the longest
    support (a first ``k`` for a next call like this one); no graph: what a decoding step
    over a vocabulary needs."""
    rows = scores.reshape(-1, scores.size(-1))
    supports = top_supports(rows, alpha, k)
    longest = max(int((support.p > 0).sum(-1).max()) for support in supports)
    return scatter_weights(supports, rows.shape, log=True).view_as(scores), longest


def partial_sort_entmax(scores: Tensor, alpha: float, k: Optional[int] = None) -> Tensor:
    """alpha-entmax (a number > 1) over the last dim of float32/float64 scores by the partial
    sort from ``k`` (:func:`first_k` if not given), guarded (:func:`.base.guarded`), with
    :mod:`.entmax_grad`'s closed-form gradients."""
    def solve(rows: Tensor, alpha: float):
        return guarded(partial(partial_sort_solve, alpha=alpha, k=k), rows), None
    return entmax_function(scores, float(alpha), solve)
