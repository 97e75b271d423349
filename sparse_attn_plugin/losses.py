"""Fenchel-Young losses of sparsemax and alpha-entmax: sparse alternatives to cross-entropy.

For scores ``z`` of one row and its target class ``y``, with ``p = entmax_alpha(z)``
(:mod:`.functional`) and the Tsallis entropy ``H_alpha(p) = (1 - sum_j p_j^alpha) /
(alpha (alpha - 1))``, the loss is::

    L(z; y) = H_alpha(p) + <p - e_y, z>,      dL/dz = p - e_y,

non-negative and 0 exactly when ``p = e_y`` (Blondel, Martins & Niculae 2020, "Learning
with Fenchel-Young Losses"; Peters, Niculae & Martins 2019). alpha-normmax's (Santos et al.
2024, :mod:`.normalizers.normmax`) has ``1 - ||p||_alpha`` in place of ``H_alpha(p)``. The
names and signatures are the entmax package's (``normmax_loss`` is its
``normmax_bisect_loss``); plain PyTorch, no fairseq. docs/library.md, "Losses".
"""

import math
from functools import partial
from typing import Callable, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from .functional import entmax15, entmax_alpha, sparsemax
from .normalizers.base import at_least_float32, check_count, check_impl, check_scores
from .normalizers.dispatch import long_rows
from .normalizers.entmax_family import check_alpha as check_entmax_alpha
from .normalizers.entmax_partial import check_first_k, row_sums, scatter_weights, top_supports
from .normalizers.normmax import alpha_norm, check_alpha, normmax

__all__ = ["Entmax15Loss", "EntmaxBisectLoss", "NormmaxLoss", "SparsemaxBisectLoss",
           "SparsemaxLoss", "entmax15_loss", "entmax_bisect_loss", "normmax_loss",
           "sparsemax_bisect_loss", "sparsemax_loss"]

#: From how far above alpha = 1 the Tsallis terms take the plain power: nearer, ``1 -
#: p^(alpha - 1)`` cancels (float32 lost 1.9e-3 at 1.0001) and expm1 of a logarithm does not.
CANCELLATION_GAP = 0.1
#: What ``reduction`` may be, as in the entmax package.
REDUCTIONS = ("elementwise_mean", "sum", "none")


#: The entropy term of a loss: ``H(p)`` of each row (last dim) of the weights ``p``.
Entropy = Callable[[Tensor], Tensor]


class _FenchelYoung(torch.autograd.Function):
    """Per-row loss ``H(p) + <p - e_y, z>`` with the closed-form backward
    ``(p - e_y) * grad``: nothing is differentiated through the normaliser, and ``p`` is a
    constant to a second derivative (which comes out 0, as in the entmax package). A row
    with every class ``-inf`` has no distribution: NaN loss and gradient, as
    ``cross_entropy``'s."""

    @staticmethod
    def forward(ctx, scores: Tensor, target: Tensor, normalize: Callable[[Tensor], Tensor],
                entropy: Entropy) -> Tensor:
        weights = normalize(scores)
        top = scores.amax(-1, keepdim=True)
        residual = weights.scatter_add(-1, target.unsqueeze(-1),
                                       torch.full_like(weights[..., :1], -1.0))
        empty = torch.isneginf(top)
        residual = residual.masked_fill_(empty, math.nan)
        ctx.save_for_backward(residual)
        ctx.scores_dtype = scores.dtype
        return (entropy(weights) + _inner(residual, scores, top)).masked_fill_(
            empty.squeeze(-1), math.nan)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (residual,) = ctx.saved_tensors
        return (grad.unsqueeze(-1) * residual).to(ctx.scores_dtype), None, None, None


