"""Sparsemax, 1.5-entmax and learned alpha-entmax attention.

alpha-entmax (Peters et al. 2019; Correia et al. 2019, "Adaptively Sparse Transformers")::

    entmax_alpha(s) = argmax_{p in simplex} p.s + H^T_alpha(p),
    H^T_alpha(p) = sum_j (p_j - p_j^alpha) / (alpha (alpha - 1))

alpha -> 1 gives softmax, alpha = 2 sparsemax (Martins & Astudillo 2016), and every alpha > 1
can give exact zeros. They are computed exactly, by the sorts of :mod:`.entmax_sort` or the
Newton solver of :mod:`.entmax_newton` as :mod:`.dispatch` picks; half precision in float32.
"""

import math
from functools import lru_cache, partial
from typing import Callable, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from ..normalizer_options import ALPHA_MAX, ALPHA_MIN, RANDOM_INIT, alpha_init
from .base import Normalizer, check_count
from .dispatch import Implementations, partial_for_one_alpha, sort_or_newton
from .entmax_general import MAX_STEPS, TOLERANCE, entmax_general
from .entmax_grad import entmax_function
from .entmax_newton import entmax15_newton, entmax_newton, sparsemax_newton
from .entmax_partial import partial_sort_entmax
from .entmax_sort import entmax15_sort, sorted_step, sparsemax_sort
from .fused_triton import entmax15_triton, entmax_any_triton, entmax_triton, sparsemax_triton
from .row_parameters import checked

#: Learned alpha's range and random start, and the check of its first value: declared
#: with the other hyper-parameters (:mod:`..normalizer_options`).
parse_alpha_init = alpha_init


def by_sort(algorithm: Callable[..., Tensor], alpha: float) -> Callable[[Tensor], Tensor]:
    """A sort-based ``algorithm`` of :mod:`.entmax_sort` (alpha-entmax at ``alpha``) over the
    last dim, with :mod:`.entmax_grad`'s closed-form gradients (twice differentiable). The
    sort keeps the contract itself (zeros on a row with every entry ``-inf``, NaN on one
    with a NaN or ``+inf``, and so the gradients), so no guard runs around it: at a
    decoding step's small rows its five operations were a tenth of the call."""
    def solve(scores: Tensor, _alpha: float):
        return algorithm(scores, dim=-1), None
    return partial(entmax_function, alpha=alpha, solve=solve)


#: Sparsemax's and 1.5-entmax's exact algorithms, as ``--attn-impl`` picks them (the
#: Newton solver and the sorts handle special rows themselves; the partial sort is guarded).
SPARSEMAX = Implementations(
    "sparsemax", {"sort": by_sort(sparsemax_sort, 2.0), "newton": sparsemax_newton,
                  "partial sort": partial(partial_sort_entmax, alpha=2.0)},
    ("newton, compiled", partial(sparsemax_newton, impl="compiled")),
    ("newton, triton", sparsemax_triton), sort_or_newton)
ENTMAX15 = Implementations(
    "1.5-entmax", {"sort": by_sort(entmax15_sort, 1.5), "newton": entmax15_newton,
                   "partial sort": partial(partial_sort_entmax, alpha=1.5)},
    ("newton, compiled", partial(entmax15_newton, impl="compiled")),
    ("newton, triton", entmax15_triton), sort_or_newton)


@lru_cache(maxsize=None)
def _entmax_alpha(max_iter: int) -> Implementations:
    """Learned alpha-entmax's solver with this iteration cap, as ``--attn-impl`` picks it."""
    return Implementations(
        "alpha-entmax", {"newton": partial(entmax_newton, max_iter=max_iter),
                         "partial sort": partial_sort_entmax},
        ("newton, compiled", partial(entmax_newton, max_iter=max_iter, impl="compiled")),
        ("newton, triton", partial(entmax_triton, max_iter=max_iter)), partial_for_one_alpha)


def _partial_above_one(scores: Tensor, alpha) -> Optional[str]:
    """:func:`.dispatch.partial_for_one_alpha` for one alpha above 1 (below it no entry is
    ever left out, so there is nothing to sort), and for any row above 2, on a CPU or CUDA:
    its supports are a few entries, solved exactly on their last weight, where the
    bracketed solver on the threshold loses small weights (docs/library.md)."""
    if isinstance(alpha, Tensor) or alpha <= 1:
        return None
    if alpha > 2:
        return "partial sort"
    return partial_for_one_alpha(scores, alpha)


