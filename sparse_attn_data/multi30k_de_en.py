"""Multi30k German-English (Elliott et al. 2016), task 1: image-caption translation.

The published raw files, prepared as the dataset's own ``task1-tokenize.sh`` made its
``tok/*.lc.norm.tok.*`` files (the Moses scripts of December 2017), then joint BPE with one
joined dictionary; four test sets, ``test`` to ``test3``. docs/corpora.md, "Multi30k".

    python -m sparse_attn_data.multi30k_de_en [--bpe-merges 10000] [--raw-dir DIR]
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

from pathlib import Path
from typing import Dict

from .archive import extract_lines
from .download import Source
from .recipe import Parts, Recipe, main

URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"
#: The dataset's names of the splits: fairseq's split name -> file stem.
FILES = {"train": "train", "valid": "val", "test": "test_2016_flickr",
         "test1": "test_2017_flickr", "test2": "test_2017_mscoco", "test3": "test_2018_flickr"}
#: SHA-256 of the published files (multi30k/dataset a3d2e0d).
SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
}


def read(archives: Dict[str, Path], folder: Path) -> Parts:
    lines = {}
    for split, stem in FILES.items():
        for lang in ("de", "en"):
            lines.update(extract_lines(archives[f"{stem}.{lang}.gz"],
                                       {f"{stem}.{lang}": f"{split}.{lang}"}, folder))
    return {split: (lines[f"{split}.de"], lines[f"{split}.en"]) for split in FILES}


RECIPE = Recipe(
    name="multi30k_de_en", title="Multi30k German-English", src="de", tgt="en",
    sources=tuple(Source(URL + name, name, checksum=f"sha256:{digest}")
                  for name, digest in SHA256.items()),
    read=read, parts=tuple(FILES), test_names=tuple(list(FILES.values())[2:]),
    merges=10000, joined_dictionary=True, moses="2017", lowercase=True,
    lowercase_first=True, normalize_punctuation=True, remove_non_printing=False, clean=None,
    expected={"train": 29000, "valid": 1014, "test": 1000, "test1": 1000, "test2": 461,
              "test3": 1071})

if __name__ == "__main__":
    main(RECIPE)
