"""Crash-safe preparation steps: all-or-nothing outputs, and re-runs that skip finished work.

A step writes each output under a temporary name and renames it when the step has finished
(:func:`sparse_attn_plugin.files.atomic_outputs`); a step is done when all its outputs
exist, so a re-run resumes at the first step that is not done.
"""

import logging
import time
from pathlib import Path
from typing import Callable, Iterable, List, Sequence

from sparse_attn_plugin.errors import SparseAttnError
from sparse_attn_plugin.files import atomic_outputs

logger = logging.getLogger(__name__)


class PrepError(SparseAttnError, RuntimeError):
    """A preparation step that cannot go on; the message is one line naming the file."""


def done(outputs: Iterable[Path]) -> bool:
    return all(Path(p).exists() for p in outputs)


def run_step(name: str, outputs: Sequence[Path], make: Callable[[List[Path]], None]
             ) -> List[Path]:
    """Run ``make(temporary_paths)`` unless every one of ``outputs`` exists; its files
    appear under their real names only once it returns."""
    outputs = [Path(p) for p in outputs]
    if done(outputs):
        logger.info(f"[{name}] done already, skipped")
        return outputs
    started = time.time()
    with atomic_outputs(outputs) as tmps:
        make(tmps)
    logger.info(f"[{name}] {time.time() - started:.1f} s")
    return outputs
