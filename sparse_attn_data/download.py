"""Fetching a corpus's archives: resumable downloads with retries and integrity checks, or
files a user already has (offline: ``--raw-dir DIR`` or ``SPARSE_ATTN_RAW_DIR``).

A download goes to ``NAME.part`` and resumes from its end with an HTTP ``Range`` request
(from zero where the server ignores it). A file whose size or SHA-256 differs from the
recorded one (other maintained tools' records, named beside each) is refused and its
``.part`` removed, unless ``--no-checksums``; only a complete, checked file gets its name.
"""

import hashlib
import http.client
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tqdm import tqdm

from .steps import PrepError

logger = logging.getLogger(__name__)

#: Environment variable naming a directory of archives a user already has.
RAW_DIR_ENV = "SPARSE_ATTN_RAW_DIR"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Source:
    """One file of a corpus: where it is published and, where known, its size in bytes
    and a checksum, ``"ALGORITHM:HEX"`` (``sha256``, ``sha1`` or ``md5``)."""

    url: str
    filename: str
    size: Optional[int] = None
    checksum: Optional[str] = None


def raw_dir_from(flag: Optional[str]) -> Optional[Path]:
    """The offline directory: the flag's, else the environment's, else None."""
    value = flag or os.environ.get(RAW_DIR_ENV)
    return Path(value) if value else None


def check_file(path: Path, source: Source) -> None:
    """Raise PrepError (one line) if ``path`` is not the expected file."""
    size = path.stat().st_size
    if source.size is not None and size != source.size:
        raise PrepError(f"{path}: {size} bytes, expected {source.size} (truncated or the "
                        f"wrong file; delete it to download {source.url} again)")
    if source.checksum is not None:
        algorithm, expected = source.checksum.split(":")
        digest = checksum_of(path, algorithm)
        if digest != expected:
            raise PrepError(f"{path}: {algorithm} {digest[:12]}..., expected "
                            f"{expected[:12]}... (corrupt or the wrong file)")


def checksum_of(path: Path, algorithm: str = "sha256") -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(source: Source, folder: Path, raw_dir: Optional[Path] = None, retries: int = 5,
          timeout: float = 60.0, backoff: float = 2.0) -> Path:
    """``folder/source.filename``: taken from ``raw_dir`` if given, else downloaded
    (resuming a ``.part`` left by an earlier run); checked either way."""
    folder = Path(folder)
    dest = folder / source.filename
    if dest.exists():
        check_file(dest, source)
        return dest
    folder.mkdir(parents=True, exist_ok=True)
    if raw_dir is not None:
        given = Path(raw_dir) / source.filename
        if not given.is_file():
            raise PrepError(f"{given}: not found; offline mode (--raw-dir or "
                            f"{RAW_DIR_ENV}) downloads nothing: put {source.url} there")
        check_file(given, source)
        return given
    part = dest.with_name(dest.name + ".part")
    for attempt in range(1, retries + 1):
        try:
            _download(source, part, timeout)
            break
        except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
            if isinstance(err, urllib.error.HTTPError) and err.code in (403, 404, 410):
                raise PrepError(f"{source.url}: HTTP {err.code} {err.reason}") from None
            if attempt == retries:
                raise PrepError(f"{source.url}: download failed after {retries} attempts "
                                f"({err}); run again to resume from {part}, or give the "
                                f"files you have with --raw-dir DIR (or {RAW_DIR_ENV}): "
                                f"{source.filename} there") from None
            wait = backoff ** attempt
            logger.info(f"{source.filename}: {err}; retry {attempt}/{retries - 1} in "
                        f"{wait:.0f} s")
            time.sleep(wait)
    try:
        check_file(part, source)
    except PrepError:
        part.unlink()
        raise
    os.replace(part, dest)
    return dest


def _download(source: Source, part: Path, timeout: float) -> None:
    """Append the rest of ``source`` to ``part`` (all of it if the server ignores Range)."""
    have = part.stat().st_size if part.exists() else 0
    if source.size is not None and have == source.size:
        return
    request = urllib.request.Request(source.url, headers={"Range": f"bytes={have}-"}
                                     if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # nothing left to send: the .part is complete
            return
        raise
    with response:
        resumed = have and response.status == 206
        mode = "ab" if resumed else "wb"
        length = response.headers.get("Content-Length")
        total = (int(length) + (have if resumed else 0)) if length else None
        with open(part, mode) as out, tqdm(total=total, initial=have if resumed else 0,
                                           unit="B", unit_scale=True, desc=source.filename,
                                           disable=None) as bar:
            for block in iter(lambda: response.read(CHUNK), b""):
                out.write(block)
                bar.update(len(block))
        if total is not None and part.stat().st_size < total:
            raise OSError(f"connection closed after {part.stat().st_size} of {total} bytes")


__all__ = ["RAW_DIR_ENV", "Source", "check_file", "checksum_of", "fetch", "raw_dir_from"]