class _SupportFenchelYoung(torch.autograd.Function):
    """The same per-row loss for one alpha > 1 over long rows, from each row's support
    alone (:func:`.normalizers.entmax_partial.top_supports`), with scores ``(N, V)`` whose
    rows have a finite maximum ``top``: the entropy's terms and ``<p, z - max z>`` over the
    support, less ``z_y - max z``; the backward scatters ``(p - e_y) * grad`` into zeros, so
    no dense weights exist before it."""

    @staticmethod
    def forward(ctx, scores: Tensor, target: Tensor, alpha: float, k: int,
                top: Tensor) -> Tensor:
        rows = at_least_float32(scores)
        supports = top_supports(rows, alpha, k)
        n = rows.size(0)
        entropy = row_sums(supports, lambda shifted, p: _tsallis_terms(p, alpha), n)
        inner = row_sums(supports, lambda shifted, p: p * shifted, n)
        picked = rows.gather(-1, target.unsqueeze(-1)).squeeze(-1) - top.to(rows.dtype)
        ctx.supports, ctx.shape, ctx.scores_dtype = supports, rows.shape, scores.dtype
        ctx.save_for_backward(target)
        return entropy + inner - picked

    @staticmethod
    def backward(ctx, grad: Tensor):
        (target,) = ctx.saved_tensors
        residual = scatter_weights(ctx.supports, ctx.shape, grad)
        residual.scatter_add_(-1, target.unsqueeze(-1), -grad.unsqueeze(-1).to(residual.dtype))
        return residual.to(ctx.scores_dtype), None, None, None, None


def _power(weights: Tensor, alpha: float) -> Tensor:
    """``p^alpha``, without a general power at 1.5 and 2 (one is an exp and a log an entry)."""
    if alpha in (1.5, 2):
        return weights * (weights.sqrt() if alpha == 1.5 else weights)
    return weights ** alpha


def _plain(alpha: Union[float, Tensor]) -> bool:
    """Whether ``1 - sum_j p_j^alpha`` loses nothing at ``alpha`` (a number at least
    :data:`CANCELLATION_GAP` above 1), so that the plain power, a few times faster than
    :func:`_tsallis_terms`' logarithms, serves."""
    return not isinstance(alpha, Tensor) and alpha >= 1 + CANCELLATION_GAP


def _tsallis_terms(weights: Tensor, alpha: Union[float, Tensor]) -> Tensor:
    """Terms whose sum over a row of weights ``p`` (summing to 1) is the Tsallis entropy
    ``(1 - sum_j p_j^alpha) / (alpha (alpha - 1))``: ``(p_j - p_j^alpha) / (alpha (alpha -
    1))`` where :func:`_plain`; elsewhere ``-p_j expm1((alpha - 1) log p_j) / (alpha (alpha
    - 1))``, at alpha = 1 Shannon's ``-p_j log p_j`` (the loss is then cross-entropy), in
    which near alpha = 1 nothing cancels: ``1 - sum_j p_j^alpha`` is a rounding error over
    ``alpha - 1`` there."""
    if _plain(alpha):
        return (weights - _power(weights, alpha)) / (alpha * (alpha - 1))
    logs = torch.log(torch.where(weights > 0, weights, 1.0))    # 0 where p is
    gap = torch.as_tensor(alpha - 1, dtype=logs.dtype, device=logs.device)
    at_one = gap == 0
    # expm1(gap log p) / gap, whose limit at gap = 0 is log p
    ratio = torch.where(at_one, logs, torch.expm1(gap * logs) / torch.where(at_one, 1.0, gap))
    return -weights * ratio / alpha


def _tsallis_entropy(weights: Tensor, alpha: Union[float, Tensor]) -> Tensor:
    """The Tsallis entropy of each row (last dim) of ``weights``: ``(1 - sum_j p_j^alpha) /
    (alpha (alpha - 1))`` where :func:`_plain`, else the sum of :func:`_tsallis_terms`."""
    if _plain(alpha):
        return (1 - _power(weights, alpha).sum(-1)) / (alpha * (alpha - 1))
    return _tsallis_terms(weights, alpha).sum(-1)


def _norm_entropy(weights: Tensor, alpha: Union[float, Tensor]) -> Tensor:
    """``1 - ||p||_alpha`` of each row (last dim): normmax's entropy, as Tsallis's 0 at a
    one-hot ``p``."""
    return (1 - alpha_norm(weights, alpha)).squeeze(-1)