#: The implementations ``--attn-impl`` picks among for alpha outside (1, 2]: the bracketed
#: Newton solver of :mod:`.entmax_general`, and the partial sort for long rows.
GENERAL = Implementations(
    "alpha-entmax (any alpha)",
    {"bracketed newton": partial(entmax_function, solve=entmax_general),
     "partial sort": partial_sort_entmax},
    ("bracketed newton, compiled",
     partial(entmax_function, solve=partial(entmax_general, fused=True))),
    ("bracketed newton, triton", partial(entmax_any_triton, max_steps=MAX_STEPS,
                                         tol=TOLERANCE)), _partial_above_one)


def general_weights(scores: Tensor, alpha: Union[float, Tensor], n_iter: int = 30,
                    impl: str = "auto") -> Tensor:
    """alpha-entmax of the last dim for any alpha > 0, by the eager solver or the Triton
    kernel as ``impl`` picks (``n_iter`` is for the (1, 2] solvers; this one stops on
    convergence), differentiable in the scores and a tensor alpha, twice. ``auto`` takes
    the eager partial sort for one alpha above 2 on CUDA too: the kernel's threshold solver
    loses small weights there (docs/library.md)."""
    if isinstance(alpha, Tensor):
        alpha = alpha.to(scores.dtype)
    elif impl == "auto" and alpha > 2:
        impl = "torch"
    return GENERAL(impl, scores, alpha)


def check_n_iter(n_iter: int) -> int:
    """``n_iter`` as a Python int, or a one-line ValueError (:func:`.base.check_count`)."""
    return check_count(n_iter, "n_iter", "the entmax solver")


def check_alpha(alpha: Union[float, Tensor]) -> Union[float, Tensor]:
    """``alpha`` if every value of it is a finite number > 0 (a tensor's are read back,
    which waits for a GPU), as a float if it is a number; ValueError, one line, otherwise."""
    return checked(alpha, lambda a: (a > 0) & torch.isfinite(a), "alpha", "(0, inf)",
                   "entmax_alpha")


def in_newton_range(alpha: Union[float, Tensor]) -> bool:
    """Whether every alpha lies in (1, 2], where the Newton solvers and kernels of
    :mod:`.entmax_newton` and :mod:`.fused_triton` apply (a tensor is read back)."""
    if isinstance(alpha, Tensor):
        return bool(((alpha > 1) & (alpha <= 2)).all())
    return 1.0 < alpha <= 2.0


def entmax_alpha_weights(scores: Tensor, alpha: Union[float, Tensor], n_iter: int = 30,
                         impl: str = "auto") -> Tensor:
    """alpha-entmax weights over the last dim of float32/float64 scores by the Newton solver
    (``n_iter`` steps at most) that ``impl`` picks, for ``alpha`` in (1, 2] (not checked
    here: :func:`in_newton_range`; other alphas: :func:`general_weights`): a
    number, or a tensor broadcastable to the scores with size 1 in the last dim (cast to the
    scores' dtype; differentiable). Rows with every key masked get all-zero weights, rows
    with a NaN or ``+inf`` NaN weights."""
    if isinstance(alpha, Tensor):
        alpha = alpha.to(scores.dtype)
    return _entmax_alpha(n_iter)(impl, scores, alpha)


def step_by_sort(normalizer: Normalizer, implementations: Implementations, alpha: float,
                 scores: Tensor) -> Tensor:
    """A decoding step's weights: by :func:`.entmax_sort.sorted_step` (no guard, no fill)
    where ``implementations`` would sort and no gradient is wanted, else ``normalizer``'s."""
    wants_grad = scores.requires_grad and torch.is_grad_enabled()
    if wants_grad or implementations.pick(normalizer.impl, scores)[0] != "sort":
        return normalizer(scores)
    implementations.announce(normalizer.impl, scores, "sort")
    return sorted_step(scores, alpha)


class Sparsemax(Normalizer):
    """``sparsemax(s) = argmin_{p in simplex} ||p - s||^2`` (alpha = 2)."""

    zeroes_empty_rows = True

    def normalize(self, scores: Tensor) -> Tensor:
        return SPARSEMAX(self.impl, scores)

    def step_weights(self, scores: Tensor) -> Tensor:
        return step_by_sort(self, SPARSEMAX, 2.0, scores)

    def fused_kind(self) -> Tuple[str, dict]:
        return "sparsemax", {}


