"""The Triton kernels of :mod:`.fused_attention`: one program takes ``BLOCK_M`` queries of
one (batch, head) against all its keys (at most ``BLOCK_N``), held in registers: the
scores ``q k^T scale`` with the masks, the normaliser's threshold, and ``p v``, with no
scores or weights written to memory. The backward program recomputes the weights from the
saved per-row maximum and threshold, and adds its share of ``dk`` and ``dv`` atomically.

Imported only when first used, as :mod:`.triton_kernels` (whose row helpers it shares).
"""

import triton
import triton.language as tl

from . import triton_cases
from .triton_kernels import (
    _alpha_grad,
    _entmax_weights,
    _scores_grad,
    _threshold,
    _topk_threshold,
)

SOFTMAX = tl.constexpr(triton_cases.SOFTMAX)
TOPK = tl.constexpr(triton_cases.TOPK)


@triton.jit
def _tile(Q, K, MASK, bh, n_heads, len_q, len_k, dim, scale, HAS_MASK: tl.constexpr,
          MASK_ROWS: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """This program's query rows (and which exist), its queries ``(BLOCK_M, BLOCK_D)``, the
    key columns (and which exist), the keys, the scores with every masked key at ``-inf``
    (``MASK``: nonzero at a hidden key, per batch entry ``(B, S)``, or with ``MASK_ROWS``
    per batch entry and query ``(B, T, S)``),
    each row's largest, which rows are empty (every key masked) and which hold a NaN or
    ``+inf`` (both read as zeros, filled at the end)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    row_ok = rows < len_q
    col_ok = cols < len_k
    q = tl.load(Q + (bh * len_q + rows)[:, None] * dim + dims[None, :],
                mask=row_ok[:, None] & (dims < dim)[None, :], other=0.0)
    k = tl.load(K + (bh * len_k + cols)[:, None] * dim + dims[None, :],
                mask=col_ok[:, None] & (dims < dim)[None, :], other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
    keep = row_ok[:, None] & col_ok[None, :]
    if HAS_MASK and MASK_ROWS:
        hidden = tl.load(MASK + ((bh // n_heads) * len_q + rows)[:, None] * len_k + cols[None, :],
                         mask=keep, other=1)
        keep = keep & (hidden == 0)
    elif HAS_MASK:
        padded = tl.load(MASK + (bh // n_heads) * len_k + cols, mask=col_ok, other=1)
        keep = keep & (padded == 0)[None, :]
    if CAUSAL:   # query i sees the keys up to i + len_k - len_q (a cache before it)
        keep = keep & (cols[None, :] <= rows[:, None] + (len_k - len_q))
    s = tl.where(keep, s, float("-inf"))
    invalid = tl.sum(tl.where((s != s) | (s == float("inf")), 1, 0), axis=1) > 0
    s = tl.where(invalid[:, None], 0.0, s)
    top = tl.max(s, axis=1)
    empty = top == float("-inf")
    s = tl.where(empty[:, None], 0.0, s)
    return rows, row_ok, q, cols, col_ok, k, s, tl.where(empty, 0.0, top), empty, invalid


@triton.jit
def _alphas(ALPHA, alpha_value, bh, len_q, rows, row_ok, STATS, ALPHA_ROWS: tl.constexpr,
            BLOCK_M: tl.constexpr):
    """The rows' alphas: one per row from ``ALPHA`` (``ALPHA_ROWS``), else ``alpha_value``
    for all (a fixed alpha, or none used: softmax, top-k), in the statistics' dtype."""
    if ALPHA_ROWS:
        return tl.load(ALPHA + bh * len_q + rows, mask=row_ok, other=1.5)
    return tl.zeros([BLOCK_M], dtype=STATS.dtype.element_ty) + alpha_value


@triton.jit
def _weights(s, top, threshold, alpha, KIND: tl.constexpr):
    """The weights of scores ``s`` with row maxima ``top`` at the saved ``threshold`` (the
    k-th largest for top-k, ``tau`` of ``x = (alpha - 1)(s - top)`` for entmax)."""
    if KIND == SOFTMAX:
        e = tl.exp(s - top[:, None])
        return e / tl.sum(e, axis=1)[:, None]
    elif KIND == TOPK:
        e = tl.where(s >= threshold[:, None], tl.exp(s - top[:, None]), 0.0)
        return e / tl.sum(e, axis=1)[:, None]
    else:
        x = (s - top[:, None]) * (alpha - 1)[:, None]
        return _entmax_weights(x, threshold, 1 / (alpha - 1), KIND)


@triton.jit
def attention_forward(Q, K, V, O, MASK, ALPHA, alpha_value, STATS, n_heads, len_q, len_k,  # noqa: E741
                      dim, value_dim, scale, max_iter, tol, k_top, KIND: tl.constexpr,
                      HAS_MASK: tl.constexpr, MASK_ROWS: tl.constexpr, CAUSAL: tl.constexpr,
                      ALPHA_ROWS: tl.constexpr, POLISH: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                      BLOCK_DV: tl.constexpr):
    """``O = normalise(q k^T scale, masks) v`` for ``BLOCK_M`` queries of (batch x head)
    ``program_id(1)``; ``STATS`` keeps each row's maximum and threshold for the backward.
    Rows with every key masked give 0, rows with a NaN or ``+inf`` score NaN; ``POLISH``:
    one more Newton step (float64: to rounding)."""
    bh = tl.program_id(1)
    rows, row_ok, q, cols, col_ok, k, s, top, empty, invalid = _tile(
        Q, K, MASK, bh, n_heads, len_q, len_k, dim, scale, HAS_MASK, MASK_ROWS, CAUSAL, BLOCK_M,
        BLOCK_N, BLOCK_D)
    alpha = _alphas(ALPHA, alpha_value, bh, len_q, rows, row_ok, STATS, ALPHA_ROWS, BLOCK_M)
    if KIND == SOFTMAX:
        threshold = top
    elif KIND == TOPK:
        threshold = _topk_threshold(s, top, k_top)
    else:
        x = (s - top[:, None]) * (alpha - 1)[:, None]
        threshold = _threshold(x, 1 / (alpha - 1), row_ok, max_iter, tol, KIND, POLISH)
    p = _weights(s, top, threshold, alpha, KIND)
    p = tl.where(empty[:, None], 0.0, p)
    p = tl.where(invalid[:, None], float("nan"), p)
    values = tl.arange(0, BLOCK_DV)
    v = tl.load(V + (bh * len_k + cols)[:, None] * value_dim + values[None, :],
                mask=col_ok[:, None] & (values < value_dim)[None, :], other=0.0)
    out = tl.dot(p.to(v.dtype), v, input_precision="ieee")
    tl.store(O + (bh * len_q + rows)[:, None] * value_dim + values[None, :],
             out.to(O.dtype.element_ty), mask=row_ok[:, None] & (values < value_dim)[None, :])
    tl.store(STATS + (bh * len_q + rows) * 2, top, mask=row_ok)
    tl.store(STATS + (bh * len_q + rows) * 2 + 1, threshold, mask=row_ok)


@triton.jit
def attention_backward(Q, K, V, DO, MASK, ALPHA, alpha_value, STATS, DQ, DK, DV, DALPHA,
                       n_heads, len_q, len_k, dim, value_dim, scale, KIND: tl.constexpr,
                       HAS_MASK: tl.constexpr, MASK_ROWS: tl.constexpr, CAUSAL: tl.constexpr,
                       ALPHA_ROWS: tl.constexpr, ALPHA_GRAD: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                       BLOCK_DV: tl.constexpr):
    """``dq`` of ``BLOCK_M`` queries, their share of ``dk`` and ``dv`` (added atomically into
    ``DK``, ``DV`` of at least float32) and, with ``ALPHA_GRAD``, each row's ``dalpha``, from the
    weights recomputed at the saved maxima and thresholds (closed form:
    :func:`.triton_kernels._scores_grad`)."""
    bh = tl.program_id(1)
    rows, row_ok, q, cols, col_ok, k, s, _, empty, invalid = _tile(
        Q, K, MASK, bh, n_heads, len_q, len_k, dim, scale, HAS_MASK, MASK_ROWS, CAUSAL, BLOCK_M,
        BLOCK_N, BLOCK_D)
    top = tl.load(STATS + (bh * len_q + rows) * 2, mask=row_ok, other=0.0)
    threshold = tl.load(STATS + (bh * len_q + rows) * 2 + 1, mask=row_ok, other=0.0)
    alpha = _alphas(ALPHA, alpha_value, bh, len_q, rows, row_ok, STATS, ALPHA_ROWS, BLOCK_M)
    p = _weights(s, top, threshold, alpha, KIND)
    p = tl.where(empty[:, None] | (row_ok == 0)[:, None], 0.0, p)
    p = tl.where(invalid[:, None], float("nan"), p)
    values = tl.arange(0, BLOCK_DV)
    value_ok = col_ok[:, None] & (values < value_dim)[None, :]
    v = tl.load(V + (bh * len_k + cols)[:, None] * value_dim + values[None, :], mask=value_ok,
                other=0.0)
    do = tl.load(DO + (bh * len_q + rows)[:, None] * value_dim + values[None, :],
                 mask=row_ok[:, None] & (values < value_dim)[None, :], other=0.0)
    dp = tl.dot(do, tl.trans(v), input_precision="ieee").to(s.dtype)
    if KIND == TOPK:     # the threshold is a constant: softmax's gradient on the kept keys
        ds, dp_ghat = _scores_grad(p, dp, alpha, SOFTMAX)
    else:
        ds, dp_ghat = _scores_grad(p, dp, alpha, KIND)
    ds = ds * scale
    dims = tl.arange(0, BLOCK_D)
    dim_ok = (dims < dim)[None, :]
    dq = tl.dot(ds.to(k.dtype), k, input_precision="ieee")
    tl.store(DQ + (bh * len_q + rows)[:, None] * dim + dims[None, :],
             dq.to(DQ.dtype.element_ty), mask=row_ok[:, None] & dim_ok)
    dk = tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee").to(DK.dtype.element_ty)
    tl.atomic_add(DK + (bh * len_k + cols)[:, None] * dim + dims[None, :], dk,
                  mask=col_ok[:, None] & dim_ok)
    dv = tl.dot(tl.trans(p).to(do.dtype), do, input_precision="ieee").to(DV.dtype.element_ty)
    tl.atomic_add(DV + (bh * len_k + cols)[:, None] * value_dim + values[None, :], dv,
                  mask=value_ok)
    if ALPHA_GRAD:
        tl.store(DALPHA + bh * len_q + rows, _alpha_grad(p, dp, dp_ghat, alpha), mask=row_ok)