def _inner(residual: Tensor, scores: Tensor, top: Tensor) -> Tensor:
    """``<p - e_y, z>`` of each row, with each finite row's maximum ``top`` taken out of
    ``z`` (the sum is shift-invariant, so large offsets cost no precision) and the entries
    where ``p - e_y`` is 0, ``-inf`` masks among them, left out: their NaN products are 0 (a
    row whose weights are NaN has a NaN entropy, which keeps its loss NaN)."""
    shifted = scores - top.nan_to_num(0.0, 0.0, 0.0)     # a row's maximum, 0 if not finite
    products = (residual * shifted).nan_to_num_(0.0, math.inf, -math.inf)
    return products.sum(-1)


def _check_target(scores: Tensor, target: Tensor, ignore_index: int,
                  name: str) -> Tuple[Tensor, Tensor]:
    """Which rows are left out (``target == ignore_index``) and the targets with 0 there; a
    one-line error unless ``target`` is an integer tensor of ``scores``' shape less the last
    dim, each counted entry a class (reads the targets' extremes back, which waits for a
    GPU)."""
    if not isinstance(target, Tensor) or target.is_floating_point() or \
            target.is_complex() or target.dtype == torch.bool:
        got = target.dtype if isinstance(target, Tensor) else type(target).__name__
        raise TypeError(f"{name} needs integer class indices as target, got {got}")
    if scores.dim() == 0 or target.shape != scores.shape[:-1]:
        raise ValueError(f"{name}: target of shape {tuple(target.shape)} must be the scores' "
                         f"shape {tuple(scores.shape)} without the last (class) dim")
    ignored = target == ignore_index
    safe = target.masked_fill(ignored, 0)
    classes = scores.size(-1)
    if safe.numel() and not 0 <= int(safe.min()) <= int(safe.max()) < classes:
        outside = ~ignored & ((target < 0) | (target >= classes))
        raise ValueError(f"{name}: target {target[outside][0].item()} is not a class index in "
                         f"[0, {classes}) nor ignore_index {ignore_index}")
    return ignored, safe


