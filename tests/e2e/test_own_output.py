"""Scoring one's own output, every command as a user types it: a corpus prepared without
its intermediates gets its tokenised text back (``--keep-intermediates`` on the prepared
corpus), DROP's aligner trains on it, detokenised output is tokenised the way the corpus
was (``python -m sparse_attn_data.tokenize --like``) and scored against the tokenised
references. The tokeniser gives each recipe's own tokenised text, line for line, on the
fixture archives and on the real release files (fairseq's prepared IWSLT14 test set,
Multi30k's own tokenised files)."""

import json
import os
import subprocess
import sys

import pytest

from sparse_attn_data import (
    iwslt14_de_en,
    multi30k_de_en,
    parallel,
    recipe,
    wmt14_en_de,
    wmt16_ro_en,
)
from sparse_attn_plugin.files import write_lines
from sparse_attn_plugin.reading import read_lines

from helpers import BIN, REALDATA, REPO, archives, needs_realdata
from helpers.corpora import assert_same_lines, load_split, read_gz

TOKENIZE = "sparse_attn_data.tokenize"
FLAGS = ["--bpe-merges", "40", "--no-checksums"]


def run(argv, stdin=None):
    """``argv`` in a new process from the repository, as a user runs it."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([str(a) for a in argv], cwd=REPO, env=env, capture_output=True,
                          text=True, input=stdin)


def module(*argv, stdin=None):
    return run([sys.executable, "-m", *argv], stdin)


def ok(proc) -> str:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc.stdout


def one_error_line(proc, prog=f"python -m {TOKENIZE}") -> str:
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), proc.stderr
    return lines[0][len(f"{prog}: error: "):]


def prepare_here(module_, tmp_path, raw, *flags):
    """A recipe run in this process on fixture archives (the reference to compare with)."""
    return recipe.main(module_.RECIPE, ["--raw-dir", raw, "--dest-dir", tmp_path / "bin",
                                        "--work-dir", tmp_path / "work", *FLAGS, *flags])


def snapshot(folder):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())}


# -- the whole path ---------------------------------------------------------------------------
def test_scoring_own_detokenised_output_end_to_end(tmp_path):
    raw = tmp_path / "raw"
    archives.iwslt14_archive(raw)
    prep = [f"sparse_attn_data.{iwslt14_de_en.RECIPE.name}", "--raw-dir", raw, "--dest-dir",
            tmp_path / "bin", "--work-dir", tmp_path / "work", *FLAGS]
    ok(module(*prep))
    dest, work = tmp_path / "bin" / "iwslt14_de_en", tmp_path / "work" / "iwslt14_de_en"
    assert not (work / "tok").exists()  # the recipe deleted its tokenised text
    before = snapshot(dest)

    # the tokenised text back, for the prepared corpus; the corpus itself untouched
    out = ok(module(*prep, "--keep-intermediates"))
    assert "prepared already" in out and "kept in" in out
    assert snapshot(dest) == before
    reference = prepare_here(iwslt14_de_en, tmp_path / "reference", raw, "--keep-intermediates")
    again = tmp_path / "reference" / "work" / "iwslt14_de_en"
    for stage in ("raw", "tok", "subword"):
        for split in ("train", "valid", "test"):
            for lang in ("de", "en"):
                name = f"{stage}/{split}.{lang}"
                if (again / name).exists():
                    assert (work / name).read_text() == (again / name).read_text(), name
    assert (dest / "bpe.codes").read_text() == (reference / "bpe.codes").read_text()
    binarised = load_split(dest, "train", "de", "en")  # what DEST was binarised from
    assert [read_lines(work / "subword" / f"train.{lang}") for lang in ("de", "en")] == \
        list(binarised)

    # only what is missing is made again
    for path in (work / "subword").iterdir():
        path.unlink()
    out = ok(module(*prep, "--keep-intermediates"))
    assert "[normalise, tokenise, clean, split] done already" in out
    assert read_lines(work / "subword" / "train.de") == binarised[0]

    # DROP's aligner on the corpus's tokenised training text; our "system" writes
    # detokenised, cased text: the corpus's raw test side
    tok = work / "tok"
    ok(run([BIN / "sparse-attn-align", "train", "--src", tok / "train.de", "--tgt",
            tok / "train.en", "--out", tmp_path / "aligner", "--sink", "--quiet"]))
    ok(module(TOKENIZE, "--like", "iwslt14_de_en", "--lang", "en", work / "raw" / "test.en",
              tmp_path / "hyp.tok.en"))
    assert read_lines(tmp_path / "hyp.tok.en") == read_lines(tok / "test.en")

    def score(hyp):
        ok(run([BIN / "sparse-attn-score", "--hyp", hyp, "--ref", tok / "test.en", "--src",
                tok / "test.de", "--metrics", "bleu,chrf,rep,drop", "--aligner",
                tmp_path / "aligner", "--json", tmp_path / "scores.json"]))
        return json.loads((tmp_path / "scores.json").read_text())

    tokenised = score(tmp_path / "hyp.tok.en")
    assert tokenised["bleu"]["score"] == pytest.approx(100)
    assert tokenised["drop"]["score"] == 0 and tokenised["drop"]["aligned_source_words"] > 0
    untokenised = score(work / "raw" / "test.en")  # what scoring it as written gives
    assert untokenised["bleu"]["score"] < 50


def test_rebuilt_text_of_another_recipe_version_is_refused(tmp_path):
    raw = tmp_path / "raw"
    archives.iwslt14_archive(raw)
    dest = prepare_here(iwslt14_de_en, tmp_path, raw)
    prepared = json.loads((dest / "PREPARED.json").read_text())
    prepared["sentences"]["train"] += 1  # as if an older recipe had kept one pair more
    (dest / "PREPARED.json").write_text(json.dumps(prepared))
    before = snapshot(dest)
    proc = module("sparse_attn_data.iwslt14_de_en", "--raw-dir", raw, "--dest-dir",
                  tmp_path / "bin", "--work-dir", tmp_path / "work", *FLAGS,
                  "--keep-intermediates")
    message = one_error_line(proc, "python -m sparse_attn_data.iwslt14_de_en")
    assert "train 65" in message and "train 64" in message
    assert "prepared by another version of the recipe" in message
    work = tmp_path / "work" / "iwslt14_de_en"
    assert not any((work / stage).exists() for stage in ("raw", "tok", "subword"))
    assert snapshot(dest) == before


# -- the tokeniser: each recipe's text stage ----------------------------------------------------
CORPORA = {"iwslt14_de_en": (iwslt14_de_en, archives.iwslt14_archive),
           "multi30k_de_en": (multi30k_de_en, archives.multi30k_files),
           "wmt14_en_de": (wmt14_en_de, archives.wmt14_archives),
           "wmt16_ro_en": (wmt16_ro_en, archives.wmt16_archives)}


@pytest.mark.parametrize("name", CORPORA)
def test_tokenize_like_a_recipe_gives_its_tokenised_text(tmp_path, name):
    """Each side of the recipe's raw test set, as IN and OUT files, through standard input
    and output, and with the prepared folder as ``--like``: the recipe's ``tok/`` text."""
    corpus, build = CORPORA[name]
    build(tmp_path / "raw")
    dest = prepare_here(corpus, tmp_path, tmp_path / "raw", "--keep-intermediates")
    work = tmp_path / "work" / name
    src, tgt = corpus.RECIPE.src, corpus.RECIPE.tgt
    for lang in (src, tgt):
        raw, want = work / "raw" / f"test.{lang}", read_lines(work / "tok" / f"test.{lang}")
        assert read_lines(raw) != want  # there is something to tokenise
        ok(module(TOKENIZE, "--like", name, "--lang", lang, raw, tmp_path / f"out.{lang}"))
        assert read_lines(tmp_path / f"out.{lang}") == want
    raw = (work / "raw" / f"test.{tgt}").read_text()
    piped = ok(module(TOKENIZE, "--like", name, stdin=raw))  # --lang: the target's
    assert piped.splitlines() == read_lines(work / "tok" / f"test.{tgt}")
    assert ok(module(TOKENIZE, "--like", dest, "-", "-", stdin=raw)) == piped


