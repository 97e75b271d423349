"""The corpus preparation pipeline: fixture archives in each corpus's real layout run
offline through download (or --raw-dir), extraction, cleaning, tokenisation, subwords,
fairseq-preprocess and the aligner's fertilities; re-runs, interruptions, damaged
archives and resumed downloads."""

import hashlib
import http.server
import json
import threading

import pytest

from sparse_attn_data import (
    archive,
    download,
    iwslt14_de_en,
    iwslt15_en_vi,
    kftt_ja_en,
    multi30k_de_en,
    recipe,
    steps,
    subwords,
    text,
    wmt14_en_de,
    wmt16_ro_en,
)
from sparse_attn_plugin import files, reading

from helpers import REALDATA, archives, load_benchmark, needs_realdata
from helpers.corpora import load_split


def prepare(module, tmp_path, raw, *flags):
    """Run a corpus's command line offline on fixture archives (which cannot have the
    published archives' sizes and checksums); the prepared folder."""
    return recipe.main(module.RECIPE, [
        "--raw-dir", raw, "--dest-dir", tmp_path / "data-bin", "--work-dir", tmp_path / "work",
        "--bpe-merges", "40", "--no-checksums", *flags])


# -- the shared pieces ----------------------------------------------------------------------------

def test_atomic_outputs_leave_nothing_behind_when_a_step_fails(tmp_path):
    out = tmp_path / "a" / "x.txt"
    with pytest.raises(KeyboardInterrupt):
        with files.atomic_outputs([out]) as (tmp,):
            tmp.write_text("half")
            raise KeyboardInterrupt
    assert not out.exists() and not list(out.parent.iterdir())
    calls = []
    steps.run_step("s", [out], lambda tmps: (calls.append(1), tmps[0].write_text("done")))
    steps.run_step("s", [out], lambda tmps: calls.append(2))
    assert out.read_text() == "done" and calls == [1]  # the second run is skipped


