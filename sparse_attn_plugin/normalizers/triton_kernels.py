"""The Triton kernels of :mod:`.fused_triton` (see there for what they compute): one
program normalises ``BLOCK_M`` rows of at most ``BLOCK_N`` entries held whole in registers.

Imported only when first used: ``triton.jit`` decides when a kernel is defined whether it
is compiled for a GPU or run by Triton's interpreter (``TRITON_INTERPRET=1``).
"""

import triton
import triton.language as tl

from . import triton_cases

ENTMAX15 = tl.constexpr(triton_cases.ENTMAX15)
SOFTMAX = tl.constexpr(triton_cases.SOFTMAX)
SPARSEMAX = tl.constexpr(triton_cases.SPARSEMAX)


@triton.jit
def _block(n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's rows, which of them exist, and the offsets of (and mask on) their
    entries in a contiguous ``n_rows`` x ``n_cols`` tensor."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    return rows, row_ok, rows[:, None] * n_cols + cols[None, :], \
        row_ok[:, None] & (cols < n_cols)[None, :]


@triton.jit
def _load_scores(S, row_ok, offsets, inside):
    """The block's scores (``-inf`` past a row's end), each row's largest, which rows are
    empty (every key masked, or past the last row) and which hold a NaN or ``+inf``.
    Both kinds are read as zeros (any finite row will do); at the end their weights are
    set to zero and to NaN."""
    s = tl.load(S + offsets, mask=inside, other=float("-inf"))
    invalid = tl.sum(tl.where((s != s) | (s == float("inf")), 1, 0), axis=1) > 0
    s = tl.where(invalid[:, None], 0.0, s)
    top = tl.max(s, axis=1)
    empty = (top == float("-inf")) | (row_ok == 0)
    return tl.where(empty[:, None], 0.0, s), tl.where(empty, 0.0, top), empty, invalid


@triton.jit
def _store_weights(P, offsets, inside, p, empty, invalid):
    """``p`` into ``P``, with zeros on empty rows and NaN on rows with a NaN or ``+inf``."""
    p = tl.where(empty[:, None], 0.0, p)
    tl.store(P + offsets, tl.where(invalid[:, None], float("nan"), p), mask=inside)


@triton.jit
def _row_powers(u, r, KIND: tl.constexpr):
    """``u^(r-1)`` and ``||u||_r`` (per row) for ``u >= 0``."""
    if KIND == SPARSEMAX:
        ur1 = tl.where(u > 0, 1.0, 0.0).to(u.dtype)
        norm = tl.sum(u, axis=1)
    elif KIND == ENTMAX15:
        ur1 = u
        norm = tl.sqrt(tl.sum(u * u, axis=1))
    else:
        ur1 = tl.where(u > 0, tl.exp(tl.log(tl.where(u > 0, u, 1.0)) * (r[:, None] - 1)), 0.0)
        norm = tl.exp(tl.log(tl.sum(ur1 * u, axis=1)) / r)
    return ur1, norm


@triton.jit
def _newton(x, tau, r, KIND: tl.constexpr):
    """``h(tau) = ||(x - tau)_+||_r - 1`` per row, and Newton's next ``tau``."""
    u = tl.maximum(x - tau[:, None], 0.0)
    ur1, norm = _row_powers(u, r, KIND)
    if KIND == SPARSEMAX:
        slope = tl.sum(ur1, axis=1)
    elif KIND == ENTMAX15:
        slope = tl.sum(ur1, axis=1) / norm
    else:
        slope = tl.sum(ur1, axis=1) / tl.exp(tl.log(norm) * (r - 1))
    return norm - 1, tau + (norm - 1) / slope


@triton.jit
def _threshold(x, r, row_ok, max_iter, tol, KIND: tl.constexpr, POLISH: tl.constexpr):
    """``tau`` of rows ``x`` (largest entry 0, ``-inf`` allowed after it) for ``r = 1 /
    (alpha - 1)`` per row: safeguarded Newton steps in ``[-1, 0]`` until no row of the
    block (``row_ok``) moves (or ``max_iter``), with ``POLISH`` one more (float64: to
    rounding)."""
    hi = tl.max(x, axis=1) * 0
    tau = hi - 1
    lo = tau
    step = 0
    moved = 1
    while (step < max_iter) & (moved > 0):
        h, newton = _newton(x, tau, r, KIND)
        above = h > 0
        lo = tl.where(above, tau, lo)
        hi = tl.where(above, hi, tau)
        kept = (newton >= lo) & (newton <= hi)           # NaN fails both
        new = tl.where(tl.abs(h) <= tol, tau, tl.where(kept, newton, (lo + hi) / 2))
        moved = tl.max(tl.where((new != tau) & row_ok, 1, 0), axis=0)
        tau = new
        step += 1
    if POLISH:
        _, newton = _newton(x, tau, r, KIND)
        tau = tl.where((newton >= lo) & (newton <= hi), newton, tau)
    return tau


@triton.jit
def _entmax_weights(x, tau, r, KIND: tl.constexpr):
    """``p = u^r / sum u^r`` with ``u = (x - tau)_+``, per row."""
    u = tl.maximum(x - tau[:, None], 0.0)
    ur1, _ = _row_powers(u, r, KIND)
    p = ur1 * u
    return p / tl.sum(p, axis=1)[:, None]


@triton.jit
def entmax_forward(S, ALPHA, P, n_rows, n_cols, max_iter, tol, KIND: tl.constexpr,
                   POLISH: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``P`` = alpha-entmax of the rows of ``S`` (``n_rows`` x ``n_cols``, contiguous),
    ``ALPHA`` one per row (:func:`_threshold`, then :func:`_entmax_weights`; 0 on empty
    rows, NaN on rows with a NaN or ``+inf``)."""
    rows, row_ok, offsets, inside = _block(n_rows, n_cols, BLOCK_M, BLOCK_N)
    s, top, empty, invalid = _load_scores(S, row_ok, offsets, inside)
    alpha = tl.load(ALPHA + rows, mask=row_ok, other=1.5).to(s.dtype)
    r = 1 / (alpha - 1)
    x = (s - top[:, None]) * (alpha - 1)[:, None]
    tau = _threshold(x, r, row_ok, max_iter, tol, KIND, POLISH)
    _store_weights(P, offsets, inside, _entmax_weights(x, tau, r, KIND), empty, invalid)


@triton.jit
def _bracketed_sums(x, tau, r, inside):
    """``F(tau) - 1``, ``F'(tau)`` and the terms ``(x - tau)_+^r`` per row, for any ``r``
    (masked entries, ``x`` infinite, count as 0)."""
    u = x - tau[:, None]
    on = (u > 0) & (u < float("inf")) & inside
    safe = tl.where(on, u, 1.0)
    p = tl.where(on, tl.exp(tl.log(safe) * r[:, None]), 0.0)
    slope = -r * tl.sum(tl.where(on, p / safe, 0.0), axis=1)
    return tl.sum(p, axis=1) - 1, slope, p


@triton.jit
def entmax_any_forward(S, ALPHA, P, n_rows, n_cols, max_iter, tol,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``P`` = alpha-entmax of the rows of ``S`` for any alpha > 0 (one per row), in
    float64: Newton steps on ``F(tau) - 1`` inside a bracket that must halve every two
    steps, else bisected (:mod:`.entmax_general`); softmax where alpha is 1."""
    rows, row_ok, offsets, inside = _block(n_rows, n_cols, BLOCK_M, BLOCK_N)
    s, top, empty, invalid = _load_scores(S, row_ok, offsets, inside)
    s = s.to(tl.float64)
    top = top.to(tl.float64)
    alpha = tl.load(ALPHA + rows, mask=row_ok, other=2.0).to(tl.float64)
    at_one = alpha == 1
    a = tl.where(at_one, 2.0, alpha)
    dense = a < 1
    r = 1 / (a - 1)
    x = (s - top[:, None]) * (a - 1)[:, None]
    n = tl.sum(tl.where(inside & (x == x) & (tl.abs(x) < float("inf")), 1.0, 0.0), axis=1)
    far = tl.exp(tl.log(tl.maximum(n, 1.0)) * (1 - a))
    lo = tl.where(dense, -far, -1.0)
    hi = tl.where(dense, -1.0, -far)
    tau = hi
    width = 2 * (hi - lo)
    step = 0
    moved = 1
    while (step < max_iter) & (moved > 0):
        h, slope, _ = _bracketed_sums(x, tau, r, inside)
        below = (h < 0) != dense
        lo = tl.where(below, lo, tau)
        hi = tl.where(below, tau, hi)
        newton = tau - h / slope
        kept = (newton > lo) & (newton < hi)             # NaN fails both
        halved = (hi - lo) <= width / 2
        check = (step % 2) == 1
        width = tl.where(check & halved, hi - lo, width)
        kept = kept & (halved | (check == 0))
        new = tl.where(tl.abs(h) <= tol, tau, tl.where(kept, newton, (lo + hi) / 2))
        moved = tl.max(tl.where((new != tau) & row_ok, 1, 0), axis=0)
        tau = new
        step += 1
    _, _, p = _bracketed_sums(x, tau, r, inside)
    p = p / tl.sum(p, axis=1)[:, None]
    soft = tl.where(inside, tl.exp(s - top[:, None]), 0.0)
    p = tl.where(at_one[:, None], soft / tl.sum(soft, axis=1)[:, None], p)
    _store_weights(P, offsets, inside, p.to(P.dtype.element_ty), empty, invalid)


@triton.jit
def _topk_threshold(s, top, k):
    """``t``, each row's k-th largest entry counted with repeats (its smallest where it has
    fewer than ``k`` entries above ``-inf``)."""
    t = top
    count = tl.sum(tl.where(s >= t[:, None], 1, 0), axis=1)
    short = count < k
    while tl.max(tl.where(short, 1, 0), axis=0) > 0:
        below = tl.max(tl.where(s < t[:, None], s, float("-inf")), axis=1)
        t = tl.where(short, below, t)
        count = tl.sum(tl.where(s >= t[:, None], 1, 0), axis=1)
        short = (count < k) & (t > float("-inf"))
    return t


@triton.jit
def topk_forward(S, P, n_rows, n_cols, k,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``P`` = softmax of each row of ``S`` over its entries at least its k-th largest
    (counted with repeats; every unmasked entry where the row has fewer than k; none
    where it has none)."""
    rows, row_ok, offsets, inside = _block(n_rows, n_cols, BLOCK_M, BLOCK_N)
    s, top, empty, invalid = _load_scores(S, row_ok, offsets, inside)
    t = _topk_threshold(s, top, k)
    e = tl.where(s >= t[:, None], tl.exp(s - top[:, None]), 0.0)
    p = e / tl.sum(e, axis=1)[:, None]
    _store_weights(P, offsets, inside, p, empty, invalid)


@triton.jit
def _scores_grad(p, dp, alpha, KIND: tl.constexpr):
    """``ds = g dp - g (sum g dp / sum g)`` per row from the weights ``p`` and their
    gradient ``dp`` (``g = p^(2 - alpha)``, or ``g = p`` for softmax and top-k), and that
    mean ``sum g dp / sum g``."""
    if KIND == SOFTMAX:
        g = p
    elif KIND == SPARSEMAX:
        # g = 0 off the support, NaN where p is (rows of NaN weights get NaN gradients)
        g = tl.where(p == 0, 0.0, 1.0).to(p.dtype) + p * 0
    elif KIND == ENTMAX15:
        g = tl.sqrt(p)
    else:
        g = tl.where(p == 0, 0.0,
                     tl.exp(tl.log(tl.where(p == 0, 1.0, p)) * (2 - alpha)[:, None]))
    g_sum = tl.sum(g, axis=1)
    g_sum = tl.where(g_sum > 0, g_sum, 1.0)              # padding rows
    dp_ghat = tl.sum(g * dp, axis=1) / g_sum
    return g * dp - g * dp_ghat[:, None], dp_ghat


@triton.jit
def _alpha_grad(p, dp, dp_ghat, alpha):
    """The per-row gradient in alpha of alpha-entmax weights ``p`` (Correia et al. 2019)."""
    r = 1 / (alpha - 1)
    plogp = p * tl.log(tl.where(p > 0, p, 1.0))
    neg_entropy = tl.sum(plogp, axis=1)
    dp_p = tl.sum(dp * p, axis=1)
    dp_plogp = tl.sum(dp * plogp, axis=1)
    return r * r * (dp_p - dp_ghat) - r * (dp_plogp - dp_ghat * neg_entropy)


@triton.jit
def backward(P, DP, ALPHA, DS, DALPHA, n_rows, n_cols, KIND: tl.constexpr,
             ALPHA_GRAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``DS`` from the weights ``P`` and their gradient ``DP`` (:func:`_scores_grad`), and
    with ``ALPHA_GRAD`` the per-row alpha gradient ``DALPHA``."""
    rows, row_ok, offsets, inside = _block(n_rows, n_cols, BLOCK_M, BLOCK_N)
    p = tl.load(P + offsets, mask=inside, other=0.0)
    dp = tl.load(DP + offsets, mask=inside, other=0.0)
    alpha = tl.load(ALPHA + rows, mask=row_ok, other=1.5).to(p.dtype)
    ds, dp_ghat = _scores_grad(p, dp, alpha, KIND)
    tl.store(DS + offsets, ds, mask=inside)
    if ALPHA_GRAD:
        tl.store(DALPHA + rows, _alpha_grad(p, dp, dp_ghat, alpha), mask=row_ok)
