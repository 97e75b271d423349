"""Every output the project writes, written all-or-nothing (text read line by line:
:mod:`.reading`).

An output is written under a temporary name beside its destination
(``NAME.tmp-PID``) and renamed into place only when complete (a rename within a folder
is atomic): an interrupted run never leaves half a file, or half a folder, under a real
name, and what was there before stays until the new one is whole.
"""

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Iterable, Iterator, List, Mapping, Optional, Sequence

from .errors import SparseAttnError

#: Marks the temporary names (``train.de.tmp-1234``: the writing process's id), so that
#: the leftovers of a killed run can be found and removed.
TMP_MARK = ".tmp-"


class OutputError(SparseAttnError, OSError):
    """An output that cannot, or must not, be written; the message is one line naming
    it as the user gave it (never its temporary name)."""


def check_outputs(outputs: Mapping[str, Optional[os.PathLike]],
                  inputs: Mapping[str, Optional[os.PathLike]]) -> None:
    """Refuse, before any work, outputs (``{flag: path}``; None: not asked for) that would
    fail or destroy something: a folder that does not exist (it is not created: a typo
    would hide the output) or is not one, a path that is a folder, one of the ``inputs``
    (``{flag: path}``), or another output. :class:`OutputError`, one line naming the flag
    and the path."""
    given = [(flag, Path(path)) for flag, path in outputs.items() if path is not None]
    sources = [(flag, Path(path)) for flag, path in inputs.items() if path is not None]
    for k, (flag, path) in enumerate(given):
        parent = path.parent
        if not parent.exists():
            raise OutputError(f"{flag} {path}: no such folder {parent} (create it first)")
        if not parent.is_dir():
            raise OutputError(f"{flag} {path}: {parent} is not a folder")
        if path.is_dir():
            raise OutputError(f"{flag} {path}: is a folder")
        for other, used in sources + given[:k]:
            if _same_file(path, used):
                raise OutputError(f"{flag} {path}: the same file as {other}: choose "
                                  "another name")


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (by links too), existing or not."""
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def temporary(path) -> Path:
    """The temporary name under which ``path`` is written."""
    path = Path(path)
    return path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def remove_leftovers(folder) -> None:
    """Delete the temporary files and folders a killed run left under ``folder``."""
    for path in sorted(Path(folder).rglob(f"*{TMP_MARK}*")):
        _remove(path)


def remove_leftovers_of(path) -> None:
    """Delete what a killed run left while writing ``path`` (its temporary names)."""
    path = Path(path)
    for leftover in path.parent.glob(f"{path.name}{TMP_MARK}*"):
        _remove(leftover)


@contextlib.contextmanager
def atomic_outputs(paths: Sequence) -> Iterator[List[Path]]:
    """Yield temporary names for ``paths`` (files or folders the block creates); rename
    them all into place, replacing what was there, if the block finishes; remove them if
    it raises. Parent folders are created (:func:`check_outputs` refuses missing ones
    first where a user names the outputs); an OSError on a temporary name is an
    :class:`OutputError` naming the destination."""
    paths = [Path(p) for p in paths]
    tmps = [temporary(p) for p in paths]
    for tmp in tmps:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        _remove(tmp)  # a leftover of a process that had this id
    try:
        yield tmps
    except BaseException as err:
        for tmp in tmps:
            _remove(tmp)
        _raise_naming_the_destination(err, tmps, paths)
        raise
    try:
        _check_renames(tmps, paths)
        for tmp, path in zip(tmps, paths):
            if tmp.is_dir() and path.is_dir():  # a folder cannot be renamed over another
                old = temporary(path.with_name(path.name + ".old"))
                os.replace(path, old)
                os.replace(tmp, path)
                _remove(old)
            else:
                os.replace(tmp, path)
    except OSError as err:
        _raise_naming_the_destination(err, tmps, paths)
        raise
    finally:  # a rename that failed leaves no temporary behind
        for tmp in tmps:
            _remove(tmp)


def _check_renames(tmps: List[Path], paths: List[Path]) -> None:
    """Refuse before the first rename what would stop a later one: a temporary name the
    block did not write, a file to put where a folder is."""
    missing = [str(path) for tmp, path in zip(tmps, paths) if not tmp.exists()]
    if missing:
        raise RuntimeError(f"{', '.join(missing)}: not written by the block meant to write it")
    for tmp, path in zip(tmps, paths):
        if path.is_dir() and not tmp.is_dir():
            raise OutputError(f"{path}: is a folder")


def _raise_naming_the_destination(err: BaseException, tmps: List[Path],
                                  paths: List[Path]) -> None:
    """Raise an :class:`OutputError` naming the destination where ``err`` is an OSError
    about a temporary name (or a file under a temporary folder): the user never gave it."""
    names = [getattr(err, "filename", None), getattr(err, "filename2", None)]
    named = [Path(name) for name in names if isinstance(name, (str, os.PathLike))]
    for tmp, path in zip(tmps, paths):
        if any(name == tmp or tmp in name.parents for name in named):
            raise OutputError(f"{path}: cannot write ({err.strerror or err})") from err


@contextlib.contextmanager
def atomic_path(path) -> Iterator[Path]:
    """:func:`atomic_outputs` for one file or folder."""
    with atomic_outputs([path]) as (tmp,):
        yield tmp


def write_texts_atomic(texts: Mapping[os.PathLike, str]) -> None:
    """Write each ``{path: text}`` (UTF-8) all-or-nothing, all of them or none."""
    with atomic_outputs(list(texts)) as tmps:
        for tmp, text in zip(tmps, texts.values()):
            tmp.write_text(text, encoding="utf-8")


def write_text_atomic(path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` all-or-nothing."""
    write_texts_atomic({path: text})
    return Path(path)


def write_json_atomic(path, data) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_lines(path, lines: Iterable[str]) -> Path:
    """Write ``lines`` (without their newlines) to ``path`` all-or-nothing."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as out:
            for line in lines:
                out.write(line + "\n")
    return Path(path)
