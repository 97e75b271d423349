"""sparse-attn-score: tables and JSON from files or fairseq-generate output; bad input
stops with one line and writes nothing."""

import json
import shutil
import subprocess

import pytest

from sparse_attn_plugin.evaluation import Meteor, corpus_bleu, scoring
from sparse_attn_plugin.evaluation.cli import main, run
from sparse_attn_plugin.evaluation.rep import corpus_rep
from sparse_attn_plugin.evaluation.significance import paired_bootstrap
from sparse_attn_plugin.evaluation.text import remove_bpe

from helpers import BIN, needs_java

HYPS = ["the cat sat on the mat .", "a dog a dog barked", "very very good"]
REFS = ["the cat sat on a mat .", "the dog barked", "very good"]


@pytest.fixture
def files(tmp_path):
    for name, lines in (("hyp", HYPS), ("ref", REFS), ("src", ["x", "y", "z"])):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    return tmp_path


def test_scores_files_and_writes_json_and_per_sentence(files, capsys):
    scores = run(["--hyp", str(files / "hyp"), "--ref", str(files / "ref"), "--src",
                   str(files / "src"), "--metrics", "bleu,rep", "--json", str(files / "s.json"),
                   "--per-sentence", str(files / "per.tsv")])
    assert scores["bleu"]["score"] == pytest.approx(corpus_bleu(HYPS, REFS).score)
    assert scores["rep"]["score"] == pytest.approx(corpus_rep(HYPS, REFS).score)
    printed = capsys.readouterr().out
    assert "BLEU" in printed and "tok:none" in printed and "REP" in printed
    assert json.loads((files / "s.json").read_text())["rep"]["score"] == scores["rep"]["score"]
    rows = (files / "per.tsv").read_text().splitlines()
    assert rows[0] == "id\trep" and rows[2] == "1\t2"  # "a dog" repeated, absent from the ref


@pytest.mark.parametrize("case", [[], ["--lowercase"]])
def test_chrf_beside_bleu_by_default_is_sacrebleus_own(tmp_path, case):
    """Typed as a user types it, without --metrics: BLEU, chrF and REP, chrF equal to
    sacreBLEU's CHRF on the same text (case-insensitive with --lowercase, as BLEU), its
    signature printed and in the JSON."""
    from sacrebleu.metrics import CHRF

    hyps = ["The cat sat on the Mat .", "a dog a dog barked", "Very very good"]
    _lines(tmp_path / "hyp", hyps)
    _lines(tmp_path / "ref", REFS)
    proc = subprocess.run([BIN / "sparse-attn-score", "--hyp", tmp_path / "hyp", "--ref",
                           tmp_path / "ref", "--json", tmp_path / "s.json", *case],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    scores = json.loads((tmp_path / "s.json").read_text())
    assert list(scores) == ["bleu", "chrf", "rep"]
    metric = CHRF(lowercase=bool(case))
    direct = metric.corpus_score(hyps, [REFS])
    assert scores["chrf"] == {"score": direct.score, "signature": str(metric.get_signature())}
    assert ("case:lc" if case else "case:mixed") in scores["chrf"]["signature"]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("chrF "))
    assert row.split() == ["chrF", f"{direct.score:.2f}", scores["chrf"]["signature"]]
    lower = CHRF(lowercase=True).corpus_score(hyps, [REFS]).score
    assert (direct.score == lower) == bool(case)  # the case matters to this text


def test_only_newlines_end_a_line(tmp_path):
    """A byte-order mark is no text, and U+2028, U+0085 or a form feed inside a sentence
    do not split it: the hypotheses stay aligned with their references."""
    hyps = ["the cat\u2028sat", "a dog\x85barked", "very\x0cgood"]
    (tmp_path / "hyp").write_text("\ufeff" + "\n".join(hyps) + "\n", encoding="utf-8")
    (tmp_path / "ref").write_text("\n".join(REFS) + "\n", encoding="utf-8")
    scores = run(["--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"),
                  "--metrics", "bleu"])
    assert scores["bleu"]["score"] == pytest.approx(corpus_bleu(hyps, REFS).score)


