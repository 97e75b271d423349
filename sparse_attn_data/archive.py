"""Reading the files a corpus needs out of its archives (``.tgz``, ``.tar.gz``, ``.tar``,
``.zip``, ``.gz``), with one clear line for a truncated or corrupt archive.

The format is told by the file name. Members are streamed to temporary names and renamed
when complete, so an interrupted extraction leaves no half-written file; only the
members asked for are written.
"""

import fnmatch
import gzip
import shutil
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Dict, List

from sparse_attn_plugin.files import atomic_outputs
from sparse_attn_plugin.reading import read_lines

from .steps import PrepError

TAR_SUFFIXES = (".tgz", ".tar.gz", ".tar", ".tar.bz2", ".tbz2")
_BROKEN = (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, OSError)


def _kind(archive: Path) -> str:
    name = archive.name.lower()
    if name.endswith(".zip"):
        return "zip"
    if name.endswith(TAR_SUFFIXES):
        return "tar"
    if name.endswith(".gz"):
        return "gz"
    raise PrepError(f"{archive}: not a tar, zip or gzip archive (by its name)")


def members(archive: Path) -> List[str]:
    """The names of the files in ``archive`` (a lone ``.gz`` holds one: its stem). Reads
    the whole archive, so a truncated one is caught here."""
    archive = Path(archive)
    kind = _kind(archive)
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as z:
                bad = z.testzip()
                if bad is not None:
                    raise zipfile.BadZipFile(f"bad CRC in {bad}")
                return [i.filename for i in z.infolist() if not i.is_dir()]
        if kind == "tar":
            with tarfile.open(archive) as t:
                return [m.name for m in t.getmembers() if m.isfile()]
        with gzip.open(archive) as g:
            while g.read(1 << 20):
                pass
        return [archive.name[:-3]]
    except _BROKEN as err:
        raise _broken(archive, err) from None


def extract(archive: Path, wanted: Dict[str, Path]) -> Dict[str, Path]:
    """Write the members of ``archive`` named by ``wanted``'s keys (exact names, or
    ``fnmatch`` patterns that match exactly one member) to its values; return
    ``{key: destination}``. A missing member or a damaged archive raises PrepError."""
    archive = Path(archive)
    names = members(archive)
    chosen = {}
    for pattern, dest in wanted.items():
        found = [n for n in names if n == pattern or fnmatch.fnmatch(n, pattern)]
        if len(found) != 1:
            raise PrepError(f"{archive}: expected one member matching {pattern!r}, found "
                            f"{len(found) or 'none'}"
                            + (f" ({', '.join(found[:3])})" if found else ""))
        chosen[found[0]] = Path(dest)
    try:
        for name, stream in _streams(archive, set(chosen)):
            with atomic_outputs([chosen[name]]) as (tmp,), open(tmp, "wb") as out:
                shutil.copyfileobj(stream, out, 1 << 20)
    except _BROKEN as err:
        raise _broken(archive, err) from None
    return {pattern: dest for pattern, dest in zip(wanted, chosen.values())}


def _streams(archive: Path, names: set):
    """(name, readable) for each member in ``names``, in one pass over the archive."""
    kind = _kind(archive)
    if kind == "zip":
        with zipfile.ZipFile(archive) as z:
            for name in names:
                with z.open(name) as stream:
                    yield name, stream
    elif kind == "tar":
        with tarfile.open(archive) as t:
            for member in t:
                if member.name in names:
                    yield member.name, t.extractfile(member)
    else:
        with gzip.open(archive) as stream:
            yield next(iter(names)), stream


def _broken(archive: Path, err: Exception) -> PrepError:
    return PrepError(f"{archive}: truncated or corrupt archive ({type(err).__name__}: {err}); "
                     "delete it and run again to download it afresh")


def extract_lines(archive: Path, wanted: Dict[str, str], folder: Path) -> Dict[str, List[str]]:
    """The lines of the members of ``archive`` named by ``wanted``'s keys (names or
    patterns), keyed by ``wanted``'s values; the files are written to ``folder``."""
    paths = extract(archive, {member: Path(folder) / key for member, key in wanted.items()})
    return {wanted[member]: read_lines(path) for member, path in paths.items()}
