"""Reading evaluation inputs: whole files checked up front, BPE removed as fairseq does."""

from pathlib import Path
from typing import List, Optional

from data_prep.steps import split_lines

from ..errors import SparseAttnError


class InputError(SparseAttnError, ValueError):
    """Bad evaluation input; the message is one line naming the file."""


def read_lines(path) -> List[str]:
    """The lines of a UTF-8 text file (without newlines; a leading byte-order mark
    dropped); one-line errors for a missing, unreadable, non-UTF-8 or empty file. Only
    newlines end a line, as fairseq and sacreBLEU read files: ``str.splitlines`` would also
    cut at U+2028, U+0085 or a form feed inside a sentence and misalign every line after
    it (:func:`data_prep.steps.split_lines`)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except UnicodeDecodeError as err:
        line = err.object.count(b"\n", 0, err.start) + 1
        raise InputError(f"{path}: line {line} is not UTF-8 ({err.reason})") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    if not text.strip():
        raise InputError(f"{path}: file is empty")
    return split_lines(text)


def remove_bpe(line: str, scheme: Optional[str]) -> str:
    """Undo subword segmentation like fairseq's ``--remove-bpe`` / ``--post-process``:
    ``subword_nmt`` (or ``@@ ``) joins ``@@ ``-continued pieces, ``sentencepiece``
    joins pieces and turns ``▁`` into spaces; ``None`` leaves the line as it is."""
    if scheme is None:
        return line
    if scheme in ("subword_nmt", "@@ "):
        return (line + " ").replace("@@ ", "").rstrip()
    if scheme == "sentencepiece":
        return line.replace(" ", "").replace("\u2581", " ").strip()
    raise InputError(f"unknown BPE scheme {scheme!r}; use subword_nmt or sentencepiece")
