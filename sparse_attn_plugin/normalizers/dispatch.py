"""Which implementation of a normaliser runs: a fixed rule of ``--attn-impl`` (:data:`IMPLS`)
and the scores' device and size. Nothing is timed and nothing is compiled unless asked.

``torch`` runs eagerly, by the algorithm measured faster for that device and size
(:func:`sort_or_newton`); ``compiled`` fuses with ``torch.compile``; ``triton`` runs
:mod:`.fused_triton` on a CUDA device; ``auto`` is ``triton`` where it can run and the rows
fit (``MAX_COLS``), ``torch`` elsewhere, and falls back to ``torch`` with one warning where a
Triton kernel fails to run. Why a rule and not a race: docs/methods.md, "How they are
computed".
"""

import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Set, Tuple

import torch
from torch import Tensor

from .fused_triton import MAX_COLS, have_triton

logger = logging.getLogger(__name__)

#: Values of ``--attn-impl``.

#: An implementation: its name (as logged) and its function of the scores and ``*args``.
Kernel = Tuple[str, Callable[..., Tensor]]

#: Scores (elements of one call) from which the Newton solver beats the entmax package's
#: sort on a CPU: the sort is faster on small decoding steps, where the solver's per-step
#: overhead dominates, Newton on training batches (``[sort]`` against ``[newton]`` in
#: results/bench/normalizers.md; docs/methods.md quotes them).
NEWTON_FROM = 1 << 14
#: Rows of at least ``PARTIAL_COLS`` entries, in calls of at least ``PARTIAL_FROM`` scores,
#: are solved on a CPU by the partial sort of :mod:`.entmax_partial` (an output layer's
#: vocabulary, a decoding step's included); below either, the Newton solver's passes stay
#: in cache and win (docs/methods.md, "Long rows").
PARTIAL_COLS, PARTIAL_FROM = 1024, 1 << 18

_triton_failed = False


def resolve(impl: str, scores: Tensor) -> str:
    """The implementation ``impl`` runs for ``scores``: itself, or for ``auto`` ``triton``
    where it fits (a CUDA tensor, Triton installed and working, rows of at most
    ``MAX_COLS`` keys) and ``torch`` elsewhere."""
    if impl != "auto":
        return impl
    fits = scores.is_cuda and scores.size(-1) <= MAX_COLS
    return "triton" if fits and not _triton_failed and have_triton() else "torch"


def long_rows(scores: Tensor) -> bool:
    """Whether the eager rules pick the partial sort: CPU scores of at least
    :data:`PARTIAL_FROM` entries in rows of at least :data:`PARTIAL_COLS`."""
    return (not scores.is_cuda and scores.size(-1) >= PARTIAL_COLS
            and scores.numel() >= PARTIAL_FROM)


def sort_or_newton(scores: Tensor, *args) -> str:
    """The eager rule for sparsemax and 1.5-entmax: ``partial sort`` for :func:`long_rows`,
    ``sort`` on a GPU (faster there, each Newton step being several kernel launches:
    docs/gpus.md) and for fewer than :data:`NEWTON_FROM` scores on a CPU, ``newton`` for
    more."""
    if long_rows(scores):
        return "partial sort"
    return "sort" if scores.is_cuda or scores.numel() < NEWTON_FROM else "newton"


def partial_for_one_alpha(scores: Tensor, alpha, *args) -> Optional[str]:
    """The eager rule for alpha-entmax: ``partial sort`` for :func:`long_rows` when alpha is
    one number, else (``None``) its solver."""
    return "partial sort" if long_rows(scores) and not isinstance(alpha, Tensor) else None


@dataclass
class Implementations:
    """One normaliser's implementations: ``eager`` its eager kernels by name, of which
    ``eager_rule`` names the one to run for given scores and arguments (the first where
    it names none or there is no rule),
    ``compiled`` and ``triton`` its fused kernels. Called with ``--attn-impl`` and the
    scores (and the kernels' further arguments), it runs the one :func:`resolve` names,
    and logs which, once per implementation and device."""

    family: str
    eager: Dict[str, Callable[..., Tensor]]
    compiled: Kernel
    triton: Kernel
    eager_rule: Optional[Callable[..., Optional[str]]] = None
    announced: Set[Tuple[str, str, str]] = field(default_factory=set)

    def kernels(self, impl: str) -> Dict[str, Callable[..., Tensor]]:
        """Every kernel an explicit ``--attn-impl impl`` may run, by name."""
        return self.eager if impl == "torch" else dict([getattr(self, impl)])

    def pick(self, impl: str, scores: Tensor, *args) -> Kernel:
        """The kernel ``--attn-impl impl`` runs for ``scores`` (and the kernels' ``args``)."""
        chosen = resolve(impl, scores)
        if chosen != "torch":
            return getattr(self, chosen)
        name = (self.eager_rule and self.eager_rule(scores, *args)) or next(iter(self.eager))
        return name, self.eager[name]

    def announce(self, impl: str, scores: Tensor, name: str) -> None:
        """Log which kernel ``--attn-impl impl`` runs, once per implementation and device."""
        key = (impl, scores.device.type, name)
        if key not in self.announced:
            self.announced.add(key)
            logger.info("%s on %s with --attn-impl %s: %s", self.family, key[1], impl, name)

    def __call__(self, impl: str, scores: Tensor, *args) -> Tensor:
        name, kernel = self.pick(impl, scores, *args)
        self.announce(impl, scores, name)
        if impl != "auto" or kernel is not self.triton[1]:
            return kernel(scores, *args)
        try:
            return kernel(scores, *args)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as error:  # Triton cannot compile or launch here
            _leave_out_triton(self.family, error)
        return self(impl, scores, *args)


def _leave_out_triton(family: str, error: Exception) -> None:
    global _triton_failed
    _triton_failed = True
    reason = str(error).strip().splitlines()
    logger.warning("%s: the Triton kernels cannot run here (%s%s); --attn-impl auto runs "
                   "the eager ones for the rest of this process", family,
                   type(error).__name__, f": {reason[0]}" if reason else "")
