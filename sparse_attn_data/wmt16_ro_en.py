"""WMT16 Romanian-English with Sennrich et al. (2016)'s preprocessing (``wmt16-scripts``,
without their truecasing): the Romanian side normalised and its diacritics removed,
training pairs cleaned to 1-80 tokens with ratio 9, joint BPE with 32k merges as in
Malaviya et al. (2018). docs/corpora.md, "WMT16 Romanian-English".

    python -m sparse_attn_data.wmt16_ro_en [--bpe-merges 32000] [--fertility]
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

from pathlib import Path
from typing import Dict

from .archive import extract_lines
from .download import Source
from .recipe import Parts, Recipe, main
from .text import romanian, segments

EUROPARL, SETIMES = "training-parallel-ep-v8.tgz", "en-ro.txt.zip"
DEV, TEST = "dev-romanian-updated.tgz", "test.tgz"
WMT16 = "http://data.statmt.org/wmt16/translation-task/"


def read(archives: Dict[str, Path], folder: Path) -> Parts:
    europarl = extract_lines(archives[EUROPARL], {
        "training-parallel-ep-v8/europarl-v8.ro-en.ro": "ep.ro",
        "training-parallel-ep-v8/europarl-v8.ro-en.en": "ep.en"}, folder)
    setimes = extract_lines(archives[SETIMES], {"SETIMES*.en-ro.ro": "setimes.ro",
                                                "SETIMES*.en-ro.en": "setimes.en"}, folder)
    dev = extract_lines(archives[DEV], {"*newsdev2016-roen-src.ro.sgm": "valid.ro",
                                        "*newsdev2016-roen-ref.en.sgm": "valid.en"}, folder)
    test = extract_lines(archives[TEST], {"*newstest2016-roen-src.ro.sgm": "test.ro",
                                          "*newstest2016-roen-ref.en.sgm": "test.en"}, folder)
    return {"train": (europarl["ep.ro"] + setimes["setimes.ro"],
                      europarl["ep.en"] + setimes["setimes.en"]),
            "valid": (segments(dev["valid.ro"]), segments(dev["valid.en"])),
            "test": (segments(test["test.ro"]), segments(test["test.en"]))}


RECIPE = Recipe(
    name="wmt16_ro_en", title="WMT16 Romanian-English", src="ro", tgt="en",
    # size and SHA-256 of Europarl v8 as TensorFlow Datasets records them
    # (tensorflow_datasets/url_checksums/wmt16_translate.txt)
    sources=(Source(WMT16 + EUROPARL, EUROPARL, 225018324,
                    "sha256:8917bd3bef3bc894c8519ca1f8a4c7c330aad08a1263655a9d99ee13d532e3c7"),
             Source("https://opus.nlpl.eu/download.php?f=SETIMES/v2/moses/en-ro.txt.zip",
                    SETIMES),
             Source(WMT16 + DEV, DEV),
             # sacrebleu's record of the test set
             Source(WMT16 + TEST, TEST, checksum="md5:3d809cd0c2c86adb2c67034d15c4e446")),
    read=read, merges=32000, normalize_punctuation=True, remove_non_printing=False,
    aggressive_dashes=True, clean=(1, 80, 9.0),
    preprocess={"ro": romanian}, expected={"valid": 1999, "test": 1999})

if __name__ == "__main__":
    main(RECIPE)
