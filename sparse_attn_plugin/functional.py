"""The attention normalisers as functions of a tensor, for plain PyTorch code.

Each maps scores ``x`` to weights on the probability simplex along ``dim`` by the code the
normaliser modules of ``--attn-fn NAME`` run (same kernels, same ``impl`` rule,
:mod:`.normalizers.dispatch`), so a function and its module give identical weights and
gradients. Nothing here imports fairseq. ``-inf`` masks an entry; half-precision scores
give float32 weights; ``impl`` is ``"auto"``, ``"torch"``, ``"compiled"`` or ``"triton"``,
all equal to rounding. The full contract: docs/library.md, "The functions".

Papers: sparsemax, Martins & Astudillo (2016); 1.5- and alpha-entmax, Peters, Niculae &
Martins (2019); learned alpha, Correia, Niculae & Martins (2019); top-k, Zhao et al. (2019);
csoftmax, Martins & Kreutzer (2017); csparsemax, Malaviya, Ferreira & Martins (2018);
normmax, Santos et al. (2024); budget sparsemax and the threshold, as the entmax package.
"""

from functools import partial
from typing import Optional, Union

import torch
from torch import Tensor

from .normalizers.base import (
    Softmax,
    at_least_float32,
    check_impl,
    normalize_along,
    softmax_rows,
)
from .normalizers.budget import budget_sparsemax
from .normalizers.constrained import csoftmax as _csoftmax
from .normalizers.constrained import csparsemax as _csparsemax
from .normalizers.entmax_family import (
    ENTMAX15,
    SPARSEMAX,
    Sparsemax,
    check_alpha,
    check_n_iter,
    entmax_alpha_weights,
    general_weights,
    in_newton_range,
)
from .normalizers.entmax_partial import check_first_k, partial_sort_entmax
from .normalizers.entmax_sort import threshold_and_support
from .normalizers.fused_attention import (
    check_attention,
    fused_attention,
    fused_runs,
    masked_keys,
)
from .normalizers.normmax import normmax
from .normalizers.row_parameters import along_rows
from .normalizers.topk import TopK, check_k, topk_weights

