"""Multi30k De-En on the real files (``../shared/realdata/multi30k``): the recipe offline
makes the dataset's own tokenised files and binarises them with its four test sets, and
``sparse-attn-compare --smoke`` runs end to end on a slice of the corpus, prepared with
``python -m sparse_attn_data.parallel``: a tiny 1.5-entmax model trains 200 updates
with falling validation loss and translates with BLEU above zero (a smoke run: a check
that the pipeline works on real language, not a result; the other rows' wiring is
test_compare.py's on the synthetic corpus)."""

import json
import os
import subprocess
import sys

import pytest

from sparse_attn_plugin.files import write_lines
from sparse_attn_plugin.reading import read_lines

from helpers import REALDATA, REPO, needs_realdata
from helpers.corpora import assert_same_lines, load_split, read_gz

MULTI30K = REALDATA / "multi30k"
pytestmark = [needs_realdata, pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.slow]


def run(*argv):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-m", *map(str, argv)], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_the_recipe_makes_the_datasets_tokenised_files_and_binarises_them(tmp_path):
    # 2,000 merges instead of the recipe's 10,000: the text and the splits are the subject.
    run("sparse_attn_data.multi30k_de_en", "--raw-dir", MULTI30K / "raw", "--dest-dir",
        tmp_path / "bin", "--work-dir", tmp_path / "work", "--keep-intermediates",
        "--bpe-merges", "2000")
    tok, dest = tmp_path / "work" / "multi30k_de_en" / "tok", tmp_path / "bin" / "multi30k_de_en"
    prepared = json.loads((dest / "PREPARED.json").read_text())
    assert prepared["sentences"] == prepared["expected"] == {
        "train": 29000, "valid": 1014, "test": 1000, "test1": 1000, "test2": 461, "test3": 1071}
    assert prepared["test_sets"] == {"test": "test_2016_flickr", "test1": "test_2017_flickr",
                                     "test2": "test_2017_mscoco", "test3": "test_2018_flickr"}
    names = {**{"train": "train", "valid": "val"}, **prepared["test_sets"]}
    for split, name in names.items():
        for lang in ("de", "en"):
            if name != "test_2018_flickr":  # the dataset publishes no tokenised 2018 set
                assert_same_lines(read_lines(tok / f"{split}.{lang}"), read_lines(
                    MULTI30K / "tok" / f"{name}.lc.norm.tok.{lang}"), f"{name}.{lang}")
        src, tgt = load_split(dest, split, "de", "en")
        assert len(src) == len(tgt) == prepared["sentences"][split]
    assert (dest / "bpe.codes").exists() and (dest / "dict.de.txt").read_text() == \
        (dest / "dict.en.txt").read_text()  # one joined dictionary


def test_compare_smoke_run_on_a_slice_of_multi30k(tmp_path):
    """The slice: 3,000 training pairs, 200 validation pairs, 200 of test_2016_flickr and
    100 of test_2017_mscoco, prepared as the recipe does (Moses 2017, lowercased)."""
    text = tmp_path / "text"
    for name, stem, size in (("train", "train", 3000), ("valid", "val", 200),
                             ("flickr2016", "test_2016_flickr", 200),
                             ("mscoco2017", "test_2017_mscoco", 100)):
        for lang in ("de", "en"):
            lines = read_gz(MULTI30K / "raw" / f"{stem}.{lang}.gz")[:size]
            write_lines(text / f"{name}.{lang}", lines)
    run("sparse_attn_data.parallel", "--src", "de", "--tgt", "en", "--train", text / "train",
        "--valid", text / "valid", "--test", text / "flickr2016", "--test", text / "mscoco2017",
        "--lowercase", "--normalize-punctuation", "--moses", "2017", "--joined-dictionary",
        "--bpe-merges", "2000", "--name", "slice", "--dest-dir", tmp_path / "bin",
        "--work-dir", tmp_path / "work")
    out = tmp_path / "out"
    proc = run("sparse_attn_experiments.compare", "--data", tmp_path / "bin" / "slice",
               "--model", "tiny", "--rows", "entmax15", "--smoke", "--max-updates", "200",
               "--validate-every", "50", "--out", out, "--work-dir", tmp_path / "compare")
    assert "[compare] done" in proc.stdout
    report = (out / "README.md").read_text()
    assert "SMOKE RUN" in report and "| BLEU flickr2016 | BLEU mscoco2017 |" in report
    assert "How to read it" in report and "made-up language pair" not in report
    rows = json.loads((out / "comparison.json").read_text())["rows"]
    assert [r["attention"] for r in rows] == ["entmax15"]
    losses = [loss for _, loss in rows[0]["validation_curve"]]
    assert len(losses) == 4 and losses[0] > losses[1] > losses[2] > losses[3]
    assert rows[0]["updates"] == 200 and rows[0]["bleu"]["test"] > 0
    assert rows[0]["bleu"]["test1"] > 0
    assert rows[0]["zero_fraction"]["decoder_cross"] > 0  # 1.5-entmax: exact zeros

