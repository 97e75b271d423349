"""The entmax package's public API (entmax 1.3) on this library's normalisers: with
``import sparse_attn_plugin.entmax_compat as entmax`` code written for entmax runs as it is.

Same names, signatures and defaults; what differs is documented in docs/library.md ("From
the entmax package"): every function is exact (the ``*_bisect`` ones solve their threshold
by safeguarded Newton steps, not ``n_iter`` halvings), so ``n_iter`` and ``ensure_sum_one``
are accepted and checked but change no result, and ``k`` is the partial sort's first guess,
as in entmax (exact whatever it is); a NaN or ``+inf`` row gives NaN weights (entmax: an
IndexError or plausible numbers); weights come back in the scores' dtype, as entmax's do.
"""

from typing import Dict, Optional, Union

from torch import Tensor, nn

from . import functional as F
from . import losses as L
from .normalizers.base import check_count
from .normalizers.budget import budget_sparsemax
from .normalizers.entmax_sort import threshold_and_support
from .normalizers.normmax import normmax

Alpha = Union[float, Tensor]

#: Each public name of entmax 1.3 and the function or class of this library it runs.
EQUIVALENTS: Dict[str, str] = {
    "sparsemax": "functional.sparsemax",
    "entmax15": "functional.entmax15",
    "sparsemax_bisect": "functional.sparsemax",
    "entmax_bisect": "functional.entmax_alpha",
    "normmax_bisect": "functional.normmax",
    "budget_bisect": "functional.budget_sparsemax",
    "sparsemax_loss": "losses.sparsemax_loss",
    "entmax15_loss": "losses.entmax15_loss",
    "sparsemax_bisect_loss": "losses.sparsemax_bisect_loss",
    "entmax_bisect_loss": "losses.entmax_bisect_loss",
    "normmax_bisect_loss": "losses.normmax_loss",
    "Sparsemax": "functional.sparsemax",
    "Entmax15": "functional.entmax15",
    "SparsemaxBisect": "functional.sparsemax",
    "EntmaxBisect": "functional.entmax_alpha",
    "NormmaxBisect": "functional.normmax",
    "BudgetBisect": "functional.budget_sparsemax",
    "SparsemaxLoss": "losses.SparsemaxLoss",
    "Entmax15Loss": "losses.Entmax15Loss",
    "SparsemaxBisectLoss": "losses.SparsemaxBisectLoss",
    "EntmaxBisectLoss": "losses.EntmaxBisectLoss",
    "NormmaxBisectLoss": "losses.NormmaxLoss",
}


def _checked_k(k: Optional[int]) -> Optional[int]:
    return None if k is None else check_count(k, "k", "entmax_compat")


def _checked_iterations(n_iter: Optional[int]) -> None:
    if n_iter is not None:
        check_count(n_iter, "n_iter", "entmax_compat")


def _as_given(result: Tensor, X: Tensor) -> Tensor:
    """Weights or losses in the scores' dtype, as entmax returns them (ours are float32 for
    half precision scores)."""
    return result.to(X.dtype)


# -- the mappings -------------------------------------------------------------------------

def sparsemax(X: Tensor, dim: int = -1, k: Optional[int] = None) -> Tensor:
    """Sparsemax (Martins & Astudillo 2016) along ``dim``; ``k``: the partial sort's first
    guess (exact whatever it is)."""
    return _as_given(F.sparsemax(X, dim, k=_checked_k(k)), X)


def entmax15(X: Tensor, dim: int = -1, k: Optional[int] = None) -> Tensor:
    """1.5-entmax (Peters et al. 2019) along ``dim``; ``k`` as in :func:`sparsemax`."""
    return _as_given(F.entmax15(X, dim, k=_checked_k(k)), X)


