"""The fastest of several exact implementations of one normaliser, chosen by timing.

Sparsemax and 1.5-entmax each have two exact algorithms here: the entmax package's,
which sorts every row, and the safeguarded Newton solver of :mod:`.entmax_newton`. Which
one is faster depends on the device and on the row length (one sort of ``d`` keys against
a few passes over them), so :class:`Fastest` times them, forward and, when gradients are
wanted, backward, on the first scores of each kind it meets (device, dtype, row length
rounded up to a power of two, with or without gradients) and keeps the winner for the
rest of the process. Both agree to rounding, so the choice changes speed, not results.
"""

import logging
import time
from typing import Callable, Dict, Tuple

import torch
from torch import Tensor

logger = logging.getLogger(__name__)


def _kind(scores: Tensor) -> Tuple:
    """What the timing depends on: device, dtype, row length bucket, gradients."""
    length = 1 << max(scores.size(-1) - 1, 0).bit_length()
    return scores.device.type, scores.dtype, length, _wants_grad(scores)


def _wants_grad(scores: Tensor) -> bool:
    return scores.requires_grad and torch.is_grad_enabled()


class Fastest:
    """Calls whichever of ``candidates`` (name -> function of the scores) ran fastest
    on the first scores of the same :func:`_kind`; ``rounds`` timed calls each."""

    def __init__(self, family: str, candidates: Dict[str, Callable[[Tensor], Tensor]],
                 rounds: int = 3):
        self.family = family
        self.candidates = candidates
        self.rounds = rounds
        self.chosen: Dict[Tuple, str] = {}

    def __call__(self, scores: Tensor) -> Tensor:
        kind = _kind(scores)
        if kind not in self.chosen:
            self.chosen[kind] = self._time(scores)
            logger.info("%s on %s: the %s algorithm is the fastest here", self.family,
                        "/".join(map(str, kind[:3])), self.chosen[kind])
        return self.candidates[self.chosen[kind]](scores)

    def _time(self, scores: Tensor) -> str:
        sample = scores.detach().requires_grad_(_wants_grad(scores))
        upstream = torch.randn_like(sample) if sample.requires_grad else None
        sync = torch.cuda.synchronize if sample.is_cuda else (lambda: None)
        best = dict.fromkeys(self.candidates, float("inf"))
        for _ in range(self.rounds):                  # the best of each: warm-up ignored
            for name, fn in self.candidates.items():
                sync()
                start = time.perf_counter()
                out = fn(sample)
                if upstream is not None:
                    torch.autograd.grad(out, sample, upstream)
                sync()
                best[name] = min(best[name], time.perf_counter() - start)
        return min(best, key=best.get)
