"""The fastest of several exact implementations of one normaliser, chosen by timing.

A normaliser may have several exact algorithms (sparsemax and 1.5-entmax: the entmax
package's sort, or the safeguarded Newton solver of :mod:`.entmax_newton`) and each may
run eagerly or fused by ``torch.compile`` (:mod:`.compiled`). Which is fastest depends on
the device and on the row length, so :class:`Fastest` times the candidates, forward and,
when gradients are wanted, backward, on the first scores of each kind it meets (device,
dtype, row length rounded up to a power of two, with or without gradients) and keeps
the winner for the rest of the process. All candidates agree to rounding, so the choice
changes speed, not results; it is logged once per kind.

``--attn-impl`` picks the candidates (:func:`by_impl`): ``torch`` the eager ones,
``compiled`` the compiled ones, ``triton`` the Triton kernels of :mod:`.fused_triton`
(a CUDA device), ``auto`` all that run on the device, the compiled and Triton ones
joining only once the normaliser has been called :data:`COMPILE_AFTER` times in the
process, so that a short run (a test, a quick decode) never pays seconds of compilation
while a training of thousands of steps gets the fused kernels where they are faster.
"""

import logging
import time
from typing import Callable, Dict, Iterable, Tuple

import torch
from torch import Tensor

from .fused_triton import have_triton

logger = logging.getLogger(__name__)

#: Values of ``--attn-impl``.
IMPLS = ("auto", "torch", "compiled", "triton")
#: Calls of one normaliser after which ``auto`` also times its compiled kernels (a
#: 6-layer model calls each normaliser of every site 6 times per forward pass).
COMPILE_AFTER = 600


def _wants_grad(scores: Tensor) -> bool:
    return scores.requires_grad and torch.is_grad_enabled()


def _kind(scores: Tensor) -> Tuple:
    """What the timing depends on: device, dtype, row length bucket, gradients."""
    length = 1 << max(scores.size(-1) - 1, 0).bit_length()
    return scores.device.type, scores.dtype, length, _wants_grad(scores)


class Fastest:
    """Calls whichever candidate (name -> function of the scores and ``*args``) ran
    fastest on the first scores of the same :func:`_kind`, timed over ``rounds`` calls
    each. ``later`` candidates join the timing after ``compile_after`` calls; those
    named in ``cuda_only`` take part only for CUDA scores with Triton installed. A later
    candidate that fails when first timed (no C++ compiler for ``torch.compile``, a GPU
    Triton cannot compile for) is left out for the rest of the process, with a warning,
    so that ``auto`` never stops a run over an optional kernel; the others' errors
    propagate."""

    def __init__(self, family: str, candidates: Dict[str, Callable[..., Tensor]],
                 later: Dict[str, Callable[..., Tensor]] = None,
                 compile_after: int = COMPILE_AFTER, rounds: int = 3,
                 cuda_only: Iterable[str] = ()):
        self.family = family
        self.candidates = candidates
        self.later = later or {}
        self.everything = {**candidates, **self.later}
        self.compile_after = compile_after
        self.rounds = rounds
        self.cuda_only = frozenset(cuda_only)
        self.failed = set()
        self.calls = 0
        self.chosen: Dict[Tuple, Tuple[str, Callable[..., Tensor]]] = {}

    def __call__(self, scores: Tensor, *args) -> Tensor:
        self.calls += 1
        joined = bool(self.later) and self.calls > self.compile_after
        kind = (*_kind(scores), joined)
        if kind not in self.chosen:
            pool = self._pool(scores, joined)
            name = self._time(pool, scores, args) if len(pool) > 1 else next(iter(pool))
            self.chosen[kind] = name, pool[name]
            logger.info("%s on %s: %s is the fastest here", self.family,
                        "/".join(map(str, kind[:3])), name)
        return self.chosen[kind][1](scores, *args)

    def _pool(self, scores: Tensor, joined: bool) -> Dict[str, Callable[..., Tensor]]:
        """The candidates for these scores: the later ones once ``joined``, the CUDA-only
        ones on CUDA with Triton, none that failed."""
        pool = self.everything if joined else self.candidates
        left_out = self.failed if scores.is_cuda and have_triton() else \
            self.failed | self.cuda_only
        return {name: fn for name, fn in pool.items() if name not in left_out}

    def _time(self, pool, scores: Tensor, args) -> str:
        sample = scores.detach().requires_grad_(_wants_grad(scores))
        upstream = torch.randn_like(sample) if sample.requires_grad else None
        sync = torch.cuda.synchronize if sample.is_cuda else (lambda: None)
        best = dict.fromkeys(pool, float("inf"))
        for _ in range(self.rounds):  # the best of each round: compilation and warm-up left out
            for name, fn in pool.items():
                if name in self.failed:
                    continue
                sync()
                start = time.perf_counter()
                try:
                    out = fn(sample, *args)
                    if upstream is not None:
                        torch.autograd.grad(out, sample, upstream)
                except Exception as error:  # any failure of an optional kernel
                    if name not in self.later:
                        raise
                    self._leave_out(name, error)
                    del best[name]
                    continue
                sync()
                best[name] = min(best[name], time.perf_counter() - start)
        return min(best, key=best.get)

    def _leave_out(self, name: str, error: Exception) -> None:
        self.failed.add(name)
        reason = str(error).strip().splitlines()
        logger.warning("%s: %s cannot run here and is left out of --attn-impl auto (%s%s)",
                       self.family, name, type(error).__name__,
                       f": {reason[0]}" if reason else "")


def by_impl(family: str, eager: Dict[str, Callable[..., Tensor]],
            compiled: Dict[str, Callable[..., Tensor]],
            triton: Dict[str, Callable[..., Tensor]]) -> Dict[str, Fastest]:
    """One :class:`Fastest` per value of ``--attn-impl`` for these candidates."""
    return {"torch": Fastest(family, eager), "compiled": Fastest(family, compiled),
            "triton": Fastest(family, triton),
            "auto": Fastest(family, eager, later={**compiled, **triton}, cuda_only=triton)}
