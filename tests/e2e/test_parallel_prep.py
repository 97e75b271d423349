"""``python -m sparse_attn_data.parallel``: the user's own PREFIX.SRC / PREFIX.TGT files through
the recipes' pipeline, as a user runs it (a new process): the splits binarised with the
chosen preprocessing, further test sets as test1.., settings recorded; bad input refused
in one line with nothing written; the real KFTT 30k sample."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparse_attn_data.download import checksum_of
from sparse_attn_plugin.reading import read_lines

from helpers import REALDATA, REPO, needs_realdata
from helpers.corpora import load_split

PROG = "python -m sparse_attn_data.parallel"
KFTT = REALDATA / "kftt_cicada30k"

TRAIN = [("Das ist ein Haus.", "This is a House."),
         ("Der Hund bellt laut!", "The Dog barks loudly!"),
         ("Ein gut-bekanntes Buch.", "A well-known Book."),
         ("Ja", "Yes , this is a very long answer indeed"),  # ratio > 2: cleaned away
         ("Die Katze schläft.", "The cat sleeps.")]
VALID = [("Das Haus.", "The House."), ("Der Hund.", "The Dog.")]
TESTS = {"news": [("Ein Buch.", "A Book.")],
         "talks": [("Die Katze.", "The cat."), ("Ja.", "Yes."), ("Nein.", "No.")]}


def write(prefix: Path, pairs, src="de", tgt="en"):
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for k, lang in enumerate((src, tgt)):
        Path(f"{prefix}.{lang}").write_text("".join(p[k] + "\n" for p in pairs),
                                            encoding="utf-8")
    return prefix


@pytest.fixture
def corpus(tmp_path):
    text = tmp_path / "text"
    return {"train": write(text / "train", TRAIN), "valid": write(text / "valid", VALID),
            **{name: write(text / name, pairs) for name, pairs in TESTS.items()}}


def prepare(tmp_path, *argv, src="de", tgt="en"):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-m", "sparse_attn_data.parallel", "--src", src, "--tgt", tgt,
         "--dest-dir", tmp_path / "bin", "--work-dir", tmp_path / "work", *map(str, argv)],
        cwd=REPO, env=env, capture_output=True, text=True)


def splits(corpus, *tests):
    return ["--train", corpus["train"], "--valid", corpus["valid"],
            *[a for name in tests for a in ("--test", corpus[name])]]


def test_prepares_every_split_and_records_the_settings(tmp_path, corpus):
    proc = prepare(tmp_path, *splits(corpus, "news", "talks"), "--name", "mine",
                   "--bpe-merges", "20", "--keep-intermediates")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dest = tmp_path / "bin" / "mine"
    counts = {"train": 5, "valid": 2, "test": 1, "test1": 3}
    for split, n in counts.items():
        src, tgt = load_split(dest, split, "de", "en")
        assert len(src) == len(tgt) == n
    prepared = json.loads((dest / "PREPARED.json").read_text())
    assert prepared["sentences"] == counts
    assert prepared["test_sets"] == {"test": "news", "test1": "talks"}
    settings = prepared["settings"]
    assert settings["test"] == [str(corpus["news"]), str(corpus["talks"])]
    assert (settings["tokenize"], settings["lowercase"], settings["clean"]) == (True, False,
                                                                                None)
    tok = tmp_path / "work" / "mine" / "tok"
    assert (tok / "train.en").read_text().splitlines()[0] == "This is a House ."
    assert (tok / "test1.en").read_text().splitlines() == ["The cat .", "Yes .", "No ."]
    assert "well-known" in (tok / "train.en").read_text()  # no --aggressive-dashes

    # a re-run is a no-op; other preprocessing, or other files, is refused
    again = prepare(tmp_path, *splits(corpus, "news", "talks"), "--name", "mine",
                    "--bpe-merges", "20")
    assert again.returncode == 0 and "prepared already" in again.stdout
    other = prepare(tmp_path, *splits(corpus, "news"), "--name", "mine", "--bpe-merges", "20",
                    "--lowercase")
    assert other.returncode == 1
    assert "lowercase: False there, True now" in other.stderr
    assert f"test: {[str(corpus['news']), str(corpus['talks'])]!r} there" in other.stderr
    assert prepared["inputs"][f"{corpus['valid']}.en"] == checksum_of(
        Path(f"{corpus['valid']}.en"))
    assert len(prepared["inputs"]) == 8
    Path(f"{corpus['valid']}.en").write_text("The house.\nThe dog.\n", encoding="utf-8")
    edited = prepare(tmp_path, *splits(corpus, "news", "talks"), "--name", "mine",
                     "--bpe-merges", "20")
    assert edited.returncode == 1
    assert f"prepared from other contents of {corpus['valid']}.en;" in edited.stderr


def test_intermediates_of_other_settings_are_not_reused(tmp_path, corpus):
    """A folder deleted and prepared again under its name with other settings: the kept
    tok/ files of the first run must not stand in for the second's."""
    argv = [*splits(corpus, "news"), "--name", "mine", "--subwords", "none",
            "--keep-intermediates"]
    assert prepare(tmp_path, *argv).returncode == 0
    tok = tmp_path / "work" / "mine" / "tok"
    assert read_lines(tok / "valid.en") == ["The House .", "The Dog ."]
    shutil.rmtree(tmp_path / "bin" / "mine")
    again = prepare(tmp_path, *argv, "--lowercase")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "removing the intermediates" in again.stdout and "done already" not in again.stdout
    assert read_lines(tok / "valid.en") == ["the house .", "the dog ."]
    src, _ = load_split(tmp_path / "bin" / "mine", "valid", "de", "en")
    assert src == ["das haus .", "der hund ."]


