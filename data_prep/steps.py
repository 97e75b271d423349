"""Crash-safe preparation steps: all-or-nothing outputs, and re-runs that skip finished work.

Every file a step writes goes first to a temporary name beside its destination and is
renamed into place only when the step has finished (a rename within one directory is
atomic), so an interrupted run never leaves a half-written file under a real name. A
step is done when all its outputs exist; a re-run skips it, and an interrupted run
resumes at the first step that is not done.
"""

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Sequence

#: Suffix of the temporary files: ``train.de.tmp-1234`` (the writing process's id).
TMP_MARK = ".tmp-"


class PrepError(RuntimeError):
    """A preparation step that cannot go on; the message is one line naming the file."""


def temporary(path: Path) -> Path:
    """The temporary name under which ``path`` is written."""
    path = Path(path)
    return path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")


@contextlib.contextmanager
def atomic_outputs(paths: Sequence[Path]) -> Iterator[List[Path]]:
    """Yield temporary names for ``paths``; rename them all into place if the block
    finishes, remove them if it raises. Parent directories are created."""
    paths = [Path(p) for p in paths]
    tmps = [temporary(p) for p in paths]
    for tmp in tmps:
        tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield tmps
    except BaseException:
        for tmp in tmps:
            _remove(tmp)
        raise
    for tmp, path in zip(tmps, paths):
        if not tmp.exists():
            raise PrepError(f"{path}: the step did not write it")
    for tmp, path in zip(tmps, paths):
        os.replace(tmp, path)


def write_lines(path: Path, lines: Iterable[str]) -> Path:
    """Write ``lines`` (without newlines) to ``path`` atomically."""
    with atomic_outputs([path]) as (tmp,):
        with open(tmp, "w", encoding="utf-8") as out:
            for line in lines:
                out.write(line + "\n")
    return Path(path)


def read_lines(path: Path) -> List[str]:
    """The lines of a UTF-8 text file, without their newlines (:func:`split_lines`); a
    leading byte-order mark is not text and is dropped (Stanford's IWSLT15 tst2013 files
    start with one)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        return split_lines(f.read())


def split_lines(text: str) -> List[str]:
    r"""``text`` cut at its newlines (``\n``, or ``\r\n``) only, as Moses' scripts and
    fairseq read a file: ``str.splitlines`` would also cut at U+2028, U+0085, form feeds
    and ``\x1c``-``\x1e``, which real corpora hold inside sentences."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def done(outputs: Iterable[Path]) -> bool:
    return all(Path(p).exists() for p in outputs)


def run_step(name: str, outputs: Sequence[Path], make: Callable[[List[Path]], None],
             log: Callable[[str], None] = print) -> List[Path]:
    """Run ``make(temporary_paths)`` unless every one of ``outputs`` exists; its files
    appear under their real names only once it returns."""
    outputs = [Path(p) for p in outputs]
    if done(outputs):
        log(f"[{name}] done already, skipped")
        return outputs
    started = time.time()
    with atomic_outputs(outputs) as tmps:
        make(tmps)
    log(f"[{name}] {time.time() - started:.1f} s")
    return outputs


def remove_leftovers(folder: Path) -> None:
    """Delete temporary files that an interrupted run left in ``folder``."""
    for path in Path(folder).rglob(f"*{TMP_MARK}*"):
        _remove(path)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
