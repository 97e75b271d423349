"""The attention normalisers as functions of a tensor, for plain PyTorch code.

Each function maps scores ``x`` to weights on the probability simplex along ``dim`` and is
a thin wrapper over the same code the normaliser modules of :mod:`.normalizers` run
(``--attn-fn NAME`` in fairseq): the same kernels, picked by the same ``impl`` rule
(:mod:`.normalizers.dispatch`), so a function and its module give identical weights and
gradients. Nothing here imports fairseq.

The contract, as the modules' (:mod:`.normalizers.base`):

* masking: put ``-inf`` on the entries to leave out (padded keys, future positions);
  they get weight exactly 0. A slice along ``dim`` with every entry ``-inf`` gets all-zero
  weights (not NaN) and zero gradient.
* dtype: float16 and bfloat16 inputs are computed in float32 and the weights are
  returned in **float32** (the entmax family is inexact, or NaN, in half precision); cast
  them back yourself (``w.to(x.dtype)``, or ``w.type_as(values)``). float32 and float64
  stay as they are.
* ``dim``: any; it is moved last, normalised, and moved back.
* ``impl`` (where a normaliser has several implementations): ``"auto"`` (the default:
  the Triton kernels for CUDA tensors where Triton is installed, the eager code
  elsewhere), ``"torch"`` (eagerly), ``"compiled"`` (fused by ``torch.compile``, compiled
  on first use), ``"triton"`` (a CUDA device). Any other value is a ValueError.
  All agree to rounding; the choice changes speed, not results.

Papers: sparsemax, Martins & Astudillo (2016), "From Softmax to Sparsemax"; 1.5-entmax and
alpha-entmax, Peters, Niculae & Martins (2019), "Sparse Sequence-to-Sequence Models";
learned alpha, Correia, Niculae & Martins (2019), "Adaptively Sparse Transformers";
top-k, Zhao et al. (2019), "Explicit Sparse Transformer"; constrained softmax, Martins &
Kreutzer (2017), "Learning What's Easy"; constrained sparsemax, Malaviya, Ferreira &
Martins (2018), "Sparse and Constrained Attention for Neural Machine Translation".
"""

from functools import partial
from typing import Union

import torch
from torch import Tensor

from .normalizers.base import Softmax, check_impl, normalize_along, softmax_rows
from .normalizers.constrained import csoftmax as _csoftmax
from .normalizers.constrained import csparsemax as _csparsemax
from .normalizers.entmax_family import (
    ENTMAX15,
    SPARSEMAX,
    Entmax15,
    EntmaxAlpha,
    Sparsemax,
    check_alpha,
    check_n_iter,
    entmax_alpha_weights,
)
from .normalizers.topk import TopK, check_k, topk_weights

