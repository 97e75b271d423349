"""KFTT Japanese-English (Kyoto Free Translation Task, Neubig 2011), its tokenised release
(``kftt-data-1.0/data/tok``: the training data already length-cleaned, ``.cln``), used
as it is: ``kyoto-train.cln``, ``kyoto-dev`` (validation) and ``kyoto-test``. Joint BPE,
32k merges as in Malaviya et al. (2018).

    python -m sparse_attn_data.kftt_ja_en [--bpe-merges 32000] [--fertility]
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

from pathlib import Path
from typing import Dict

from .archive import extract_lines
from .download import Source
from .recipe import Parts, Recipe, main

ARCHIVE = "kftt-data-1.0.tar.gz"
FILES = {"train": "kyoto-train.cln", "valid": "kyoto-dev", "test": "kyoto-test"}


def read(archives: Dict[str, Path], folder: Path) -> Parts:
    lines = extract_lines(archives[ARCHIVE], {
        f"kftt-data-1.0/data/tok/{name}.{lang}": f"{split}.{lang}"
        for split, name in FILES.items() for lang in ("ja", "en")}, folder)
    return {split: (lines[f"{split}.ja"], lines[f"{split}.en"]) for split in FILES}


RECIPE = Recipe(
    name="kftt_ja_en", title="KFTT Japanese-English", src="ja", tgt="en",
    # the SHA-1 that daac-tools/vibrato's preparation script checks
    sources=(Source("http://www.phontron.com/kftt/download/kftt-data-1.0.tar.gz", ARCHIVE,
                    checksum="sha1:0e1f5a9dc993b7d74ca6a0521232d17ce94c8cb4"),),
    read=read, merges=32000, tokenize=False, clean=None,
    expected={"train": 329882, "valid": 1166, "test": 1160})

if __name__ == "__main__":
    main(RECIPE)
