"""WMT14 English-German, the standard setup of Vaswani et al. (2017) as fairseq prepares it,
joint BPE with 40k merges and one joined dictionary; with ``--valid
newstest2012+newstest2013 --bpe-merges 32000 --max-train-subwords 256`` the recipe of Xu
et al. (2021, section 4.1). docs/corpora.md, "WMT14 English-German".

    python -m sparse_attn_data.wmt14_en_de [--bpe-merges 40000] [--valid SETS] [--workers 8]
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

from pathlib import Path
from typing import Dict

from .archive import extract_lines
from .download import Source
from .recipe import Option, Parts, Recipe, main
from .text import segments

STATMT = "http://www.statmt.org/"
#: archive -> the training corpus it holds (member prefix, before ".de" / ".en").
TRAINING = {"training-parallel-europarl-v7.tgz": "training/europarl-v7.de-en",
            "training-parallel-commoncrawl.tgz": "commoncrawl.de-en",
            "training-parallel-nc-v9.tgz": "training/news-commentary-v9.de-en"}
DEV, TEST = "dev.tgz", "test-full.tgz"
#: ``--valid``: newstest sets of ``dev.tgz`` (plain text, one sentence a line), "+" between.
VALID = Option("valid", ("newstest2013", "newstest2012+newstest2013"),
               "validation sets of dev.tgz, concatenated",
               expected={"newstest2012+newstest2013": {"valid": 3003 + 3000}})


def read(archives: Dict[str, Path], folder: Path, valid: str = VALID.choices[0]) -> Parts:
    train = ([], [])
    for k, (archive, prefix) in enumerate(TRAINING.items()):
        lines = extract_lines(archives[archive], {f"{prefix}.en": f"{k}.en",
                                                  f"{prefix}.de": f"{k}.de"}, folder)
        train[0].extend(lines[f"{k}.en"])
        train[1].extend(lines[f"{k}.de"])
    sets = valid.split("+")
    dev = extract_lines(archives[DEV], {f"dev/{name}.{lang}": f"{name}.{lang}"
                                        for name in sets for lang in ("en", "de")}, folder)
    test = extract_lines(archives[TEST], {
        "test-full/newstest2014-deen-src.en.sgm": "test.en",
        "test-full/newstest2014-deen-ref.de.sgm": "test.de"}, folder)
    joined = {lang: [line for name in sets for line in dev[f"{name}.{lang}"]]
              for lang in ("en", "de")}
    return {"train": train, "valid": (joined["en"], joined["de"]),
            "test": (segments(test["test.en"]), segments(test["test.de"]))}


RECIPE = Recipe(
    name="wmt14_en_de", title="WMT14 English-German", src="en", tgt="de",
    # sizes and SHA-256 of the training archives as TensorFlow Datasets records them
    # (tensorflow_datasets/url_checksums/wmt14_translate.txt)
    sources=(Source(STATMT + "wmt13/training-parallel-europarl-v7.tgz",
                    "training-parallel-europarl-v7.tgz", 657632379,
                    "sha256:0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7"),
             Source(STATMT + "wmt13/training-parallel-commoncrawl.tgz",
                    "training-parallel-commoncrawl.tgz", 918311367,
                    "sha256:c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5"),
             Source(STATMT + "wmt14/training-parallel-nc-v9.tgz", "training-parallel-nc-v9.tgz",
                    80418416,
                    "sha256:cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485"),
             Source(STATMT + "wmt14/dev.tgz", DEV),
             # sacrebleu's record of the test set
             Source(STATMT + "wmt14/test-full.tgz", TEST,
                    checksum="md5:a8cd784e006feb32ac6f3d9ec7eb389a")),
    read=read, merges=40000, joined_dictionary=True, normalize_punctuation=True,
    aggressive_dashes=True, clean=(1, 250, 1.5), expected={"valid": 3000, "test": 3003},
    options=(VALID,))

if __name__ == "__main__":
    main(RECIPE)