def test_read_lines_drops_a_byte_order_mark_and_needs_no_final_newline(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffWhen I was little .\nThank you .".encode("utf-8"))
    assert reading.read_lines(path) == ["When I was little .", "Thank you ."]
    # only newlines end a line: U+2028, U+0085 and form feeds are inside sentences
    path.write_bytes("a\u2028b\x85c\x0cd\r\n\ne".encode("utf-8"))
    assert reading.read_lines(path) == ["a\u2028b\x85c\x0cd", "", "e"]


def test_learning_bpe_draws_no_progress_bar_into_a_log(tmp_path, capfd):
    from subword_nmt import learn_bpe

    own_bar = learn_bpe.tqdm
    lines = ["der hund bellt laut", "die katze schläft", "der hund schläft"] * 20
    subwords.learn("subword_nmt", [lines], 12, tmp_path / "bpe.codes")
    codes = reading.read_lines(tmp_path / "bpe.codes")
    assert codes[0].startswith("#version") and len(codes) == 13
    assert capfd.readouterr().err == ""  # stderr is a pipe here, as in a log file
    assert learn_bpe.tqdm is own_bar


def test_clean_pairs_follows_moses_clean_corpus():
    src = ["a b c", "", "a", "a  b", "w " * 176]
    tgt = ["x y z", "x", "x y z w", "x y", "v " * 176]
    assert text.clean_pairs(src, tgt, 1, 175, 1.5) == (["a b c", "a b"], ["x y z", "x y"])


def test_worker_processes_give_the_same_lines_in_order(monkeypatch):
    from sparse_attn_data import line_map

    lines = [f"Line {i}: it's well-known, isn't it?" for i in range(10)]
    monkeypatch.setattr(line_map, "CHUNK", 3)
    one = line_map.map_lines(text.moses_tokenizer, ("en", True, True), lines, workers=1)
    two = line_map.map_lines(text.moses_tokenizer, ("en", True, True), lines, workers=2)
    assert one == two and one[0] == "Line 0 : it &apos;s well @-@ known , isn &apos;t it ?"


def test_markup_and_romanian_normalisation():
    assert text.iwslt_train_text(["<url>u</url>", "<title>T</title>", " Hi . ",
                                  "<talkid>3</talkid>", " <keywords>k</keywords>"]) == ["T", "Hi ."]
    assert text.segments(['<seg id="1"> It\u2019s </seg>', "<doc>", '<seg id="2">b</seg>']) \
        == ["It's", "b"]
    assert text.romanian(["Ţară şi „țară” în Ăla Â"]) == ["Tara si „tara” in Ala A"]


def test_truncated_or_wrong_archive_is_named(tmp_path):
    good, _ = archives.iwslt14_archive(tmp_path / "good")
    bad = tmp_path / "de-en.tgz"
    bad.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    with pytest.raises(steps.PrepError, match="de-en.tgz: truncated or corrupt archive"):
        archive.extract(bad, {"de-en/README": tmp_path / "readme"})
    assert not (tmp_path / "readme").exists()
    with pytest.raises(steps.PrepError, match="expected one member matching 'de-en/nope'"):
        archive.extract(good, {"de-en/nope": tmp_path / "nope"})


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves one file with HTTP Range support; the first response is cut short."""

    payload = b""
    requests = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        start = 0
        if "Range" in self.headers:
            start = int(self.headers["Range"].split("=")[1].split("-")[0])
        type(self).requests.append(start)
        body = self.payload[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if len(type(self).requests) == 1:
            body = body[: len(body) // 3]  # the connection drops
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    RangeHandler.payload = bytes(range(256)) * 4000
    RangeHandler.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/corpus.tgz"
    httpd.shutdown()


def test_download_resumes_after_a_dropped_connection(tmp_path, server):
    payload = RangeHandler.payload
    source = download.Source(server, "corpus.tgz", size=len(payload),
                             checksum="md5:" + hashlib.md5(payload).hexdigest())
    path = download.fetch(source, tmp_path / "orig", backoff=0.0)
    assert path.read_bytes() == payload
    assert RangeHandler.requests[0] == 0 and RangeHandler.requests[1] > 0  # resumed
    assert not (tmp_path / "orig" / "corpus.tgz.part").exists()
    wrong = download.Source(server, "other.tgz", size=len(payload) + 1)
    with pytest.raises(steps.PrepError, match=r"other.tgz.part: 1024000 bytes, expected"):
        download.fetch(wrong, tmp_path / "orig", retries=1)
    assert not (tmp_path / "orig" / "other.tgz").exists()
    corrupt = download.Source(server, "third.tgz", checksum="sha1:" + "0" * 40)
    with pytest.raises(steps.PrepError, match=r"third.tgz.part: sha1 .*, expected 000000000000"):
        download.fetch(corrupt, tmp_path / "orig", retries=1)


def test_a_download_that_keeps_failing_says_how_to_go_on_offline(tmp_path):
    """Issue 55: offline, the message said only "run again to resume"; it also says that
    --raw-dir takes the files the user already has, and which."""
    source = download.Source("http://127.0.0.1:9/corpus.tgz", "corpus.tgz")   # discard port
    with pytest.raises(steps.PrepError) as refused:
        download.fetch(source, tmp_path / "orig", retries=2, backoff=0.0, timeout=2)
    message = str(refused.value)
    assert message.startswith("http://127.0.0.1:9/corpus.tgz: download failed after 2 "
                              "attempts (")
    assert message.endswith(f"run again to resume from {tmp_path / 'orig' / 'corpus.tgz.part'}"
                            f", or give the files you have with --raw-dir DIR (or "
                            f"{download.RAW_DIR_ENV}): corpus.tgz there")


def test_an_archive_that_is_not_the_published_one_is_refused(tmp_path, capsys):
    """WMT14's training archives carry their published size and SHA-256."""
    archives.wmt14_archives(tmp_path / "raw")
    with pytest.raises(SystemExit):
        recipe.main(wmt14_en_de.RECIPE, ["--raw-dir", tmp_path / "raw", "--dest-dir",
                                         tmp_path / "bin", "--work-dir", tmp_path / "work"])
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m sparse_attn_data.wmt14_en_de: error: ")
    assert "training-parallel-europarl-v7.tgz:" in err
    assert "expected 657632379 (truncated or the wrong file" in err
    assert not (tmp_path / "bin").exists()


def test_offline_mode_names_the_missing_archive(tmp_path, monkeypatch):
    monkeypatch.setenv(download.RAW_DIR_ENV, str(tmp_path / "raw"))
    with pytest.raises(SystemExit):
        recipe.main(iwslt14_de_en.RECIPE, ["--dest-dir", tmp_path / "bin", "--work-dir",
                                           tmp_path / "work"])
    assert not (tmp_path / "bin").exists()


# -- IWSLT14 De-En ------------------------------------------------------------------------------

def test_iwslt14_runs_offline_end_to_end(tmp_path, capsys):
    raw = tmp_path / "raw"
    _, made = archives.iwslt14_archive(raw)
    dest = prepare(iwslt14_de_en, tmp_path, raw, "--fertility", "--keep-intermediates")
    prepared = json.loads((dest / "PREPARED.json").read_text())
    # 60 pairs + a title and a description line per talk, minus the 2 unclean pairs;
    # every 23rd held out for validation; 5 test sets of 4
    assert prepared["sentences"] == {"train": 64, "valid": 2, "test": 20}
    tok = tmp_path / "work" / "iwslt14_de_en" / "tok"
    train_de = reading.read_lines(tok / "train.de")
    assert "katze" in " ".join(train_de) and "Katze" not in " ".join(train_de)  # lowercased
    assert any(line.endswith(" .") or line.endswith(" !") for line in train_de)  # tokenised
    assert "talk 0 titel" in train_de and not any("<" in line for line in train_de)
    test_de = reading.read_lines(tok / "test.de")
    assert len(test_de) == 20 and "\u2019" not in " ".join(test_de)  # apostrophes made ASCII
    assert test_de[0].startswith(made["tests"]["IWSLT14.TED.dev2010"][0][0].split()[0].lower())
    src, tgt = load_split(dest, "train", "de", "en")
    assert len(src) == len(tgt) == 64 and any("@@" in line for line in src + tgt)  # BPE
    separate = (dest / "dict.de.txt").read_text() != (dest / "dict.en.txt").read_text()
    assert separate and (dest / "bpe.codes").is_file()  # fairseq's recipe: one per language
    for split in ("train", "valid"):
        fert = reading.read_lines(dest / f"{split}.de-en.fert")
        lengths = [len(line.split()) for line in load_split(dest, split, "de", "en")[0]]
        assert [len(line.split()) for line in fert] == lengths
    assert (dest / "guided.tsv").read_text().strip()

    # a re-run is a no-op; other settings are refused, nothing overwritten
    before = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    prepare(iwslt14_de_en, tmp_path, raw, "--fertility", "--keep-intermediates")
    assert "prepared already" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in dest.iterdir()} == before
    with pytest.raises(SystemExit):
        prepare(iwslt14_de_en, tmp_path, raw, "--sink")
    err = capsys.readouterr().err
    assert "was prepared with other settings (fertility: True there, False now" in err


