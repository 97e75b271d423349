"""Tests for the synthetic corpus generator (sparse_attn_data/synthetic.py)."""
import errno
import itertools
import os
import re
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from sparse_attn_data import synthetic
from sparse_attn_data.synthetic import binarize, build_lexicon, main, write_corpus
from sparse_attn_plugin import files

SIZES = {"train": 300, "valid": 50, "test": 50}
FILES = [f"{s}.{x}" for s in synthetic.SPLITS for x in synthetic.SUFFIXES]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("synth") / "raw")
    write_corpus(out, **SIZES)
    return out


def read_split(directory, split):
    """(src words, tgt words, links, fertilities) per line of one split."""
    def lines(suffix):
        with open(os.path.join(directory, f"{split}.{suffix}"), encoding="utf-8") as f:
            return [line.rstrip("\n").split(" ") if line.strip() else []
                    for line in f]
    links = [[tuple(map(int, link.split("-"))) for link in line]
             for line in lines("align")]
    ferts = [list(map(int, line)) for line in lines("fert")]
    return list(zip(lines("src"), lines("tgt"), links, ferts, strict=True))


def contents(directory):
    return {p.name: p.read_bytes() for p in sorted(Path(directory).iterdir())}


def mtimes(directory):
    return {p.name: p.stat().st_mtime_ns for p in Path(directory).iterdir()}


def translations(directory):
    """Source word -> tuple of aligned target words, as seen in the train split."""
    seen = defaultdict(set)
    for src, tgt, links, _ in read_split(directory, "train"):
        for i, word in enumerate(src):
            seen[word].add(tuple(tgt[j] for k, j in links if k == i))
    assert all(len(t) == 1 for t in seen.values()), "a word has two translations"
    return {word: t.pop() for word, t in seen.items()}


def test_deterministic(corpus, tmp_path):
    write_corpus(str(tmp_path), **SIZES)
    assert contents(str(tmp_path)) == contents(corpus)
    assert sorted(os.listdir(corpus)) == sorted(FILES + ["MANIFEST.json"])


def test_lexicon_independent_of_corpus_sizes(corpus, tmp_path):
    write_corpus(str(tmp_path), train=100, valid=20, test=20)
    assert read_split(str(tmp_path), "train") == read_split(corpus, "train")[:100]
    small, large = translations(str(tmp_path)), translations(corpus)
    shared = small.keys() & large.keys()
    assert len(shared) > 50
    assert all(small[w] == large[w] for w in shared)
    lex = build_lexicon()
    for k, word in enumerate(lex.src_words):
        if word in large:
            assert large[word] == tuple(lex.tgt_words[t] for t in lex.translation[k])


def test_lines_are_consistent(corpus):
    for split, n in SIZES.items():
        rows = read_split(corpus, split)
        assert len(rows) == n
        for src, tgt, links, fert in rows:
            assert 3 <= len(src) <= 40
            assert tgt, "empty target line"
            assert len(fert) == len(src)
            assert sum(fert) == len(tgt)
            assert links == sorted(links)
            assert sorted(j for _, j in links) == list(range(len(tgt)))
            per_source = Counter(i for i, _ in links)
            assert [per_source[i] for i in range(len(src))] == fert


def test_target_follows_documented_rules(corpus):
    lex = build_lexicon()
    index = {w: k for k, w in enumerate(lex.src_words)}
    assert not set(lex.src_words) & set(lex.tgt_words)
    assert all(re.fullmatch(r"([bdgklprst][aeiou]){2,3}", w) for w in lex.src_words)
    assert all(re.fullmatch(r"([fhjmnvwyz][aeiou]){2,3}", w) for w in lex.tgt_words)
    for split in SIZES:
        for src, tgt, links, fert in read_split(corpus, split):
            ids = [index[w] for w in src]
            assert fert == [len(lex.translation[k]) for k in ids]
            order, i = [], 0
            while i < len(ids):
                if (i + 1 < len(ids) and lex.word_class[ids[i]] == "A"
                        and lex.word_class[ids[i + 1]] == "N"):
                    order += [i + 1, i]
                    i += 2
                else:
                    order.append(i)
                    i += 1
            expected = [(i, t) for i in order for t in lex.translation[ids[i]]]
            assert tgt == [lex.tgt_words[t] for _, t in expected]
            assert links == sorted((i, j) for j, (i, _) in enumerate(expected))


def test_fertility_distribution_and_reordering(corpus):
    lex = build_lexicon()
    assert Counter(lex.fertility) == {0: 30, 1: 180, 2: 60, 3: 30}
    ferts = Counter(f for *_, fert in read_split(corpus, "train") for f in fert)
    total = sum(ferts.values())
    bounds = [(0.04, 0.25), (0.45, 0.75), (0.1, 0.3), (0.03, 0.2)]
    for k, (low, high) in enumerate(bounds):
        assert low <= ferts[k] / total <= high, (k, ferts[k] / total)
    rows = read_split(corpus, "train")
    assert 12 <= sum(len(src) for src, *_ in rows) / len(rows) <= 22
    visible_swaps = [(i, j) for _, _, links, _ in rows for i, j in links
                     if any(k == i + 1 and m < j for k, m in links)]
    assert visible_swaps, "no reordered pair in the corpus"


