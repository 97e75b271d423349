"""Binarising text splits for fairseq with ``fairseq-preprocess``."""

import subprocess
import sys
from pathlib import Path
from typing import Sequence

from .steps import PrepError

SPLIT_FLAGS = {"train": "--trainpref", "valid": "--validpref", "test": "--testpref"}


def fairseq_preprocess(text_dir: Path, src: str, tgt: str, destdir: Path,
                       splits: Sequence[str] = tuple(SPLIT_FLAGS), joined: bool = False,
                       workers: int = 1) -> None:
    """Binarise ``text_dir/{split}.{src|tgt}`` into ``destdir`` (dictionaries from the
    training split; one dictionary for both languages with ``joined``). Further test
    splits ``test1``, ``test2``, ... (in that order, after ``test``) go to fairseq's
    ``--testpref test,test1,...``, which names them so. Raises PrepError with fairseq's
    last error line."""
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src,
           "--target-lang", tgt, "--destdir", str(destdir), "--workers", str(workers)]
    prefixes = {}
    for split in splits:
        flag = SPLIT_FLAGS["test" if split.startswith("test") else split]
        prefixes.setdefault(flag, []).append(str(Path(text_dir) / split))
    for flag, paths in prefixes.items():
        cmd += [flag, ",".join(paths)]
    if joined:
        cmd.append("--joined-dictionary")
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        raise PrepError(f"fairseq-preprocess failed on {text_dir}: {lines[-1]}")