def sparsemax_bisect(X: Tensor, dim: int = -1, n_iter: int = 50,
                     ensure_sum_one: bool = True) -> Tensor:
    """Sparsemax, exact (entmax bisects ``n_iter`` times; the weights always sum to 1)."""
    _checked_iterations(n_iter)
    return _as_given(F.sparsemax(X, dim), X)


def entmax_bisect(X: Tensor, alpha: Alpha = 1.5, dim: int = -1, n_iter: int = 50,
                  ensure_sum_one: bool = True) -> Tensor:
    """alpha-entmax for any alpha > 0, a number or a tensor with size 1 along ``dim``,
    differentiable in ``X`` and ``alpha``; exact (the weights always sum to 1)."""
    _checked_iterations(n_iter)
    return _as_given(F.entmax_alpha(X, alpha, dim), X)


def normmax_bisect(X: Tensor, alpha: Alpha = 2, dim: int = -1, n_iter: int = 50) -> Tensor:
    """alpha-normmax (Santos et al. 2024) along ``dim``, exact."""
    _checked_iterations(n_iter)
    return _as_given(normmax(X, alpha, dim), X)


def budget_bisect(X: Tensor, budget: Alpha = 2, dim: int = -1, n_iter: int = 50) -> Tensor:
    """Budget sparsemax (weights in [0, 1] summing to ``budget``) along ``dim``, exact."""
    _checked_iterations(n_iter)
    return _as_given(budget_sparsemax(X, budget, dim), X)


def _sparsemax_threshold_and_support(X: Tensor, dim: int = -1, k: Optional[int] = None):
    """Sparsemax's ``(tau, support size)`` along ``dim``, as entmax's private function."""
    _checked_k(k)
    return threshold_and_support(X, 2.0, dim)


def _entmax_threshold_and_support(X: Tensor, dim: int = -1, k: Optional[int] = None):
    """1.5-entmax's ``(tau, support size)`` of ``X`` as entmax's private function computes
    them: for the entmax15 of ``2 X`` (its Function halves the scores first)."""
    _checked_k(k)
    return threshold_and_support(X * 2, 1.5, dim)


class _Mapping(nn.Module):
    """A function above as a module with entmax 1.3's attributes (``dim`` and those of
    :attr:`attributes`), read at each call: code written for entmax sets them after
    construction (``module.alpha = 1.1``)."""

    function = None
    #: The function's arguments besides the scores and ``dim``, kept as attributes.
    attributes = ()

    def __init__(self, dim: int = -1, **values):
        super().__init__()
        self.dim = dim
        for name, value in values.items():
            setattr(self, name, value)

    def forward(self, X: Tensor) -> Tensor:
        return type(self).function(X, dim=self.dim,
                                   **{name: getattr(self, name) for name in self.attributes})


class Sparsemax(_Mapping):
    function, attributes = staticmethod(sparsemax), ("k",)

    def __init__(self, dim: int = -1, k: Optional[int] = None):
        super().__init__(dim, k=_checked_k(k))


class Entmax15(_Mapping):
    function, attributes = staticmethod(entmax15), ("k",)

    def __init__(self, dim: int = -1, k: Optional[int] = None):
        super().__init__(dim, k=_checked_k(k))


class SparsemaxBisect(_Mapping):
    function, attributes = staticmethod(sparsemax_bisect), ("n_iter",)

    def __init__(self, dim: int = -1, n_iter: Optional[int] = None):
        _checked_iterations(n_iter)
        super().__init__(dim, n_iter=n_iter)


class EntmaxBisect(_Mapping):
    """As entmax's: ``alpha`` may be a tensor (e.g. an ``nn.Parameter``, registered here as
    entmax registers it)."""

    function, attributes = staticmethod(entmax_bisect), ("alpha", "n_iter")

    def __init__(self, alpha: Alpha = 1.5, dim: int = -1, n_iter: int = 50):
        _checked_iterations(n_iter)
        super().__init__(dim, alpha=alpha, n_iter=n_iter)