__all__ = ["csoftmax", "csparsemax", "entmax15", "entmax_alpha", "softmax", "sparsemax",
           "topk_softmax"]


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``softmax(x)_j = exp(x_j) / sum_k exp(x_k)``, the dense baseline, under this
    module's contract (float32 for half inputs, all-zero weights on a slice with every
    entry ``-inf``, where :func:`torch.softmax` gives NaN)."""
    return normalize_along(softmax_rows, x, dim, Softmax.zeroes_empty_rows, "softmax")


def sparsemax(x: Tensor, dim: int = -1, impl: str = "auto") -> Tensor:
    """Sparsemax (Martins & Astudillo 2016), the Euclidean projection onto the simplex::

        sparsemax(x) = argmin_{p in simplex} ||p - x||^2,   p_j = max(0, x_j - tau),

    with ``tau`` such that ``sum_j p_j = 1``; alpha-entmax at alpha = 2. Exact zeros for
    every ``x_j <= tau``. Computed exactly (the entmax package's sort or the Newton solver,
    as ``impl`` picks; see the module docstring)."""
    check_impl(impl)
    return normalize_along(partial(SPARSEMAX, impl), x, dim, Sparsemax.zeroes_empty_rows,
                           "sparsemax")


def entmax15(x: Tensor, dim: int = -1, impl: str = "auto") -> Tensor:
    """1.5-entmax (Peters, Niculae & Martins 2019), alpha-entmax at alpha = 1.5::

        entmax15(x)_j = [x_j / 2 - tau]_+ ^ 2,   tau such that sum_j p_j = 1,

    sparse like sparsemax, but smoother. Computed exactly (sort or Newton, as ``impl``
    picks)."""
    check_impl(impl)
    return normalize_along(partial(ENTMAX15, impl), x, dim, Entmax15.zeroes_empty_rows,
                           "entmax15")


def entmax_alpha(x: Tensor, alpha: Union[float, Tensor], dim: int = -1, impl: str = "auto",
                 n_iter: int = 30) -> Tensor:
    """alpha-entmax (Peters et al. 2019; learned per head in Correia, Niculae & Martins
    2019, "Adaptively Sparse Transformers")::

        entmax_alpha(x) = argmax_{p in simplex} p.x + H^T_alpha(p),
        H^T_alpha(p) = sum_j (p_j - p_j^alpha) / (alpha (alpha - 1)),
        p_j = [(alpha - 1) x_j - tau]_+ ^ (1 / (alpha - 1)),   tau such that sum_j p_j = 1.

    alpha -> 1 tends to softmax, alpha = 1.5 is :func:`entmax15`, alpha = 2
    :func:`sparsemax`; every alpha > 1 can give exact zeros.

    Args:
        x: scores, ``-inf`` on masked entries.
        alpha: in (1, 2]: a number, or a tensor broadcastable to ``x`` with size 1 along
            ``dim`` (e.g. ``(1, H, 1, 1)`` for one alpha per head of ``(B, H, T, S)``
            scores), cast to the weights' dtype. A tensor gets gradients, in closed form,
            as the learned alphas of :class:`~.normalizers.EntmaxAlpha` do; to learn it,
            keep it in range as that module does:
            ``alpha = EntmaxAlpha.alpha_of(z) = clamp(1 + sigmoid(z), 1.01, 2)``. A value
            outside (1, 2] is a ValueError (a tensor's values are read back to check them,
            which waits for a GPU; the module, whose alphas are in range by construction,
            does not check).
        dim: the dimension normalised.
        impl: see the module docstring.
        n_iter: iteration cap of the safeguarded Newton solver for ``tau`` (it stops on
            convergence, after 3-8 steps in practice).
    """
    check_impl(impl)
    n_iter = check_n_iter(n_iter)
    alpha = _alpha_along(check_alpha(alpha), x, dim)
    return normalize_along(partial(entmax_alpha_weights, alpha=alpha, n_iter=n_iter, impl=impl),
                           x, dim, EntmaxAlpha.zeroes_empty_rows, "entmax_alpha")


def _alpha_along(alpha: Union[float, Tensor], x: Tensor, dim: int):
    """A tensor ``alpha`` checked against ``x`` and with ``dim`` moved last as ``x``'s will
    be; a number as it is."""
    if not isinstance(alpha, Tensor):
        return alpha
    if alpha.dim() > x.dim():
        raise ValueError(f"entmax_alpha: alpha of shape {tuple(alpha.shape)} has more "
                         f"dimensions than x of shape {tuple(x.shape)}")
    alpha = alpha.reshape((1,) * (x.dim() - alpha.dim()) + tuple(alpha.shape))
    if not -x.dim() <= dim < x.dim():
        raise IndexError(f"entmax_alpha: dim {dim} is out of range for x of "
                         f"{x.dim()} dimensions")
    dim %= x.dim()
    reduced = x.shape[:dim] + (1,) + x.shape[dim + 1:]
    try:
        fits = torch.broadcast_shapes(alpha.shape, reduced) == reduced
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"entmax_alpha: alpha of shape {tuple(alpha.shape)} must broadcast "
                         f"to x's shape {tuple(x.shape)} with size 1 along dim {dim}")
    return alpha.movedim(dim, -1)


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
    """Constrained softmax (Martins & Kreutzer 2017; used for attention with fertility by
    Malaviya, Ferreira & Martins 2018)::

        csoftmax(x; u) = argmin_{p in simplex, p <= u} KL(p || softmax(x)),
        p_j = min(u_j, c exp(x_j)),   c > 0 such that sum_j p_j = 1.

    Args:
        x: scores, ``-inf`` on masked entries.
        upper: bounds ``u >= 0`` (``+inf`` allowed: unbounded), broadcastable to ``x``;
            differentiable (closed-form gradients for ``x`` and ``u``).
        dim: the dimension normalised.
        check: raise :class:`~.normalizers.InfeasibleBounds` (a ValueError) on a slice whose
            bounds sum to less than 1 over its unmasked entries (reads a value back, which
            waits for a GPU); without it such a slice gets ``p = u``.

    One implementation (so no ``impl``); the weights have the broadcast shape.
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
