"""Timing for the benchmarks: calls measured in interleaved rounds, medians kept.

Taking turns round by round means drift in machine load hits every call alike, so
the ratios between them (the only speed figures we report) stay meaningful.
"""

import statistics
import time
from typing import Callable, Dict


def time_per_call(fn: Callable[[], object], inner: int, sync: Callable[[], None]) -> float:
    """Seconds per call of ``fn`` over ``inner`` back-to-back calls."""
    sync()
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    sync()
    return (time.perf_counter() - start) / inner


def interleaved_medians(calls: Dict[str, Callable[[], object]], rounds: int, sample_s: float = 0.0,
                        sync: Callable[[], None] = lambda: None) -> Dict[str, float]:
    """Median seconds per call of each of ``calls``, over ``rounds`` rounds in which
    they take turns (starting one later each round). Each sample repeats a call
    enough times (at most 200) to last about ``sample_s`` seconds (once if 0)."""
    names = list(calls)
    inner = dict.fromkeys(names, 1)
    for name in names if sample_s > 0 else ():
        once = min(time_per_call(calls[name], 1, sync) for _ in range(2))
        inner[name] = max(1, min(200, round(sample_s / max(once, 1e-9))))
    samples = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(time_per_call(calls[name], inner[name], sync))
    return {name: statistics.median(s) for name, s in samples.items()}