def _check_reduction(reduction: str, name: str) -> str:
    """``reduction``, if one of :data:`REDUCTIONS`; else a one-line ValueError."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"{name}: reduction must be one of {', '.join(REDUCTIONS)}, "
                         f"got {reduction!r}")
    return reduction


def _support_maxima(scores: Tensor, alpha, impl: str, k: Optional[int]) -> Optional[Tensor]:
    """The rows' maxima where the loss is computed from the supports
    (:class:`_SupportFenchelYoung`), else None: for one alpha above 1, eagerly, over long
    rows (:func:`.normalizers.dispatch.long_rows`) or wherever ``k`` is given, when every
    row has a finite maximum (others keep the dense path's NaN and infinite losses; a
    read-back, which waits for a GPU)."""
    if isinstance(alpha, Tensor) or alpha is None or alpha <= 1 or impl not in ("auto", "torch"):
        return None
    if scores.dim() == 0 or scores.size(-1) == 0 or not (k is not None or long_rows(scores)):
        return None
    top = scores.detach().amax(-1)
    return top if bool(torch.isfinite(top).all()) else None


def _loss(normalize: Callable[[Tensor], Tensor], entropy: Entropy, scores: Tensor,
          target: Tensor, ignore_index: int, reduction: str, name: str,
          alpha: Optional[float] = None, impl: str = "auto", k: Optional[int] = None) -> Tensor:
    """The Fenchel-Young loss of ``normalize`` (whose entropy is ``entropy``) of each row of
    ``scores`` (classes along the last dim), 0 with no gradient on rows whose target is
    ``ignore_index``, reduced as the entmax package does: ``elementwise_mean`` divides the
    sum by the number of rows counted (NaN if none, as 0 / 0). For alpha-entmax at one
    ``alpha``, from the supports where :func:`_support_maxima` says (the partial sort from
    ``k``, the same loss)."""
    check_scores(scores, name)
    _check_reduction(reduction, name)
    check_impl(impl)
    k = check_first_k(k, alpha, name)
    ignored, safe_target = _check_target(scores, target, ignore_index, name)
    top = _support_maxima(scores, alpha, impl, k)
    if top is not None:
        rows, targets = scores.reshape(-1, scores.size(-1)), safe_target.reshape(-1).long()
        losses = _SupportFenchelYoung.apply(rows, targets, float(alpha), k,
                                            top.reshape(-1)).view(target.shape)
    else:
        losses = _FenchelYoung.apply(scores, safe_target, normalize, entropy)
    losses = losses.masked_fill(ignored, 0.0)
    if reduction == "sum":
        return losses.sum()
    if reduction == "elementwise_mean":
        return losses.sum() / (~ignored).sum()
    return losses


def sparsemax_loss(X: Tensor, target: Tensor, *, ignore_index: int = -100,
                   reduction: str = "none", impl: str = "auto",
                   k: Optional[int] = None) -> Tensor:
    """Sparsemax loss (Martins & Astudillo 2016), the Fenchel-Young loss at alpha = 2:
    ``(1 - ||p||^2) / 2 + <p - e_y, X>`` per row of scores ``X`` (..., classes) for the
    integer ``target`` (...). ``reduction``: ``none`` (per row, the entmax package's
    function), ``sum`` or ``elementwise_mean``; ``impl`` as in :mod:`.functional`; ``k``: the
    partial sort's first guess at the support (exact whatever it is; by default the partial
    sort runs over long rows only, from :func:`.normalizers.entmax_partial.first_k`)."""
    return _loss(partial(sparsemax, impl=impl), partial(_tsallis_entropy, alpha=2.0), X, target,
                 ignore_index, reduction, "sparsemax_loss", 2.0, impl, k)


def entmax15_loss(X: Tensor, target: Tensor, *, ignore_index: int = -100,
                  reduction: str = "none", impl: str = "auto",
                  k: Optional[int] = None) -> Tensor:
    """1.5-entmax loss (Peters, Niculae & Martins 2019):
    ``(1 - sum_j p_j^1.5) / 0.75 + <p - e_y, X>``; arguments as :func:`sparsemax_loss`."""
    return _loss(partial(entmax15, impl=impl), partial(_tsallis_entropy, alpha=1.5), X, target,
                 ignore_index, reduction, "entmax15_loss", 1.5, impl, k)


def entmax_bisect_loss(X: Tensor, target: Tensor, alpha: Union[float, Tensor] = 1.5,
                       n_iter: int = 50, *, ignore_index: int = -100, reduction: str = "none",
                       impl: str = "auto", k: Optional[int] = None) -> Tensor:
    """alpha-entmax loss, ``H_alpha(p) + <p - e_y, X>``, for ``alpha`` as
    :func:`.functional.entmax_alpha` takes it (no gradient reaches ``alpha``; at 1, Shannon's
    entropy: cross-entropy); ``n_iter`` caps its Newton solver (the entmax package bisects);
    others as :func:`sparsemax_loss` (``k`` for one alpha above 1)."""
    normalize = partial(entmax_alpha, alpha=alpha, n_iter=n_iter, impl=impl)
    return _loss(normalize, partial(_tsallis_entropy, alpha=alpha), X, target, ignore_index,
                 reduction, "entmax_bisect_loss", alpha, impl, k)


def sparsemax_bisect_loss(X: Tensor, target: Tensor, n_iter: int = 50, *,
                          ignore_index: int = -100, reduction: str = "none",
                          impl: str = "auto", k: Optional[int] = None) -> Tensor:
    """:func:`sparsemax_loss` under the entmax package's bisection name: our sparsemax is
    exact, so ``n_iter`` (an integer >= 1, as there) changes nothing."""
    check_count(n_iter, "n_iter", "sparsemax_bisect_loss")
    return sparsemax_loss(X, target, ignore_index=ignore_index, reduction=reduction, impl=impl,
                          k=k)


def normmax_loss(X: Tensor, target: Tensor, alpha: Union[float, Tensor] = 2, n_iter: int = 50,
                 *, ignore_index: int = -100, reduction: str = "none") -> Tensor:
    """alpha-normmax loss (Santos et al. 2024; the entmax package's ``normmax_bisect_loss``):
    ``1 - ||p||_alpha + <p - e_y, X>`` with ``p = normmax(X, alpha)``, for ``alpha`` a finite
    number above 1 or a tensor of them, one per row (no gradient reaches it); ``n_iter`` caps
    normmax's Newton solver; others as :func:`sparsemax_loss` (normmax has one
    implementation, so no ``impl``)."""
    alpha = check_alpha(alpha, "normmax_loss")
    n_iter = check_count(n_iter, "n_iter", "normmax_loss")
    if isinstance(alpha, Tensor):
        alpha = alpha.detach()
    return _loss(partial(normmax, alpha=alpha, n_iter=n_iter), partial(_norm_entropy, alpha=alpha),
                 X, target, ignore_index, reduction, "normmax_loss")


class _Loss(nn.Module):
    """A loss function above as a module: ``ignore_index``, ``reduction`` (by default
    ``elementwise_mean``, as the entmax package's modules), ``impl`` and ``k`` (the partial
    sort's first guess, where the function takes one) fixed at construction."""

    def __init__(self, *, ignore_index: int = -100, reduction: str = "elementwise_mean",
                 impl: str = "auto", k: Optional[int] = None):
        super().__init__()
        self.ignore_index = ignore_index
        self.reduction = _check_reduction(reduction, type(self).__name__)
        self.impl = impl
        self.k = None if k is None else check_count(k, "k", type(self).__name__)

    def options(self) -> dict:
        return dict(ignore_index=self.ignore_index, reduction=self.reduction, impl=self.impl,
                    k=self.k)


class SparsemaxLoss(_Loss):
    """:func:`sparsemax_loss` as a module."""

    def forward(self, X: Tensor, target: Tensor) -> Tensor:
        return sparsemax_loss(X, target, **self.options())


class Entmax15Loss(_Loss):
    """:func:`entmax15_loss` as a module."""

    def forward(self, X: Tensor, target: Tensor) -> Tensor:
        return entmax15_loss(X, target, **self.options())


class SparsemaxBisectLoss(_Loss):
    """:func:`sparsemax_bisect_loss` as a module, ``n_iter`` fixed."""

    def __init__(self, n_iter: int = 50, *, ignore_index: int = -100,
                 reduction: str = "elementwise_mean", impl: str = "auto",
                 k: Optional[int] = None):
        super().__init__(ignore_index=ignore_index, reduction=reduction, impl=impl, k=k)
        self.n_iter = check_count(n_iter, "n_iter", type(self).__name__)

    def forward(self, X: Tensor, target: Tensor) -> Tensor:
        return sparsemax_bisect_loss(X, target, self.n_iter, **self.options())


class EntmaxBisectLoss(_Loss):
    """:func:`entmax_bisect_loss` as a module, ``alpha`` and ``n_iter`` fixed."""

    def __init__(self, alpha: Union[float, Tensor] = 1.5, n_iter: int = 50, *,
                 ignore_index: int = -100, reduction: str = "elementwise_mean",
                 impl: str = "auto", k: Optional[int] = None):
        super().__init__(ignore_index=ignore_index, reduction=reduction, impl=impl, k=k)
        # refused here, as NormmaxLoss's are, not at the first call
        check_entmax_alpha(alpha)
        self.alpha, self.n_iter = alpha, check_count(n_iter, "n_iter", type(self).__name__)

    def forward(self, X: Tensor, target: Tensor) -> Tensor:
        return entmax_bisect_loss(X, target, self.alpha, self.n_iter, **self.options())


class NormmaxLoss(_Loss):
    """:func:`normmax_loss` as a module, ``alpha`` and ``n_iter`` fixed (no ``impl``)."""

    def __init__(self, alpha: Union[float, Tensor] = 2, n_iter: int = 50, *,
                 ignore_index: int = -100, reduction: str = "elementwise_mean"):
        super().__init__(ignore_index=ignore_index, reduction=reduction)
        self.alpha = check_alpha(alpha, type(self).__name__)
        self.n_iter = check_count(n_iter, "n_iter", type(self).__name__)

    def forward(self, X: Tensor, target: Tensor) -> Tensor:
        return normmax_loss(X, target, self.alpha, self.n_iter, ignore_index=self.ignore_index,
                            reduction=self.reduction)