class Entmax15(Normalizer):
    """1.5-entmax, computed exactly (Peters et al. 2019)."""

    zeroes_empty_rows = True

    def normalize(self, scores: Tensor) -> Tensor:
        return ENTMAX15(self.impl, scores)

    def step_weights(self, scores: Tensor) -> Tensor:
        return step_by_sort(self, ENTMAX15, 1.5, scores)

    def fused_kind(self) -> Tuple[str, dict]:
        return "entmax15", {}


class EntmaxAlpha(Normalizer):
    """alpha-entmax with one learned alpha per head (Correia et al. 2019): ``alpha_h =
    clamp(1 + sigmoid(z_h), 1.01, 2)``, recomputed from the unconstrained parameter ``z`` at
    every forward, so no optimiser step moves alpha out of its range. ``z`` stays float32
    under half-precision casts (``--fp16``, ``--bf16``; float64 casts apply): in float16
    alpha would move in steps of about 1e-3 and its gradient, growing like
    ``1 / (alpha - 1)^2``, would be rounded.

    Args:
        num_heads: attention heads of the module this normaliser serves.
        alpha_init: every head's first alpha, in [1.01, 2), or :data:`RANDOM_INIT` (z ~ N(0, 1)).
        n_iter: iteration cap of the Newton solver, which stops on convergence.
        impl: ``--attn-impl`` (:data:`~.dispatch.IMPLS`).
    """

    zeroes_empty_rows = True

    def __init__(self, num_heads: int, alpha_init: Union[float, str] = 1.5, n_iter: int = 30,
                 impl: str = "auto"):
        super().__init__(impl)
        alpha_init = parse_alpha_init(alpha_init)
        n_iter = check_n_iter(n_iter)
        if alpha_init == RANDOM_INIT:
            logit = torch.randn(num_heads)
        else:
            logit = torch.full((num_heads,), math.log((alpha_init - 1.0) / (2.0 - alpha_init)))
        self.alpha_logit = nn.Parameter(logit)
        self.n_iter = n_iter

    def _apply(self, fn, recurse=True):
        """``nn.Module``'s conversions (``.half()``, ``.to(dtype)``, ``.cuda()``, ...), except
        that ``alpha_logit`` and its gradient are never narrowed below float32: where
        ``fn`` would give float16/bfloat16, the float32 tensor moves to ``fn``'s device."""
        logit, grad = self.alpha_logit, self.alpha_logit.grad

        def at_least_float32(tensor):
            out = fn(tensor)
            if tensor is not logit and tensor is not grad:
                return out
            wide = torch.promote_types(out.dtype, torch.float32)
            return out if out.dtype == wide else tensor.to(device=out.device, dtype=wide)

        return super()._apply(at_least_float32, recurse)

    def alpha(self) -> Tensor:
        """The current alpha of each head, shape ``(H,)``."""
        return self.alpha_of(self.alpha_logit)

    @staticmethod
    def alpha_of(logit: Tensor) -> Tensor:
        """``clamp(1 + sigmoid(z), 1.01, 2)``: the alphas a stored ``alpha_logit`` means."""
        return (1.0 + torch.sigmoid(logit)).clamp(ALPHA_MIN, ALPHA_MAX)

    def normalize(self, scores: Tensor) -> Tensor:
        """Scores ``(B, H, T, S)``, or fairseq's ``(B*H, T, S)``: head ``h`` uses ``alpha_h``."""
        if scores.dim() == 3:
            return self.normalize(scores.unflatten(0, (-1, self.alpha_logit.numel()))
                                  ).flatten(0, 1)
        return entmax_alpha_weights(scores, self.alpha().view(1, -1, 1, 1), self.n_iter,
                                    self.impl)

    def fused_kind(self) -> Tuple[str, dict]:
        """Each head's alpha, in (1, 2] by construction (nothing to read back)."""
        return "entmax_alpha", {"alpha": self.alpha().view(-1, 1, 1), "max_iter": self.n_iter}

    def extra_repr(self) -> str:
        return f"num_heads={self.alpha_logit.numel()}, n_iter={self.n_iter}, impl={self.impl}"
