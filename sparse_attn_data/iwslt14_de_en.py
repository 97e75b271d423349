"""IWSLT14 German-English (TED talks), as fairseq's ``prepare-iwslt14.sh`` prepares it:
Moses-tokenised, cleaned (training only) and lowercased, every 23rd cleaned pair held out
for validation, joint BPE with 10k merges (14k in Zhao et al. 2019, 32k in Malaviya et
al. 2018); docs/corpora.md, "IWSLT14 German-English".

    python -m sparse_attn_data.iwslt14_de_en [--bpe-merges 10000] [--fertility] [--raw-dir DIR]
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

from pathlib import Path
from typing import Dict, List, Tuple

from sparse_attn_plugin.reading import read_lines

from .archive import extract
from .download import Source
from .recipe import Parts, Recipe, main
from .text import iwslt_train_text, segments

ARCHIVE = "de-en.tgz"
#: The test set's talks, in the order fairseq's recipe concatenates them.
TEST_SETS = ("IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012", "IWSLT14.TED.tst2010",
             "IWSLT14.TED.tst2011", "IWSLT14.TED.tst2012")
#: Every n-th cleaned training pair is held out for validation.
VALID_EVERY = 23


def read(archives: Dict[str, Path], folder: Path) -> Parts:
    wanted = {f"de-en/train.tags.de-en.{lang}": folder / f"train.{lang}" for lang in ("de", "en")}
    wanted.update({f"de-en/{name}.de-en.{lang}.xml": folder / f"{name}.de-en.{lang}.xml"
                   for name in TEST_SETS for lang in ("de", "en")})
    extract(archives[ARCHIVE], wanted)
    train = tuple(iwslt_train_text(read_lines(folder / f"train.{lang}")) for lang in ("de", "en"))
    return {"train": train, "test": read_test(folder)}


def read_test(folder: Path) -> Tuple[List[str], List[str]]:
    """The test set: the ``<seg>`` texts of the release's XML files
    (``IWSLT14.TED.dev2010.de-en.de.xml``, ...) in ``folder``, in :data:`TEST_SETS` order."""
    return tuple([line for name in TEST_SETS for line in segments(
        read_lines(Path(folder) / f"{name}.de-en.{lang}.xml"))] for lang in ("de", "en"))


def split(parts: Parts) -> Parts:
    """Validation: pairs 23, 46, ... of the cleaned training data; training: the rest."""
    pairs = list(zip(*parts["train"]))
    held = VALID_EVERY - 1
    return {"train": _sides([p for i, p in enumerate(pairs) if i % VALID_EVERY != held]),
            "valid": _sides(pairs[held::VALID_EVERY]), "test": parts["test"]}


def _sides(pairs):
    return [s for s, _ in pairs], [t for _, t in pairs]


RECIPE = Recipe(
    name="iwslt14_de_en", title="IWSLT14 German-English", src="de", tgt="en",
    sources=(Source("http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz", ARCHIVE),),
    read=read, parts=("train", "test"), merges=10000, lowercase=True, remove_non_printing=False,
    clean=(1, 175, 1.5),
    split=split, expected={"train": 160239, "valid": 7283, "test": 6750})

if __name__ == "__main__":
    main(RECIPE)