def test_rerun_is_a_no_op(corpus, tmp_path):
    out = str(tmp_path)
    shutil.copytree(corpus, out, dirs_exist_ok=True)
    stamps = mtimes(out)
    manifest = write_corpus(out, **SIZES)
    assert mtimes(out) == stamps
    assert manifest["splits"]["train"]["pairs"] == 300
    write_corpus(out, seed=2, **SIZES)  # other parameters: regenerated
    assert contents(out)["train.src"] != contents(corpus)["train.src"]


def _fail_on_replace(monkeypatch):
    calls, real = itertools.count(), os.replace

    def replace(src, dst):
        if next(calls) == 5:  # train's four files and valid.src are complete
            raise OSError(errno.EIO, "simulated failure")
        return real(src, dst)
    monkeypatch.setattr(files.os, "replace", replace)


def _fail_mid_file(monkeypatch):
    calls, real = itertools.count(), open

    def opener(*args, **kwargs):
        f = real(*args, **kwargs)
        write = f.write

        def failing_write(text):
            if next(calls) == 4 * 300 + 25:  # in the middle of valid.src
                raise OSError(errno.ENOSPC, "No space left on device")
            return write(text)
        f.write = failing_write
        return f
    monkeypatch.setattr(files, "open", opener, raising=False)  # the writer's open()


@pytest.mark.parametrize("fail, complete", [(_fail_on_replace, 5), (_fail_mid_file, 4)])
def test_failure_leaves_no_partial_files(corpus, tmp_path, monkeypatch, fail, complete):
    out = str(tmp_path / "raw")
    fail(monkeypatch)
    with pytest.raises(OSError):
        write_corpus(out, **SIZES)
    monkeypatch.undo()
    left = contents(out)
    reference = contents(corpus)
    assert sorted(left) == sorted(FILES[:complete])  # no temporary file, no manifest
    assert all(left[name] == reference[name] for name in left)
    write_corpus(out, **SIZES)
    assert contents(out) == reference


def test_failed_regeneration_invalidates_manifest(corpus, tmp_path, monkeypatch):
    out = str(tmp_path)
    shutil.copytree(corpus, out, dirs_exist_ok=True)
    _fail_on_replace(monkeypatch)
    with pytest.raises(OSError):
        write_corpus(out, seed=2, **SIZES)
    monkeypatch.undo()
    assert "MANIFEST.json" not in os.listdir(out)
    write_corpus(out, **SIZES)  # must regenerate, not trust the mixed files
    assert contents(out) == contents(corpus)


def test_binarize(corpus, tmp_path):
    dest = str(tmp_path / "bin")
    assert binarize(corpus, dest) == dest
    names = set(os.listdir(dest))
    binarised, raw = contents(dest), contents(corpus)
    for split in synthetic.SPLITS:
        for lang in ("src", "tgt"):
            assert {f"{split}.src-tgt.{lang}.{x}" for x in ("bin", "idx")} <= names
        assert binarised[f"{split}.align"] == raw[f"{split}.align"]
        # gold fertilities where --task sparse_translation reads them
        assert binarised[f"{split}.src-tgt.fert"] == raw[f"{split}.fert"]
    assert {"dict.src.txt", "dict.tgt.txt", "MANIFEST.json"} <= names
    assert os.listdir(tmp_path) == ["bin"]  # no temporary directory left

    from fairseq.data import Dictionary, data_utils
    vocab = Dictionary.load(os.path.join(dest, "dict.tgt.txt"))
    data = data_utils.load_indexed_dataset(os.path.join(dest, "train.src-tgt.tgt"),
                                           vocab)
    assert len(data) == 300
    first_target = read_split(corpus, "train")[0][1]
    assert vocab.string(data[0]).split() == first_target

    stamps = mtimes(dest)
    binarize(corpus, dest)  # same manifest: skipped
    assert mtimes(dest) == stamps


def test_binarize_failure_is_clear_and_leaves_nothing(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    with pytest.raises(RuntimeError) as info:
        binarize(str(raw), str(tmp_path / "bin"))
    message = str(info.value)
    assert "\n" not in message
    assert "fairseq-preprocess failed" in message and "train.src" in message
    assert os.listdir(tmp_path) == ["raw"]


def test_cli_summary(tmp_path, capsys):
    main(["--out", str(tmp_path), "--train", "300", "--valid", "50", "--test", "50"])
    out = capsys.readouterr().out
    assert "train 300 / valid 50 / test 50 pairs" in out and "vocab src 300" in out


@pytest.mark.parametrize("args, message", [
    (["--train", "0"], "--train must be a positive number"),
    (["--valid", "-3"], "--valid must be a positive number"),
    (["--min-len", "10", "--max-len", "5"], "--min-len (10) is larger than --max-len"),
    (["--min-len", "0"], "--min-len must be at least 1"),
    (["--max-len", "5000"], "--max-len must be at most 1000"),
    (["--src-vocab", "5"], "--src-vocab must be between 10 and 10000"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--train", "many"], "invalid int value"),
])
def test_cli_bad_arguments(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as info:
        main(["--out", str(tmp_path / "raw")] + args)
    assert info.value.code == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0]
    assert not (tmp_path / "raw").exists()