def test_tokenize_like_a_folder_prepared_from_parallel_text(tmp_path):
    """The steps ``python -m sparse_attn_data.parallel`` recorded in PREPARED.json."""
    lines = {"de": ["Das „Haus“ ist groß – sehr groß!", "Er sagt: ‚Hallo‘ (zweimal)."],
             "en": ["The \"well-known\" house's big, isn't it?", "He says: 'hello' (twice)."]}
    for split in ("train", "valid", "test"):
        for lang, side in lines.items():
            write_lines(tmp_path / "text" / f"{split}.{lang}", side * 3)
    text = tmp_path / "text"
    dest = parallel.main(["--src", "de", "--tgt", "en", "--train", text / "train", "--valid",
                          text / "valid", "--test", text / "test", "--lowercase",
                          "--normalize-punctuation", "--aggressive-dashes", "--moses", "2017",
                          "--subwords", "none", "--name", "mine", "--dest-dir",
                          tmp_path / "bin", "--work-dir", tmp_path / "work",
                          "--keep-intermediates"])
    tok = tmp_path / "work" / "mine" / "tok"
    for lang in ("de", "en"):
        got = ok(module(TOKENIZE, "--like", dest, "--lang", lang, text / f"test.{lang}"))
        assert got.splitlines() == read_lines(tok / f"test.{lang}")
    assert "well @-@ known" in got and got == got.lower()


