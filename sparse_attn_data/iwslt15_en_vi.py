"""IWSLT15 English-Vietnamese (TED talks), the Stanford NMT group's preprocessed release
(Luong & Manning 2015), used as it is: Moses-tokenised with its XML escapes, in its
original case, word-level (``--subwords none`` by default); tst2012 validates, tst2013 tests.

    python -m sparse_attn_data.iwslt15_en_vi [--subwords subword_nmt --bpe-merges 8000]
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

from pathlib import Path
from typing import Dict

from sparse_attn_plugin.reading import read_lines

from .download import Source
from .recipe import Parts, Recipe, main

URL = "https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi/"
FILES = {"train": "train", "valid": "tst2012", "test": "tst2013"}


def read(archives: Dict[str, Path], folder: Path) -> Parts:
    return {split: tuple(read_lines(archives[f"{name}.{lang}"]) for lang in ("en", "vi"))
            for split, name in FILES.items()}


RECIPE = Recipe(
    name="iwslt15_en_vi", title="IWSLT15 English-Vietnamese", src="en", tgt="vi",
    sources=tuple(Source(URL + f"{name}.{lang}", f"{name}.{lang}")
                  for name in FILES.values() for lang in ("en", "vi")),
    read=read, merges=8000, subwords="none", tokenize=False, clean=None,
    expected={"train": 133317, "valid": 1553, "test": 1268})

if __name__ == "__main__":
    main(RECIPE)
