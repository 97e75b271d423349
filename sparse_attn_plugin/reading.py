"""Text files read line by line as fairseq, sacreBLEU and Moses read them: cut at
``\n`` only, UTF-8, a byte-order mark dropped; a file that cannot be read is one line
naming it (:class:`InputError`)."""

from pathlib import Path
from typing import List

from .errors import SparseAttnError


class InputError(SparseAttnError, ValueError):
    """A text file that cannot be read; the message is one line naming it."""


def split_lines(text: str) -> List[str]:
    r"""``text`` cut at its newlines (``\n``, or ``\r\n``) only, as Moses' scripts, fairseq
    and sacreBLEU read a file: ``str.splitlines`` would also cut at U+2028, U+0085, form
    feeds and ``\x1c``-``\x1e``, which real corpora hold inside sentences, and misalign
    every line after them."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_lines(path, nonempty: bool = False, blank: bool = False) -> List[str]:
    """The lines of a UTF-8 text file without their newlines (:func:`split_lines`; a
    leading byte-order mark is not text and is dropped: Stanford's IWSLT15 tst2013 files
    start with one). :class:`InputError` naming the file when it is missing, unreadable
    or not UTF-8 (with the line), or, with ``nonempty``, holds no line or (unless
    ``blank``: translations may be empty) only blank ones."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    return decode_lines(data, str(path), nonempty, blank)


def decode_lines(data: bytes, name: str, nonempty: bool = False,
                 blank: bool = False) -> List[str]:
    """The lines of UTF-8 ``data`` read from ``name`` (a file, or ``<stdin>``) as
    :func:`read_lines` reads a file's; :class:`InputError` naming it and the line that is
    not UTF-8, or, with ``nonempty``, saying it holds no line or (unless ``blank``) only
    blank ones."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = err.object.count(b"\n", 0, err.start) + 1
        raise InputError(f"{name}: line {line} is not UTF-8 ({err.reason})") from None
    lines = split_lines(text)
    if nonempty and not lines:
        raise InputError(f"{name}: file is empty")
    if nonempty and not blank and not text.strip():
        raise InputError(f"{name}: holds only blank lines ({len(lines)})")
    return lines
