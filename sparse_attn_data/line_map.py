"""Applying a per-line function to a corpus side, with a progress bar and optional worker
processes (tokenising and segmenting millions of WMT lines in one process takes hours)."""

import multiprocessing
from typing import Callable, List, Sequence

from tqdm import tqdm

_worker_fn = None
CHUNK = 2000


def _init(make, args):
    global _worker_fn
    _worker_fn = make(*args)


def _apply(chunk: List[str]) -> List[str]:
    return [_worker_fn(line) for line in chunk]


def map_lines(make: Callable[..., Callable[[str], str]], args: tuple, lines: Sequence[str],
              workers: int = 1, desc: str = "") -> List[str]:
    """``[fn(line) for line in lines]`` with ``fn = make(*args)`` built once per process;
    ``make`` and ``args`` must pickle when ``workers > 1``. Order is kept."""
    chunks = [list(lines[i:i + CHUNK]) for i in range(0, len(lines), CHUNK)]
    out: List[str] = []
    with tqdm(total=len(lines), desc=desc, unit="line", disable=None, mininterval=5) as bar:
        if workers <= 1 or len(chunks) <= 1:
            fn = make(*args)
            for chunk in chunks:
                out.extend(fn(line) for line in chunk)
                bar.update(len(chunk))
            return out
        with multiprocessing.get_context("spawn").Pool(workers, _init, (make, args)) as pool:
            for done in pool.imap(_apply, chunks):
                out.extend(done)
                bar.update(len(done))
    return out