def test_tokenise_lowercase_and_clean_change_the_text(tmp_path, corpus):
    proc = prepare(tmp_path, *splits(corpus, "news"), "--name", "lc", "--lowercase",
                   "--aggressive-dashes", "--clean", "1", "80", "2", "--subwords", "none",
                   "--keep-intermediates")
    assert proc.returncode == 0, proc.stderr[-2000:]
    tok = tmp_path / "work" / "lc" / "tok"
    assert (tok / "train.en").read_text().splitlines() == [
        "this is a house .", "the dog barks loudly !", "a well @-@ known book .",
        "the cat sleeps ."]  # the pair of 1 and 9 words cleaned away; valid and test kept
    assert (tok / "valid.de").read_text().splitlines() == ["das haus .", "der hund ."]
    assert json.loads((tmp_path / "bin" / "lc" / "PREPARED.json").read_text())["settings"][
        "clean"] == [1, 80, 2.0]
    raw = prepare(tmp_path, *splits(corpus, "news"), "--name", "raw", "--no-tokenize",
                  "--subwords", "none", "--keep-intermediates")
    assert raw.returncode == 0, raw.stderr[-2000:]
    assert (tmp_path / "work" / "raw" / "tok" / "train.en").read_text().splitlines() == [
        en for _, en in TRAIN]  # as given


def bad(tmp_path, corpus, case):
    """The command line and the file its error line must name, for each bad input."""
    if case == "missing file":
        os.remove(f"{corpus['valid']}.en")
        return splits(corpus, "news"), f"{corpus['valid']}.en: no such file"
    if case == "line counts":
        Path(f"{corpus['talks']}.de").write_text("Eins.\nZwei.\n", encoding="utf-8")
        return splits(corpus, "news", "talks"), (f"{corpus['talks']}.de has 2 lines but "
                                                 f"{corpus['talks']}.en has 3")
    if case == "empty file":
        Path(f"{corpus['news']}.en").write_text("", encoding="utf-8")
        return splits(corpus, "news"), f"{corpus['news']}.en: file is empty"
    if case == "not UTF-8":
        Path(f"{corpus['train']}.de").write_bytes("Schön.\n".encode("latin-1"))
        return splits(corpus, "news"), f"{corpus['train']}.de: line 1 is not UTF-8"
    if case == "same languages":
        return [*splits(corpus, "news"), "--src", "en", "--tgt", "en"], \
            "--src and --tgt are both 'en'"
    if case == "no test":
        return ["--train", corpus["train"], "--valid", corpus["valid"]], \
            "the following arguments are required: --test"
    if case == "clean limits":
        return [*splits(corpus, "news"), "--clean", "5", "1", "1.5"], \
            "--clean 5 1 1.5: MIN and MAX must be whole numbers"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing file", "line counts", "empty file", "not UTF-8",
                                  "same languages", "no test", "clean limits"])