#: What fairseq-generate writes after the sentences, with references.
CLOSING = "Generate test with beam=5: BLEU4 = 100.00, 100.0/100.0/100.0/100.0"


def test_reads_fairseq_generate_output_and_removes_bpe(tmp_path):
    gen = tmp_path / "gen.out"
    dog, cat = "the d@@ og bark@@ ed at me", "the c@@ at sat on it"
    gen.write_text(f"S-1\tb\nT-1\t{dog}\nH-1\t-0.3\t{dog}\nS-0\ta\nT-0\t{cat}\nH-0\t-0.2\t{cat}\n"
                   f"{CLOSING}\n")
    scores = run(["--generate-output", str(gen), "--remove-bpe", "--metrics", "bleu"])
    assert scores["bleu"]["score"] == pytest.approx(100.0)


def test_a_cut_generate_output_is_refused_unless_partial(tmp_path):
    """Issue 55: the last sentences cut off a fairseq-generate output scored with exit 0.
    Without fairseq's closing lines it is one line and exit 1; ``--partial`` scores it as
    it is; with --ref the references' count must be the sentences'."""
    gen = _generate_output(tmp_path / "gen.out", [(0, "a b c d e", "a b c d e"),
                                                  (1, "f g h i j", "f g h i j")])
    proc = subprocess.run([BIN / "sparse-attn-score", "--generate-output", gen, "--metrics",
                           "bleu"], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.strip() == (
        f"sparse-attn-score: error: {gen}: no 'Translated N sentences' or 'Generate ... with "
        "beam=' line, which fairseq-generate writes after the sentences: the output looks cut "
        "(--partial scores it as it is)")
    scores = run(["--generate-output", str(gen), "--partial", "--metrics", "bleu"])
    assert scores["bleu"]["score"] == pytest.approx(100.0)
    ref = _lines(tmp_path / "ref", ["a b c d e", "f g h i j", "k l m n o"])
    proc = subprocess.run([BIN / "sparse-attn-score", "--generate-output", gen, "--ref", ref,
                           "--metrics", "bleu"], capture_output=True, text=True)
    assert proc.returncode == 1 and "line counts differ" in proc.stderr


def test_bpe_removal_matches_fairseq():
    from fairseq.data.data_utils import post_process

    for line in ["the c@@ at sat", "a@@ b@@ c d", "plain words", ""]:
        assert remove_bpe(line, "subword_nmt") == post_process(line, "subword_nmt")
    piece = "\u2581the \u2581c at \u2581sat"
    assert remove_bpe(piece, "sentencepiece") == post_process(piece, "sentencepiece")


@pytest.mark.parametrize("setup,message", [
    (lambda d: (d / "ref").write_text("a\nb\n"),
     "line counts differ: {d}/hyp has 3, {d}/ref has 2"),
    (lambda d: (d / "ref").unlink(), "{d}/ref: no such file"),
    (lambda d: (d / "ref").write_text(""), "{d}/ref: file is empty"),
    (lambda d: (d / "ref").write_text("\n \n"), "{d}/ref: holds only blank lines (2)"),
    (lambda d: (d / "ref").write_bytes(b"ok\n\xff\xfe bad\nok\n"),
     "{d}/ref: line 2 is not UTF-8 (invalid start byte)"),
])
def test_bad_input_is_one_line_and_writes_nothing(files, setup, message):
    setup(files)
    proc = subprocess.run([BIN / "sparse-attn-score", "--hyp", files / "hyp", "--ref",
                           files / "ref", "--json", files / "out.json"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "sparse-attn-score: error: " + message.format(d=files)
    assert not (files / "out.json").exists()


def _lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_baseline_gives_the_paired_bootstrap_difference(files):
    base = ["the cat sat on it .", "a dog", "very bad"]
    _lines(files / "base", base)
    proc = subprocess.run([BIN / "sparse-attn-score", "--hyp", files / "hyp", "--ref",
                           files / "ref", "--baseline", files / "base", "--resamples", "200",
                           "--json", files / "s.json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    paired = json.loads((files / "s.json").read_text())["bleu"]["paired_bootstrap"]
    assert paired == paired_bootstrap(HYPS, base, REFS, resamples=200).record()
    assert paired["difference"] == pytest.approx(
        corpus_bleu(HYPS, REFS).score - corpus_bleu(base, REFS).score)
    line = next(row for row in proc.stdout.splitlines() if row.startswith("vs base"))
    assert f"{paired['difference']:+.2f}" in line and "200 resamples" in line


def _generate_output(path, ids_and_lines, closing: str = ""):
    return _lines(path, [f"{kind}-{i}\t{'-0.1' + chr(9) if kind == 'H' else ''}{text}"
                         for i, ref, hyp in ids_and_lines
                         for kind, text in (("S", "src"), ("T", ref), ("H", hyp))]
                  + ([closing] if closing else []))


def test_baseline_of_generate_output_is_generate_output(tmp_path):
    system = _generate_output(tmp_path / "sys.out", [(0, "a b@@ c d", "a b@@ c d"),
                                                       (1, "e f g h", "e f g x")], CLOSING)
    base = _generate_output(tmp_path / "base.out", [(1, "e f g h", "e x g x"),
                                                      (0, "a b@@ c d", "a bc d")], CLOSING)
    scores = run(["--generate-output", str(system), "--baseline", str(base), "--remove-bpe",
                  "--metrics", "bleu", "--resamples", "50"])
    expected = paired_bootstrap(["a bc d", "e f g x"], ["a bc d", "e x g x"],
                                ["a bc d", "e f g h"], resamples=50)
    assert scores["bleu"]["paired_bootstrap"] == expected.record()


@pytest.mark.parametrize("extra, message", [
    (["--baseline", "{d}/short"], "line counts differ: {d}/hyp has 3, {d}/ref has 3, "
                                  "{d}/short has 2"),
    (["--baseline", "{d}/hyp", "--metrics", "rep"], "--baseline compares BLEU: add BLEU to "
                                                    "--metrics"),
    (["--baseline", "{d}/hyp", "--resamples", "0"], "--resamples must be positive, not 0"),
    (["--baseline", "{d}/missing"], "{d}/missing: no such file"),
])
def test_bad_baseline_is_one_line_and_writes_nothing(files, extra, message):
    _lines(files / "short", ["a", "b"])
    proc = subprocess.run([BIN / "sparse-attn-score", "--hyp", files / "hyp", "--ref",
                           files / "ref", "--json", files / "out.json",
                           *(arg.format(d=files) for arg in extra)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "sparse-attn-score: error: " + message.format(d=files)
    assert not (files / "out.json").exists()


def test_generate_outputs_of_other_sentences_are_refused(tmp_path):
    system = _generate_output(tmp_path / "sys.out", [(0, "a b c", "a b c")], CLOSING)
    base = _generate_output(tmp_path / "base.out", [(0, "x y z", "a b c")], CLOSING)
    proc = subprocess.run([BIN / "sparse-attn-score", "--generate-output", system,
                           "--baseline", base], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"sparse-attn-score: error: {base} and {system} translate "
                                   "different sentences (their T lines differ)")


def test_unknown_metric_is_an_argument_error(files, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--hyp", str(files / "hyp"), "--ref", str(files / "ref"), "--metrics", "bleu,cider"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 1 and len(err) == 1
    assert err[0].startswith("sparse-attn-score: error: argument --metrics: unknown metric(s) "
                             "cider")


@needs_java
def test_meteor_through_the_cli_equals_the_driver(files):
    scores = run(["--hyp", str(files / "hyp"), "--ref", str(files / "ref"), "--metrics",
                   "meteor,rep", "--per-sentence", str(files / "per.tsv")])
    with Meteor("en") as meteor:
        direct = meteor.score(HYPS, REFS)
    assert scores["meteor"]["score"] == pytest.approx(direct.corpus, abs=1e-9)
    rows = [line.split("\t") for line in (files / "per.tsv").read_text().splitlines()]
    assert rows[0] == ["id", "meteor", "rep"]
    assert [float(r[1]) for r in rows[1:]] == pytest.approx(direct.sentences, abs=1e-9)


@pytest.fixture(scope="module")
def aligned_corpus(aligned_synthetic, tmp_path_factory):
    """The session's synthetic test pairs and aligner, and hypotheses with every fifth
    word (from the third) deleted."""
    root, shared = tmp_path_factory.mktemp("drop"), aligned_synthetic.folder
    for name in ("test.src", "test.tgt"):
        shutil.copy(shared / name, root / name)
    (root / "aligner").symlink_to(shared / "aligner")
    ref = (root / "test.tgt").read_text().splitlines()
    hyp = [" ".join(w for k, w in enumerate(line.split()) if k % 5 != 2) for line in ref]
    (root / "test.hyp").write_text("\n".join(hyp) + "\n")
    return root


@pytest.mark.parametrize("symmetrize", ["grow-diag-final-and", "forward", None])
def test_drop_through_the_cli_equals_corpus_drop(aligned_corpus, symmetrize, capsys):
    from sparse_attn_plugin.evaluation.aligner import Aligner
    from sparse_attn_plugin.evaluation.drop import corpus_drop

    d = aligned_corpus
    chosen = [] if symmetrize is None else ["--symmetrize", symmetrize]
    scores = run(["--hyp", str(d / "test.hyp"), "--ref", str(d / "test.tgt"), "--src",
                   str(d / "test.src"), "--metrics", "drop", "--aligner", str(d / "aligner"),
                   *chosen])
    symmetrize = symmetrize or "forward"  # the default: the one that tracks true drops
    lines = [(d / f"test.{x}").read_text().splitlines() for x in ("src", "hyp", "tgt")]
    direct = corpus_drop(Aligner.load(d / "aligner"), *lines, symmetrize=symmetrize)
    assert scores["drop"]["score"] == pytest.approx(direct.score)
    assert 0 < direct.score < 100
    assert f"symmetrize {symmetrize}" in capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    (["--src", "{d}/test.src"], "DROP needs a word aligner: --aligner MODEL_DIR (train one "
                                "with sparse-attn-align train)"),
    (["--aligner", "{d}/aligner"], "DROP needs the sources (--src, or S lines)"),
    (["--src", "{d}/test.src", "--aligner", "nowhere"],
     "nowhere: not an aligner model (sparse-attn-align train --out)"),
])
def test_drop_without_its_inputs_is_one_clear_line(aligned_corpus, extra, message, capsys):
    d = aligned_corpus
    with pytest.raises(SystemExit) as exit_info:
        main(["--hyp", str(d / "test.hyp"), "--ref", str(d / "test.tgt"), "--metrics", "drop",
              *(arg.format(d=d) for arg in extra)])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"sparse-attn-score: error: {message}"]



def test_large_inputs_show_progress_use_one_java_process_and_train_nothing(
        aligned_corpus, monkeypatch, capsys):
    """All four metrics: METEOR and DROP show bars, one Meteor process serves the whole
    corpus, and the saved aligner is used as it is (no training)."""
    from thot.alignment import FastAlignModel

    from sparse_attn_plugin.evaluation import meteor

    started = []

    class CountingMeteor(Meteor):
        def __init__(self, *args, **kwargs):
            started.append(self)
            super().__init__(*args, **kwargs)

    def no_training(*args, **kwargs):
        raise AssertionError("scoring must not train the aligner")

    monkeypatch.setattr(meteor, "Meteor", CountingMeteor)
    monkeypatch.setattr(scoring, "PROGRESS_MIN", 10)
    monkeypatch.setattr(FastAlignModel, "train", no_training)
    d = aligned_corpus
    scores = run(["--hyp", str(d / "test.hyp"), "--ref", str(d / "test.tgt"), "--src",
                   str(d / "test.src"), "--metrics", "bleu,meteor,rep,drop", "--lang", "other",
                   "--aligner", str(d / "aligner")])
    assert set(scores) == {"bleu", "meteor", "rep", "drop"}
    assert len(started) == 1
    err = capsys.readouterr().err
    assert "METEOR" in err and "DROP: align hypotheses" in err