__all__ = ["attention", "budget_sparsemax", "csoftmax", "csparsemax", "entmax15", "entmax_alpha",
           "normmax", "softmax", "sparsemax", "threshold_and_support", "topk_softmax"]


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``softmax(x)_j = exp(x_j) / sum_k exp(x_k)``, the dense baseline, under this
    module's contract (float32 for half inputs, all-zero weights on a slice with every
    entry ``-inf``, where :func:`torch.softmax` gives NaN)."""
    return normalize_along(softmax_rows, x, dim, Softmax.zeroes_empty_rows, "softmax")


def _entmax(solve, x: Tensor, dim: int, alpha, k: Optional[int], name: str) -> Tensor:
    """``solve`` (weights of float rows, special rows its own) along ``dim`` under the
    contract, or, given ``k``, the partial sort from it at ``alpha``."""
    if check_first_k(k, alpha, name) is not None:
        solve = partial(partial_sort_entmax, alpha=alpha, k=k)
    # every solver of the family fills special rows itself, as Sparsemax's
    return normalize_along(solve, x, dim, Sparsemax.zeroes_empty_rows, name)


def sparsemax(x: Tensor, dim: int = -1, impl: str = "auto", k: Optional[int] = None) -> Tensor:
    """Sparsemax (Martins & Astudillo 2016), the Euclidean projection onto the simplex::

        sparsemax(x) = argmin_{p in simplex} ||p - x||^2,   p_j = max(0, x_j - tau),

    with ``tau`` such that ``sum_j p_j = 1``; alpha-entmax at alpha = 2. Exact zeros for
    every ``x_j <= tau``. Computed exactly (a sort, the partial sort of long rows or the
    Newton solver, as ``impl`` picks; see the module docstring). ``k``: the partial sort
    from the ``k`` largest entries, the rows whose support needs more solved again over
    their entries above a bound (the entmax package's ``k``; exact whatever its value)."""
    check_impl(impl)
    return _entmax(partial(SPARSEMAX, impl), x, dim, 2.0, k, "sparsemax")


def entmax15(x: Tensor, dim: int = -1, impl: str = "auto", k: Optional[int] = None) -> Tensor:
    """1.5-entmax (Peters, Niculae & Martins 2019), alpha-entmax at alpha = 1.5::

        entmax15(x)_j = [x_j / 2 - tau]_+ ^ 2,   tau such that sum_j p_j = 1,

    sparse like sparsemax, but smoother. Computed exactly as :func:`sparsemax` (``k`` the
    same)."""
    check_impl(impl)
    return _entmax(partial(ENTMAX15, impl), x, dim, 1.5, k, "entmax15")


def entmax_alpha(x: Tensor, alpha: Union[float, Tensor], dim: int = -1, impl: str = "auto",
                 n_iter: int = 30, k: Optional[int] = None) -> Tensor:
    """alpha-entmax (Peters et al. 2019; learned per head in Correia et al. 2019)::

        entmax_alpha(x) = argmax_{p in simplex} p.x + H^T_alpha(p),
        p_j = [(alpha - 1) x_j - tau]_+ ^ (1 / (alpha - 1)),   tau such that sum_j p_j = 1,

    with Tsallis entropy ``H^T_alpha(p) = sum_j (p_j - p_j^alpha) / (alpha (alpha - 1))``.
    ``alpha`` > 0 (else ValueError; a tensor is read back to check, which waits for a GPU;
    1 is softmax, 2 sparsemax, below 1 dense) is a number or a tensor broadcastable to ``x``
    with size 1 along ``dim`` (e.g. ``(1, H, 1, 1)``: one per head), cast to the weights'
    dtype, with closed-form gradients; keep a learned one in range by
    ``EntmaxAlpha.alpha_of`` (docs/library.md, "Learning alpha per head"). In (1, 2]
    ``n_iter`` caps the safeguarded Newton solver for ``tau``, which stops on convergence,
    and ``impl`` is as in the module docstring; other alphas are solved eagerly by
    :mod:`.normalizers.entmax_general`. Long rows at one alpha above 1 take the partial
    sort, and ``k`` (for one such alpha only) as in :func:`sparsemax`.
    """
    check_impl(impl)
    n_iter = check_n_iter(n_iter)
    alpha = along_rows(check_alpha(alpha), x, dim, "alpha", "entmax_alpha")
    solve = entmax_alpha_weights if in_newton_range(alpha) else general_weights
    return _entmax(partial(solve, alpha=alpha, n_iter=n_iter, impl=impl), x, dim, alpha, k,
                   "entmax_alpha")


def topk_softmax(x: Tensor, k: int, dim: int = -1, impl: str = "auto") -> Tensor:
    """Top-k attention (Zhao et al. 2019, "Explicit Sparse Transformer"): softmax over the
    entries at least the k-th largest, ``t``, of each slice::

        topk(x)_j = softmax(m(x))_j,   m(x)_j = x_j if x_j >= t else -inf.

    Entries equal to ``t`` are all kept (ties can keep more than k). ``t`` is a constant
    for the backward pass: gradients reach the kept entries only. A slice with fewer
    than k unmasked entries keeps them all (k is clamped to their number)."""
    check_impl(impl)
    k = check_k(k)
    return normalize_along(partial(topk_weights, k=k, impl=impl), x, dim,
                           TopK.zeroes_empty_rows, "topk_softmax")


def csoftmax(x: Tensor, upper: Tensor, dim: int = -1, check: bool = False) -> Tensor:
    """Constrained softmax (Martins & Kreutzer 2017; attention with fertility in Malaviya,
    Ferreira & Martins 2018)::

        csoftmax(x; u) = argmin_{p in simplex, p <= u} KL(p || softmax(x)),
        p_j = min(u_j, c exp(x_j)),   c > 0 such that sum_j p_j = 1.

    ``upper``: bounds ``u >= 0`` (``+inf``: unbounded) broadcastable to ``x``, with
    closed-form gradients for ``x`` and ``u``. ``check`` raises
    :class:`~.normalizers.InfeasibleBounds` on a slice whose unmasked bounds sum below 1
    (a read-back, which waits for a GPU); without it such a slice gets ``p = u``. The
    weights have the broadcast shape; one implementation, so no ``impl``.
    """
    return _constrained(_csoftmax, x, upper, dim, check)


def csparsemax(x: Tensor, upper: Tensor, dim: int = -1, check: bool = False) -> Tensor:
    """Constrained sparsemax (Malaviya, Ferreira & Martins 2018)::

        csparsemax(x; u) = argmin_{p in simplex, p <= u} ||p - x||^2,
        p_j = max(0, min(u_j, x_j - tau)),   tau such that sum_j p_j = 1.

    Args: as :func:`csoftmax`.
    """
    return _constrained(_csparsemax, x, upper, dim, check)


def _constrained(normalize, x: Tensor, upper: Tensor, dim: int, check: bool) -> Tensor:
    """``normalize(scores, upper, check)`` (what :class:`~.normalizers.CSoftmax` and
    :class:`~.normalizers.CSparsemax` run) along ``dim``."""
    if not isinstance(upper, Tensor):
        upper = torch.as_tensor(upper, dtype=x.dtype, device=x.device)
    x, upper = torch.broadcast_tensors(x, upper)
    if dim in (-1, x.dim() - 1):
        return normalize(x, upper, check)
    return normalize(x.movedim(dim, -1), upper.movedim(dim, -1), check).movedim(-1, dim)


def eager_attention(q: Tensor, k: Tensor, v: Tensor, kind: str, alpha=None, k_top=None,
                    key_padding_mask: Optional[Tensor] = None, causal: bool = False,
                    scale: Optional[float] = None, impl: str = "torch") -> Tensor:
    """:func:`attention` by separate operations (the reference): the scores, the masks,
    the normaliser of this module by ``impl``, and ``p v``."""
    scale = q.size(-1) ** -0.5 if scale is None else scale
    scores = at_least_float32(torch.matmul(q, k.transpose(-1, -2))) * scale
    masked = masked_keys(key_padding_mask, causal, q.size(2), k.size(2), q.device)
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    if kind == "softmax":
        weights = softmax(scores)
    elif kind == "topk":
        weights = topk_softmax(scores, k_top, impl=impl)
    elif kind == "entmax_alpha":
        weights = entmax_alpha(scores, alpha, impl=impl)
    else:
        weights = {"sparsemax": sparsemax, "entmax15": entmax15}[kind](scores, impl=impl)
    return torch.matmul(weights.to(v.dtype), v)


def attention(q: Tensor, k: Tensor, v: Tensor, kind: str = "softmax", *, alpha=None,
              k_top: Optional[int] = None, key_padding_mask: Optional[Tensor] = None,
              causal: bool = False, scale: Optional[float] = None, impl: str = "auto") -> Tensor:
    """``normalise(q k^T scale + masks) v`` for ``q`` ``(batch, heads, len_q, dim)``, ``k``
    ``(batch, heads, len_k, dim)`` and ``v`` ``(batch, heads, len_k, value_dim)``, by one
    fused Triton program per block of queries on CUDA (up to 1024 keys; ``impl``: ``auto``,
    ``triton``, or eagerly ``torch`` or ``compiled``), else by :func:`eager_attention`.
    ``kind`` one of :data:`.normalizers.fused_attention.KINDS`; ``alpha`` (entmax_alpha
    only) a number or a tensor broadcastable to ``(batch, heads, len_q, 1)``, e.g.
    ``(heads, 1, 1)``; ``k_top`` (topk only) the keys kept; ``key_padding_mask`` bool
    ``(batch, len_k)``, True at padding keys; ``causal``: query ``i`` sees keys up to ``i +
    len_k - len_q``; ``scale`` ``dim^-0.5`` by default. A query with every key masked gets
    zeros, one with a NaN or ``+inf`` score NaN."""
    check_impl(impl)
    check_attention(q, k, v, kind, alpha, k_top, key_padding_mask)
    scale = q.size(-1) ** -0.5 if scale is None else float(scale)
    if not fused_runs(impl, q, k, kind, alpha):
        return eager_attention(q, k, v, kind, alpha, k_top, key_padding_mask, causal, scale,
                               "torch" if impl == "triton" else impl)
    return fused_attention(q, k, v, kind, alpha, k_top, key_padding_mask, causal, scale)