def test_bad_input_is_refused_in_one_line_with_nothing_written(tmp_path, corpus, case):
    argv, message = bad(tmp_path, corpus, case)
    proc = prepare(tmp_path, *argv, "--name", "mine")
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: error: "), proc.stderr[-2000:]
    assert message in lines[0]
    assert not (tmp_path / "bin").exists() and not (tmp_path / "work").exists()


def test_offline_flags_are_not_offered(tmp_path, corpus):
    proc = prepare(tmp_path, *splits(corpus, "news"), "--name", "mine", "--raw-dir", tmp_path)
    assert proc.returncode == 1 and "unrecognized arguments: --raw-dir" in proc.stderr


@needs_realdata
@pytest.mark.slow
def test_the_kftt_30k_sample(tmp_path):
    """docs/corpora.md's KFTT 30k example (8000 merges there, 500 here): the sample as released."""
    prefixes = ["--train", KFTT / "train", "--valid", KFTT / "dev", "--test", KFTT / "tune"]
    started = time.time()
    proc = prepare(tmp_path, *prefixes, "--no-tokenize", "--name", "kftt30k",
                   "--bpe-merges", "500", "--keep-intermediates", src="ja", tgt="en")
    seconds = time.time() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    dest = tmp_path / "bin" / "kftt30k"
    counts = {"train": 30000, "valid": 1166, "test": 1235}
    assert json.loads((dest / "PREPARED.json").read_text())["sentences"] == counts
    src, tgt = load_split(dest, "valid", "ja", "en")
    assert len(src) == len(tgt) == 1166
    tok = tmp_path / "work" / "kftt30k" / "tok"
    for name, split in (("dev", "valid"), ("tune", "test")):
        for lang in ("ja", "en"):  # as released: tokenised, cased
            assert read_lines(tok / f"{split}.{lang}") == read_lines(KFTT / f"{name}.{lang}")
    print(f"KFTT 30k prepared in {seconds:.0f} s")


@needs_realdata
def test_fertility_and_sink_on_a_kftt_slice(tmp_path):
    for name, lines in (("train", 2000), ("dev", 200), ("tune", 200)):
        for lang in ("ja", "en"):
            with open(KFTT / f"{name}.{lang}", encoding="utf-8") as f:
                head = [next(f) for _ in range(lines)]
            (tmp_path / f"{name}.{lang}").write_text("".join(head), encoding="utf-8")
    proc = prepare(tmp_path, "--train", tmp_path / "train", "--valid", tmp_path / "dev",
                   "--test", tmp_path / "tune", "--no-tokenize", "--name", "slice",
                   "--bpe-merges", "1000", "--fertility", "--sink", src="ja", tgt="en")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dest = tmp_path / "bin" / "slice"
    src, tgt = load_split(dest, "valid", "ja", "en")
    ferts = (dest / "valid.ja-en.fert").read_text().splitlines()
    assert len(src) == len(ferts) == 200
    for line, target, fert in zip(src, tgt, ferts):
        counts = [int(c) for c in fert.split()]
        assert line.endswith(" <SINK>") and len(counts) == len(line.split())
        assert sum(counts) == len(target.split())
    assert (dest / "guided.tsv").stat().st_size > 0
