"""Evaluation text: subword segmentation removed as fairseq removes it."""

from typing import Optional

from ..reading import InputError


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