@pytest.mark.parametrize("argv, stdin, message", [
    (["--like", "kftt_ja_en"], b"x\n", "kftt_ja_en tokenises nothing (KFTT Japanese-English "
                                        "is used as it was published, tokenised already)"),
    (["--like", "nowhere"], b"x\n", "--like nowhere: neither a corpus recipe (iwslt14_de_en, "
                                     "iwslt15_en_vi, kftt_ja_en, multi30k_de_en, wmt14_en_de, "
                                     "wmt16_ro_en) nor a prepared folder (no "
                                     "nowhere/PREPARED.json)"),
    (["--like", "iwslt14_de_en", "--lang", "fr"], b"x\n",
     "--lang fr: the languages of iwslt14_de_en are de and en"),
    (["--like", "iwslt14_de_en", "{d}/missing", "{d}/out"], None, "{d}/missing: no such file"),
    (["--like", "iwslt14_de_en", "-", "{d}/out"], b"ok\n\xff\n", "<stdin>: line 2 is not UTF-8"),
    (["--like", "iwslt14_de_en", "-", "{d}/out"], b"", "<stdin>: file is empty"),
    (["--lang", "en"], b"x\n", "the following arguments are required: --like"),
])
def test_tokenize_bad_input_is_one_line_and_writes_nothing(tmp_path, argv, stdin, message):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-m", TOKENIZE,
                           *(a.format(d=tmp_path) for a in argv)], cwd=REPO, env=env,
                          capture_output=True, input=stdin)
    proc.stdout, proc.stderr = proc.stdout.decode(), proc.stderr.decode()
    assert message.format(d=tmp_path) in one_error_line(proc)
    assert not (tmp_path / "out").exists() and proc.stdout == ""


# -- on the real release files -----------------------------------------------------------------
IWSLT14 = REALDATA / "iwslt14_de-en"


@needs_realdata
@pytest.mark.parametrize("lang", ["de", "en"])
def test_tokenize_like_iwslt14_is_fairseqs_test_set(tmp_path, lang):
    """The release XML's 6,750 test segments through the command: fairseq's
    ``prepare-iwslt14.sh`` output (``tmp/test.LANG``), line for line."""
    sides = iwslt14_de_en.read_test(IWSLT14 / "orig" / "de-en")
    write_lines(tmp_path / "test.raw", sides[("de", "en").index(lang)])
    ok(module(TOKENIZE, "--like", "iwslt14_de_en", "--lang", lang, tmp_path / "test.raw",
              tmp_path / "test.tok", "--workers", "2"))
    assert_same_lines(read_lines(tmp_path / "test.tok"),
                      read_lines(IWSLT14 / "iwslt14.tokenized.de-en" / "tmp" / f"test.{lang}"),
                      f"tmp/test.{lang}")


@needs_realdata
@pytest.mark.parametrize("lang", ["de", "en"])
def test_tokenize_like_multi30k_is_the_datasets_tokenised_file(tmp_path, lang):
    raw = read_gz(REALDATA / "multi30k" / "raw" / f"test_2016_flickr.{lang}.gz")
    tokenised = ok(module(TOKENIZE, "--like", "multi30k_de_en", "--lang", lang,
                          stdin="".join(line + "\n" for line in raw)))
    assert_same_lines(tokenised.splitlines(), read_lines(
        REALDATA / "multi30k" / "tok" / f"test_2016_flickr.lc.norm.tok.{lang}"),
        f"test_2016_flickr.{lang}")