def test_sentencepiece_and_a_joined_dictionary(tmp_path):
    raw = tmp_path / "raw"
    archives.iwslt14_archive(raw)
    dest = prepare(iwslt14_de_en, tmp_path, raw, "--subwords", "sentencepiece", "--size", "70",
                   "--joined-dictionary")
    assert (dest / "spm.model").is_file() and not (dest / "bpe.codes").exists()
    src, tgt = load_split(dest, "train", "de", "en")
    assert any("\u2581" in line for line in src + tgt)  # sentencepiece's word marker
    assert (dest / "dict.de.txt").read_text() == (dest / "dict.en.txt").read_text()


def test_iwslt14_resumes_after_an_interruption(tmp_path, monkeypatch, capsys):
    raw = tmp_path / "raw"
    archives.iwslt14_archive(raw)
    real_learn = recipe.subwords.learn

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(recipe.subwords, "learn", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare(iwslt14_de_en, tmp_path, raw, "--sink")
    work = tmp_path / "work" / "iwslt14_de_en"
    assert (work / "tok" / "train.de").is_file()
    assert not list(work.glob("subword/*"))  # nothing half-written
    assert not (tmp_path / "data-bin" / "iwslt14_de_en").exists()
    monkeypatch.setattr(recipe.subwords, "learn", real_learn)
    dest = prepare(iwslt14_de_en, tmp_path, raw, "--sink")
    out = capsys.readouterr().out
    assert "[raw text] done already" in out and "[normalise, tokenise, clean, split] done " \
        "already" in out
    src, _ = load_split(dest, "test", "de", "en")
    assert all(line.endswith("<SINK>") for line in src)
    assert not (work / "tok").exists()  # intermediates removed by default
    assert not (work / "orig" / "de-en.tgz").exists()  # offline: read where it is, not copied


# -- the other corpora ----------------------------------------------------------------------------

def test_iwslt15_is_used_as_published_words_and_all(tmp_path):
    made = archives.iwslt15_files(tmp_path / "raw")
    dest = prepare(iwslt15_en_vi, tmp_path, tmp_path / "raw", "--keep-intermediates")
    prepared = json.loads((dest / "PREPARED.json").read_text())
    assert prepared["sentences"] == {"train": 40, "valid": 5, "test": 6}
    assert prepared["settings"]["subwords"] == "none"
    final = tmp_path / "work" / "iwslt15_en_vi" / "subword"
    for k, lang in enumerate(("en", "vi")):  # what fairseq-preprocess read: untouched
        assert reading.read_lines(final / f"test.{lang}") == [p[k] for p in made["tst2013"]]
    assert len(load_split(dest, "test", "en", "vi")[0]) == 6


def test_kftt_reads_the_tokenised_release(tmp_path):
    _, made = archives.kftt_archive(tmp_path / "raw")
    dest = prepare(kftt_ja_en, tmp_path, tmp_path / "raw", "--fertility", "--sink")
    assert json.loads((dest / "PREPARED.json").read_text())["sentences"] == {
        "train": 40, "valid": 5, "test": 7}
    src, tgt = load_split(dest, "valid", "ja", "en")
    words = [line.replace("@@ ", "").removesuffix(" <SINK>") for line in src]
    assert words == [p[0] for p in made["kyoto-dev"]]  # the tok/ files, not orig/
    for line, target, fert in zip(src, tgt, reading.read_lines(dest / "valid.ja-en.fert")):
        counts = [int(c) for c in fert.split()]
        assert len(counts) == len(line.split())  # one per token, the sink's last
        assert sum(counts) == len(target.split())  # every target token counted once


def test_wmt14_joins_three_corpora_and_reads_the_sgm_test_set(tmp_path):
    parts = archives.wmt14_archives(tmp_path / "raw")
    dest = prepare(wmt14_en_de, tmp_path, tmp_path / "raw", "--keep-intermediates")
    counts = json.loads((dest / "PREPARED.json").read_text())["sentences"]
    assert counts == {"train": 20 + 16 + 10, "valid": 6, "test": 7}
    tok = tmp_path / "work" / "wmt14_en_de" / "tok"
    assert "well @-@ known" in (tok / "train.en").read_text()  # tokenizer.perl -a
    test_en = reading.read_lines(tok / "test.en")
    assert test_en[0].split()[0] == parts["test"][0][0].split()[0]  # cased, from the sgm
    assert len(reading.read_lines(tok / "test.de")) == 7


REAL_WMT14 = (REALDATA
              / "wmt14_en-de" / "text")


@needs_realdata
def test_wmt14_validates_on_the_real_newstest2012_and_2013_as_xu_et_al(tmp_path):
    """Xu et al. (2021), section 4.1: validation on newstest2012 + newstest2013, training
    sentences of at most 256 subwords (here 16, on the fixture's training text)."""
    archives.wmt14_archives(tmp_path / "raw")
    real = {f"{name}.{lang}": reading.read_lines(REAL_WMT14 / f"{name}.{lang}")
            for name in ("newstest2012", "newstest2013") for lang in ("en", "de")}
    archives.tar_gz(tmp_path / "raw" / "dev.tgz", {
        f"dev/{name}": (REAL_WMT14 / name).read_text(encoding="utf-8") for name in real})
    dest = prepare(wmt14_en_de, tmp_path, tmp_path / "raw", "--valid",
                   "newstest2012+newstest2013", "--max-train-subwords", "16",
                   "--keep-intermediates")
    prepared = json.loads((dest / "PREPARED.json").read_text())
    assert prepared["sentences"]["valid"] == prepared["expected"]["valid"] == 3003 + 3000
    assert prepared["settings"]["valid"] == "newstest2012+newstest2013"
    work = tmp_path / "work" / "wmt14_en_de"
    for lang in ("en", "de"):  # every line kept, in order, through every stage
        assert reading.read_lines(work / "raw" / f"valid.{lang}") == \
            real[f"newstest2012.{lang}"] + real[f"newstest2013.{lang}"]
        for stage in ("tok", "subword"):
            assert len(reading.read_lines(work / stage / f"valid.{lang}")) == 6003
    train = [reading.read_lines(work / "subword" / f"train.{lang}") for lang in ("en", "de")]
    assert 0 < len(train[0]) < 20 + 16 + 10
    assert max(len(line.split()) for side in train for line in side) <= 16


def test_wmt16_removes_romanian_diacritics(tmp_path):
    archives.wmt16_archives(tmp_path / "raw")
    dest = prepare(wmt16_ro_en, tmp_path, tmp_path / "raw", "--keep-intermediates")
    assert json.loads((dest / "PREPARED.json").read_text())["sentences"] == {
        "train": 35, "valid": 5, "test": 6}
    ro = (tmp_path / "work" / "wmt16_ro_en" / "tok" / "train.ro").read_text()
    assert "casa" in ro and not set("ăâîșşțţ") & set(ro)
    assert "house" in (tmp_path / "work" / "wmt16_ro_en" / "tok" / "train.en").read_text()


CORPORA = {  # module, fixture builder, the archive the corrupt-archive test damages
    "iwslt14_de_en": (iwslt14_de_en, archives.iwslt14_archive, "de-en.tgz"),
    "iwslt15_en_vi": (iwslt15_en_vi, archives.iwslt15_files, None),
    "kftt_ja_en": (kftt_ja_en, archives.kftt_archive, "kftt-data-1.0.tar.gz"),
    "multi30k_de_en": (multi30k_de_en, archives.multi30k_files, "train.de.gz"),
    "wmt14_en_de": (wmt14_en_de, archives.wmt14_archives, "test-full.tgz"),
    "wmt16_ro_en": (wmt16_ro_en, archives.wmt16_archives, "en-ro.txt.zip"),
}


@pytest.mark.parametrize("name", list(CORPORA))
def test_every_corpus_resumes_reruns_and_names_a_damaged_archive(tmp_path, capsys,
                                                                 monkeypatch, name):
    module, build, damaged = CORPORA[name]
    raw = tmp_path / "raw"
    build(raw)
    # interrupted while applying subwords: nothing under data-bin, the stages before kept
    real = recipe.segmented_splits
    monkeypatch.setattr(recipe, "segmented_splits",
                        lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        prepare(module, tmp_path, raw)
    assert not (tmp_path / "data-bin").exists()
    monkeypatch.setattr(recipe, "segmented_splits", real)
    dest = prepare(module, tmp_path, raw)
    out = capsys.readouterr().out
    assert "[normalise, tokenise, clean, split] done already" in out  # resumed, not redone
    src, tgt = module.RECIPE.src, module.RECIPE.tgt
    for split in module.RECIPE.splits:
        sides = load_split(dest, split, src, tgt)
        assert len(sides[0]) == len(sides[1]) > 0
    prepare(module, tmp_path, raw)
    assert "prepared already" in capsys.readouterr().out

    # a damaged archive (or a missing file) stops with one line naming it
    if damaged:
        path = raw / damaged
        path.write_bytes(path.read_bytes()[:200])
    else:
        (raw / "tst2013.vi").unlink()
        damaged = "tst2013.vi"
    with pytest.raises(SystemExit) as exit_info:
        prepare(module, tmp_path / "again", raw)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"python -m sparse_attn_data.{module.RECIPE.name}: error: ")
    assert damaged in err[0]
    assert not (tmp_path / "again" / "data-bin").exists()


def test_benchmark_measures_each_stage_and_scales_to_every_corpus(tmp_path):
    bench = load_benchmark("bench_data_prep")
    bench.main(["--pairs", "300", "--workers", "1", "--out", tmp_path])
    record = json.loads((tmp_path / "data_prep.json").read_text())
    assert set(record["seconds"]) >= {"fetch", "raw text", "aligner fertilities", "binarise"}
    assert record["bytes"]["data-bin"] > 0 and record["sentences"]["test"] == 6750
    report = (tmp_path / "data_prep.md").read_text()
    assert "- commit:" in report
    for module in bench.CORPORA:
        assert f"| {module.RECIPE.title} |" in report