class NormmaxBisect(_Mapping):
    function, attributes = staticmethod(normmax_bisect), ("alpha", "n_iter")

    def __init__(self, alpha: Alpha = 2, dim: int = -1, n_iter: int = 50):
        _checked_iterations(n_iter)
        super().__init__(dim, alpha=alpha, n_iter=n_iter)


class BudgetBisect(_Mapping):
    function, attributes = staticmethod(budget_bisect), ("budget", "n_iter")

    def __init__(self, budget: Alpha = 2, dim: int = -1, n_iter: int = 50):
        _checked_iterations(n_iter)
        super().__init__(dim, budget=budget, n_iter=n_iter)


# -- the losses ----------------------------------------------------------------------------

def sparsemax_loss(X: Tensor, target: Tensor, k: Optional[int] = None) -> Tensor:
    """The sparsemax loss of each row (no reduction), as entmax's; ``k`` as in
    :func:`sparsemax`."""
    return _as_given(L.sparsemax_loss(X, target, k=_checked_k(k)), X)


def entmax15_loss(X: Tensor, target: Tensor, k: Optional[int] = None) -> Tensor:
    """The 1.5-entmax loss of each row (no reduction), as entmax's; ``k`` as in
    :func:`sparsemax`."""
    return _as_given(L.entmax15_loss(X, target, k=_checked_k(k)), X)


def sparsemax_bisect_loss(X: Tensor, target: Tensor, n_iter: int = 50) -> Tensor:
    return _as_given(L.sparsemax_bisect_loss(X, target, n_iter), X)


def entmax_bisect_loss(X: Tensor, target: Tensor, alpha: Alpha = 1.5,
                       n_iter: int = 50) -> Tensor:
    return _as_given(L.entmax_bisect_loss(X, target, alpha, n_iter), X)


def normmax_bisect_loss(X: Tensor, target: Tensor, alpha: Alpha = 2,
                        n_iter: int = 50) -> Tensor:
    return _as_given(L.normmax_loss(X, target, alpha, n_iter), X)


class _InScoresDtype:
    """A loss module whose loss comes back in the scores' dtype, as entmax's (ours is
    float32 for half precision scores)."""

    def forward(self, X: Tensor, target: Tensor) -> Tensor:
        return _as_given(super().forward(X, target), X)


class SparsemaxLoss(_InScoresDtype, L.SparsemaxLoss):
    def __init__(self, k: Optional[int] = None, ignore_index: int = -100,
                 reduction: str = "elementwise_mean"):
        super().__init__(ignore_index=ignore_index, reduction=reduction, k=_checked_k(k))


class Entmax15Loss(_InScoresDtype, L.Entmax15Loss):
    def __init__(self, k: Optional[int] = 100, ignore_index: int = -100,
                 reduction: str = "elementwise_mean"):
        super().__init__(ignore_index=ignore_index, reduction=reduction, k=_checked_k(k))


class SparsemaxBisectLoss(_InScoresDtype, L.SparsemaxBisectLoss):
    def __init__(self, n_iter: int = 50, ignore_index: int = -100,
                 reduction: str = "elementwise_mean"):
        super().__init__(n_iter, ignore_index=ignore_index, reduction=reduction)


class EntmaxBisectLoss(_InScoresDtype, L.EntmaxBisectLoss):
    def __init__(self, alpha: Alpha = 1.5, n_iter: int = 50, ignore_index: int = -100,
                 reduction: str = "elementwise_mean"):
        super().__init__(alpha, n_iter, ignore_index=ignore_index, reduction=reduction)


class NormmaxBisectLoss(_InScoresDtype, L.NormmaxLoss):
    def __init__(self, alpha: Alpha = 2, n_iter: int = 50, ignore_index: int = -100,
                 reduction: str = "elementwise_mean"):
        super().__init__(alpha, n_iter, ignore_index=ignore_index, reduction=reduction)


__all__ = sorted(EQUIVALENTS)
