"""``sparse-attn-compare`` end to end at a tiny scale: the synthetic corpus (the demo),
resumption row by row, and a prepared folder's test splits and subwords."""

import json
import shutil
import subprocess
import sys
from contextlib import nullcontext

import pytest

from sparse_attn_experiments import compare
from sparse_attn_experiments.comparison.corpus import (
    CorpusError,
    drop_sink,
    open_corpus,
    synthetic_corpus,
)
from sparse_attn_experiments.comparison.translations import generate_log
from sparse_attn_plugin.evaluation import Meteor, read_generate_output
from sparse_attn_plugin.evaluation.aligner import train_aligner
from sparse_attn_plugin.reading import read_lines

from helpers import REPO, fairseq_env
from helpers.metrics import rescored, sacrebleu_bleu

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.usefixtures("fast_fairseq")]
TINY = ["--train-size", "200", "--eval-size", "30", "--max-updates", "12",
        "--validate-every", "6"]


def assert_rows_score_their_translations(rows, work, out):
    """Each row's BLEU, length ratio, METEOR, REP and DROP recomputed from the test
    translations it saved (its generate log; the report keeps the same hypotheses in
    ``translations/ROW/test.txt``): sacrebleu's own BLEU, REP and DROP as Malaviya et
    al.'s scripts compute them (helpers/metrics.py), DROP with the driver's aligner
    trained again on the same training pairs (sil-thot's training is deterministic),
    METEOR from a Meteor 1.5 of its own in the driver's preset for a language it does not
    know (``other``); each equal to the row's, not within a range."""
    corpus = synthetic_corpus(work.parent / "corpus", 200, 30)  # the demo's, built before
    aligner = train_aligner(*corpus.training_text())
    with (Meteor("other") if shutil.which("java") else nullcontext()) as meteor:
        for row in rows:
            saved = read_generate_output(read_lines(generate_log(work, row["attention"],
                                                                 "test")))
            assert len(saved.hypotheses) == 30
            kept = (out / "translations" / row["attention"] / "test.txt").read_text()
            assert kept == "".join(line + "\n" for line in saved.hypotheses)
            expected = rescored(saved.hypotheses, saved.references,
                                [drop_sink(line) for line in saved.sources],
                                bleu={"tokenize": "none"}, meteor=meteor, aligner=aligner,
                                symmetrizations=["forward"])
            bleu = sacrebleu_bleu(saved.hypotheses, saved.references)
            assert row["bleu"] == {"test": expected["bleu"]}, row["attention"]
            assert row["length_ratio"] == {"test": bleu.sys_len / bleu.ref_len}
            assert row["meteor"] == expected.get("meteor"), row["attention"]
            assert (row["rep"], row["drop"]) == (expected["rep"], expected["drop"])


@pytest.mark.slow
def test_demo_writes_the_comparison_and_resumes_row_by_row(tmp_path, capsys):
    out, work = tmp_path / "out", tmp_path / "work"
    compare.main([*TINY, "--rows", "softmax,entmax_alpha,csparsemax,kernel_rbf",
                  "--out", str(out), "--work-dir", str(work)])
    rows = json.loads((out / "comparison.json").read_text())["rows"]
    assert [r["attention"] for r in rows] == ["softmax", "entmax_alpha", "csparsemax",
                                              "kernel_rbf"]
    assert_rows_score_their_translations(rows, work / "tiny", out)
    for row in rows:
        assert "tok:none" in row["bleu_signature"]
        assert row["updates"] == 12 and row["stopped"] == "cap"
        assert [u for u, _ in row["validation_curve"]] == [6, 12]
        assert row["valid_loss"] == min(loss for _, loss in row["validation_curve"])
    for row in rows[:3]:
        assert set(row["zero_fraction"]) == {"encoder_self", "decoder_self", "decoder_cross"}
    assert rows[0]["zero_fraction"]["encoder_self"] == 0  # softmax is dense
    assert len(rows[1]["alphas"]["decoder_cross"]) == 2 * 4  # layers x heads
    assert rows[2]["zero_fraction"]["encoder_self"] == 0  # csparsemax: cross-attention only
    assert rows[3]["zero_fraction"] == {}                 # a kernel smoother: no normaliser
    for row in rows[1:]:  # paired with softmax's translations of the same sentences
        paired = row["bleu_vs_softmax"]["test"]
        assert paired["difference"] == pytest.approx(row["bleu"]["test"] - rows[0]["bleu"]["test"])
        assert paired["low"] <= paired["difference"] <= paired["high"]
    assert "bleu_vs_softmax" not in rows[0]
    for row in rows:  # the report keeps each row's translations, one line a sentence
        kept = (out / "translations" / row["attention"] / "test.txt").read_text()
        assert kept.count("\n") == 30 and "@@" not in kept
    table = (out / "README.md").read_text()
    assert "Each row's translations of every test split are in `translations/ROW/TEST.txt`" in table
    assert "- commit: `" in table and "| softmax |" in table and "| entmax_alpha |" in table
    assert "| attention | BLEU test - softmax |" in table
    assert "| attention | test: hyp/ref; BLEU without BP |" in table
    assert "The paired bootstrap under the table says which gaps" in table
    assert f"| {rows[0]['length_ratio']['test']:.3f} | {rows[0]['valid_loss']:.3f} |" in table
    assert "| csparsemax (cross, f = 2) |" in table and "- (no normaliser)" in table
    assert "12 (update cap reached" in table and "SMOKE" not in table
    assert "one training with one seed (1), trained 12 updates each" in table
    assert "made-up language pair" in table  # the demo's caveat: no natural language
    for image in ("comparison.png", "training-curves.png", "alphas.png", "attention-maps.png"):
        assert (out / image).read_bytes().startswith(b"\x89PNG")
        assert f"![{image}]({image})" in table

    # A row reused without its logs whose kept translations no longer fit the test set
    # (edited by hand): one line, exit status 1, and the report is left as it was.
    log = work / "tiny" / "kernel_rbf" / "generate-test.log"
    log.rename(tmp_path / "kernel_rbf.log")
    edited = out / "translations" / "kernel_rbf" / "test.txt"
    kept = edited.read_text()
    edited.write_text("one line\n")
    written = {path: path.read_bytes() for path in out.glob("*.*")}
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        compare.main([*TINY, "--rows", "softmax,kernel_rbf", "--out", str(out),
                      "--work-dir", str(work)])
    assert stop.value.code == 1
    assert capsys.readouterr().err == ("sparse-attn-compare: error: test: kernel_rbf has 1 "
                                       "translations, softmax 30, for 30 references\n")
    assert {path: path.read_bytes() for path in out.glob("*.*")} == written
    assert edited.read_text() == "one line\n"
    edited.write_text(kept)
    (tmp_path / "kernel_rbf.log").rename(log)

    # The same command again: every row finished, none trained again.
    capsys.readouterr()
    compare.main([*TINY, "--rows", "softmax,kernel_rbf", "--out", str(tmp_path / "again"),
                  "--work-dir", str(work)])
    printed = capsys.readouterr().out
    assert printed.count("finished before, reused") == 2
    assert "training the DROP word aligner" not in printed  # nothing left to score
    again = json.loads((tmp_path / "again" / "comparison.json").read_text())["rows"]
    assert again == [rows[0], rows[3]]

    # A comparison written before (a committed one) and no trained rows, as on a fresh
    # clone: its rows are reused, not trained again; a row with other settings trains.
    committed = tmp_path / "committed"
    shutil.copytree(out, committed)
    (work / "tiny").rename(tmp_path / "kept")
    compare.main([*TINY, "--rows", "softmax,kernel_rbf", "--out", str(committed),
                  "--work-dir", str(work)])
    assert capsys.readouterr().out.count("finished before, reused") == 2
    assert not list((work / "tiny").rglob("*.pt"))
    assert json.loads((committed / "comparison.json").read_text())["rows"] == again
    assert sorted(p.name for p in (committed / "translations").iterdir()) == [
        "kernel_rbf", "softmax"]  # the rows no longer compared are gone
    compare.main([*TINY, "--seed", "3", "--rows", "softmax", "--out", str(committed),
                  "--work-dir", str(work)])
    assert "finished before, reused" not in capsys.readouterr().out
    assert (work / "tiny" / "softmax" / "checkpoint_best.pt").exists()
    shutil.rmtree(work / "tiny")
    (tmp_path / "kept").rename(work / "tiny")

    # A work folder copied from a machine without Java (here: a GPU's; one row without
    # its checkpoints): its rows are reused, METEOR comes from their saved translations,
    # the table names the machine and gives no speed ratio across machines.
    for name in ("softmax", "entmax_alpha"):
        row_dir = work / "tiny" / name
        for record in ("spec.json", "row.json", "trained.json"):
            data = json.loads((row_dir / record).read_text())
            if record == "spec.json":
                data = {**data, **{k: [f for f in data[k] if f != "--cpu"]
                                   for k in ("train", "generate")}}
            elif name == "entmax_alpha":  # scored there, by a version without length ratios
                data.update(meteor=None, machine="an H100", commit="0123456789ab")
                data.pop("length_ratio", None)
            (row_dir / record).write_text(json.dumps(data))
    for checkpoint in (work / "tiny" / "entmax_alpha").glob("*.pt"):
        checkpoint.unlink()
    moved = tmp_path / "moved"
    compare.main([*TINY, "--rows", "softmax,entmax_alpha", "--out", str(moved),
                  "--work-dir", str(work)])
    assert "finished before, reused" in capsys.readouterr().out.split("[compare] 2/2")[1]
    filled = json.loads((moved / "comparison.json").read_text())["rows"]
    assert filled[1]["meteor"] == rows[1]["meteor"]  # the same translations, the same Meteor
    assert filled[1]["length_ratio"] == rows[1]["length_ratio"]
    table = (moved / "README.md").read_text()
    assert "- rows entmax_alpha trained and translated on: an H100" in table
    assert "- rows entmax_alpha trained at commit `0123456789ab`" in table
    assert "- rows softmax" not in table  # trained here, at this commit
    alpha_row = table.split("| entmax_alpha |")[1].split("\n")[0]
    assert alpha_row.endswith("| n/a | n/a |")
    assert alpha_row.index("enc-self") < alpha_row.index("dec-self") < alpha_row.index("cross")
    assert not (moved / "attention-maps.png").exists() and (moved / "alphas.png").exists()

    # A higher update cap trains a capped row on from its last checkpoint, curve kept.
    compare.main([*TINY[:-3], "20", "--validate-every", "6", "--rows", "softmax",
                  "--out", str(tmp_path / "longer"), "--work-dir", str(work)])
    longer = json.loads((tmp_path / "longer" / "comparison.json").read_text())["rows"][0]
    assert longer["updates"] == 20 and longer["stopped"] == "cap"
    assert longer["validation_curve"][:2] == rows[0]["validation_curve"]
    assert [u for u, _ in longer["validation_curve"]] == [6, 12, 18, 20]
    # A training interrupted at the higher cap (checkpoints, no row.json) resumes from its
    # checkpoint, even when --out records the row at the lower cap with the same model.
    recorded = tmp_path / "recorded"
    shutil.copytree(tmp_path / "again", recorded)
    for done in ("trained.json", "row.json"):
        (work / "tiny" / "softmax" / done).unlink()
    compare.main([*TINY[:-3], "26", "--validate-every", "6", "--rows", "softmax",
                  "--out", str(recorded), "--work-dir", str(work)])
    resumed = json.loads((recorded / "comparison.json").read_text())["rows"][0]
    assert resumed["validation_curve"][:4] == longer["validation_curve"]
    assert resumed["updates"] == 26
    log = (work / "tiny" / "softmax" / "train.log").read_text()
    assert log.count("done training in") == 3  # to 12, on to 20, resumed on to 26
    # Other flags for the model (here its seed) train the row afresh.
    compare.main([*TINY, "--seed", "2", "--rows", "softmax", "--out", str(tmp_path / "seed"),
                  "--work-dir", str(work)])
    reseeded = json.loads((tmp_path / "seed" / "comparison.json").read_text())["rows"][0]
    assert [u for u, _ in reseeded["validation_curve"]] == [6, 12]
    log = (work / "tiny" / "softmax" / "train.log").read_text()
    assert log.count("done training in") == 1


@pytest.mark.slow
def test_decode_with_decodes_every_row_with_one_normaliser_against_its_own(tmp_path, capsys):
    """``--decode-with softmax``: each row with a normaliser translated again with softmax
    at every site, paired with its own translations; kept in the work folder (a later run
    reuses it) and left out of a run without the flag."""
    from sparse_attn_plugin.evaluation import corpus_bleu, read_generate_output
    from sparse_attn_plugin.evaluation.significance import paired_bootstrap
    from sparse_attn_plugin.reading import read_lines

    out, work = tmp_path / "out", tmp_path / "work"
    argv = [*TINY, "--rows", "softmax,hard,kernel_rbf", "--work-dir", str(work),
            "--decode-with", "softmax"]
    compare.main([*argv, "--out", str(out)])
    softmax, hard, kernel = json.loads((out / "comparison.json").read_text())["rows"]
    assert "decoded_with" not in softmax and "decoded_with" not in kernel
    switched = work / "tiny" / "hard" / "generate-test.decoded-softmax.log"
    log = switched.read_text()
    assert ("attention normalisers: encoder_self softmax, decoder_self softmax, "
            "decoder_cross softmax") in log  # the overrides reached every site
    again, own = (read_generate_output(read_lines(path)) for path in
                  (switched, work / "tiny" / "hard" / "generate-test.log"))
    record = hard["decoded_with"]
    assert record["attention"] == "softmax"
    assert record["bleu"] == {"test": pytest.approx(corpus_bleu(again.hypotheses,
                                                                again.references).score)}
    assert record["vs_own"]["test"] == paired_bootstrap(again.hypotheses, own.hypotheses,
                                                        own.references).record()
    table = (out / "README.md").read_text()
    assert "| attention | BLEU test decoded with softmax (- own) |" in table
    cell = f"{record['bleu']['test']:.2f} ({record['vs_own']['test']['difference']:+.2f} ["
    assert f"| hard (decoder self + cross) | {cell}" in table
    assert "Not decoded so: RBF kernel smoother (no normaliser to switch)." in table

    # The same command again reuses the switched decoding; without the flag, none shown.
    made = switched.stat().st_mtime_ns
    compare.main([*argv, "--out", str(tmp_path / "again")])
    assert json.loads((tmp_path / "again" / "comparison.json").read_text())["rows"][1] == hard
    assert switched.stat().st_mtime_ns == made
    compare.main([*argv[:-2], "--out", str(tmp_path / "plain")])
    plain = json.loads((tmp_path / "plain" / "comparison.json").read_text())["rows"]
    assert not any("decoded_with" in row for row in plain)
    assert "decoded with" not in (tmp_path / "plain" / "README.md").read_text()
    # A checkpoint gone (a folder copied without them): the row is said to be left out.
    for checkpoint in (work / "tiny" / "hard").glob("*.pt"):
        checkpoint.unlink()
    compare.main([*argv[:-1], "entmax15", "--out", str(tmp_path / "gone")])
    table = (tmp_path / "gone" / "README.md").read_text()
    assert "Each row's best checkpoint decoded with entmax15" in table
    assert "Not decoded so: hard (decoder self + cross) (no checkpoint in the work folder)." \
        in table
    capsys.readouterr()

    # A normaliser that cannot sit at every site, or that the model cannot use: one line,
    # exit status 1. (What the LSTM cannot use is what its model refuses.)
    from sparse_attn_experiments.comparison.models import ARCHITECTURES
    from sparse_attn_plugin.models.sparse_lstm import LSTM_NAMES
    from sparse_attn_plugin.normalizers import NAMES

    assert ARCHITECTURES["lstm"].cannot_use == tuple(n for n in NAMES if n not in LSTM_NAMES)
    for model, name, usable in (("tiny", "csparsemax", "entmax_alpha, hard"),
                                ("lstm", "hard", "entmax_alpha")):
        refused = subprocess.run([sys.executable, "-m", "sparse_attn_experiments.compare",
                                  "--model", model, "--decode-with", name],
                                 capture_output=True, text=True, cwd=REPO)
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr == (f"sparse-attn-compare: error: unknown --decode-with {name!r} "
                                  f"for --model {model}; choose from softmax, topk, sparsemax, "
                                  f"entmax15, {usable}\n")


@pytest.mark.slow
def test_tune_lenpen_translates_every_row_at_its_best_penalty_on_valid(tmp_path):
    """``--tune-lenpen 0.5,2``: each row translates valid at both penalties and the test
    splits at the better one, paired with softmax's at its own; kept in the work folder (a
    later run reuses it), left out without the flag, and refused where not numbers."""
    from sparse_attn_plugin.evaluation import corpus_bleu, read_generate_output
    from sparse_attn_plugin.evaluation.significance import paired_bootstrap
    from sparse_attn_plugin.reading import read_lines

    out, work = tmp_path / "out", tmp_path / "work"
    argv = [*TINY, "--rows", "softmax,entmax15", "--work-dir", str(work),
            "--tune-lenpen", "0.5,2.0"]
    compare.main([*argv, "--out", str(out)])
    rows = json.loads((out / "comparison.json").read_text())["rows"]

    def output(row, split, penalty):
        log = work / "tiny" / row / f"generate-{split}.lenpen-{penalty}.log"
        assert f"'lenpen': {float(penalty)}" in log.read_text()  # fairseq decoded with it
        return read_generate_output(read_lines(log))

    for row in rows:
        record = row["tuned_lenpen"]
        assert record["grid"] == ["0.5", "2"]
        for penalty in record["grid"]:
            valid = output(row["attention"], "valid", penalty)
            assert record["valid"][penalty] == pytest.approx(
                corpus_bleu(valid.hypotheses, valid.references).score)
        assert record["lenpen"] == max(["0.5", "2"], key=lambda p: record["valid"][p])
        chosen = output(row["attention"], "test", record["lenpen"])
        test = corpus_bleu(chosen.hypotheses, chosen.references)
        assert record["bleu"] == {"test": pytest.approx(test.score)}
        assert record["length_ratio"] == {"test": pytest.approx(test.length_ratio)}
    softmax, entmax = (row["tuned_lenpen"] for row in rows)
    assert "vs_softmax" not in softmax
    ours, theirs = (output(name, "test", record["lenpen"])
                    for name, record in (("entmax15", entmax), ("softmax", softmax)))
    assert entmax["vs_softmax"] == {"test": paired_bootstrap(
        ours.hypotheses, theirs.hypotheses, theirs.references).record()}
    table = (out / "README.md").read_text()
    assert "(`--tune-lenpen`, from 0.5, 2;" in table
    assert "| attention | lenpen (valid BLEU) | BLEU test (hyp/ref); - softmax |" in table
    assert (f"| entmax15 | {entmax['lenpen']} ({entmax['valid'][entmax['lenpen']]:.2f}) | "
            f"{entmax['bleu']['test']:.2f} ({entmax['length_ratio']['test']:.3f}); "
            f"{entmax['vs_softmax']['test']['difference']:+.2f} [") in table

    # The same command again reuses the tuning; without the flag, none shown.
    log = work / "tiny" / "entmax15" / "generate-valid.lenpen-2.log"
    made = log.stat().st_mtime_ns
    compare.main([*argv, "--out", str(tmp_path / "again")])
    assert json.loads((tmp_path / "again" / "comparison.json").read_text())["rows"] == rows
    assert log.stat().st_mtime_ns == made
    compare.main([*argv[:-2], "--out", str(tmp_path / "plain")])
    plain = json.loads((tmp_path / "plain" / "comparison.json").read_text())["rows"]
    assert not any("tuned_lenpen" in row for row in plain)
    assert "--tune-lenpen" not in (tmp_path / "plain" / "README.md").read_text()
    # Another grid with a checkpoint gone (a folder copied without them): said to be left out.
    for checkpoint in (work / "tiny" / "entmax15").glob("*.pt"):
        checkpoint.unlink()
    compare.main([*argv[:-1], "1", "--out", str(tmp_path / "gone")])
    table = (tmp_path / "gone" / "README.md").read_text()
    assert "(`--tune-lenpen`, from 1;" in table
    assert "Not tuned: entmax15 (no checkpoint in the work folder)." in table

    for grid, why in (("1,x", "'x' is not a number"), ("1,1.0", "'1,1.0' repeats a penalty"),
                      ("", "'' is not a number"), ("1,inf", "'inf' is not a finite number")):
        refused = subprocess.run([sys.executable, "-m", "sparse_attn_experiments.compare",
                                  "--tune-lenpen", grid, "--out", str(tmp_path / "refused")],
                                 capture_output=True, text=True, cwd=REPO)
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr == ("sparse-attn-compare: error: --tune-lenpen takes "
                                  f"comma-separated numbers, e.g. 1,1.5,2: {why}\n")
    assert not (tmp_path / "refused").exists()


@pytest.mark.slow
def test_the_paper_model_with_flags_passed_on_to_fairseq(tmp_path):
    """``--model paper`` trains fairseq's transformer_iwslt_de_en with the IWSLT14 recipe,
    validating every epoch; ``--train-flags`` and ``--generate-flags`` reach every row's
    fairseq-train and fairseq-generate (here: checkpoints without the optimiser's state,
    2 batches an update; every translation begun with its reference's first word) and the
    report says so."""
    from argparse import Namespace

    import torch
    from fairseq.models.transformer import transformer_iwslt_de_en

    out, work = tmp_path / "out", tmp_path / "work"
    compare.main(["--model", "paper", "--rows", "softmax", "--train-size", "200",
                  "--eval-size", "8", "--max-updates", "1", "--out", str(out),
                  "--work-dir", str(work), "--train-flags",
                  "--no-save-optimizer-state --update-freq 2", "--generate-flags",
                  "--prefix-size 1"])
    folder = work / "paper" / "softmax"
    state = torch.load(folder / "checkpoint_best.pt", map_location="cpu", weights_only=False)
    model, fairseqs = state["cfg"]["model"], Namespace()
    transformer_iwslt_de_en(fairseqs)
    sizes = ("encoder_layers", "decoder_layers", "encoder_embed_dim", "decoder_embed_dim",
             "encoder_ffn_embed_dim", "decoder_ffn_embed_dim", "encoder_attention_heads",
             "decoder_attention_heads")
    assert {k: getattr(model, k) for k in sizes} == {k: getattr(fairseqs, k) for k in sizes}
    assert (model.encoder_layers, model.encoder_embed_dim, model.encoder_ffn_embed_dim) == (
        6, 512, 1024)
    assert state["model"]["decoder.layers.5.fc1.weight"].shape == (1024, 512)
    assert "decoder.layers.6.fc1.weight" not in state["model"]
    assert (model.dropout, model.share_decoder_input_output_embed) == (0.3, True)
    optimization = state["cfg"]["optimization"]
    assert (optimization["lr"], optimization["update_freq"]) == ([5e-4], [2])
    assert state["cfg"]["optimizer"]["weight_decay"] == 0.0001
    assert "last_optimizer_state" not in state  # --no-save-optimizer-state reached it

    row = json.loads((out / "comparison.json").read_text())["rows"][0]
    assert [u for u, _ in row["validation_curve"]] == [1]  # after the epoch, not every N
    assert "--stop-time-hours" not in row["spec"]["train"]  # no time budget
    assert row["spec"]["train"][-3:] == ["--no-save-optimizer-state", "--update-freq", "2"]
    log = (folder / "generate-test.log").read_text()
    assert "'prefix_size': 1" in log
    translated = read_generate_output(log.splitlines())
    assert len(translated.hypotheses) == 8
    assert [h.split()[0] for h in translated.hypotheses] == [
        r.split()[0] for r in translated.references]
    table = (out / "README.md").read_text()
    assert ("fairseq's transformer_iwslt_de_en (6+6 layers, 512-dim, 4 heads, 1024-dim "
            "feed-forward)") in table
    assert ("training stops after 5 validations without a better loss or 1 updates, "
            "whichever comes first; validation after every epoch; seed 1; beam 5; every "
            "fairseq-train also gets `--no-save-optimizer-state --update-freq 2`; every "
            "fairseq-generate also gets `--prefix-size 1`.") in table
    assert ("--train-flags '--no-save-optimizer-state --update-freq 2' --generate-flags "
            "'--prefix-size 1'") in json.loads(
                (out / "comparison.json").read_text())["command"]


@pytest.mark.slow
def test_flags_compare_sets_or_fairseq_refuses_are_refused_in_one_line(tmp_path):
    """``--train-flags``/``--generate-flags`` that would override the comparison's own
    settings, or that fairseq refuses, stop the command as typed before anything is
    written: one line, exit status 1."""
    import torch

    command = [str(REPO / ".venv" / "bin" / "sparse-attn-compare"), "--rows",
               "softmax,kernel_rbf", "--train-size", "200", "--eval-size", "8",
               "--max-updates", "1", "--out", str(tmp_path / "out"),
               "--work-dir", str(tmp_path / "work")]
    cases = [
        (["--model", "paper", "--train-flags", "--lr 1"],
         "--train-flags cannot set --lr: sparse-attn-compare sets it (part of --model paper)"),
        (["--train-flags=--max-update=3"], "--train-flags cannot set --max-update: "
         "sparse-attn-compare sets it (use --max-updates)"),
        (["--train-flags", "--decoder-cross-attn-fn sparsemax"], "--train-flags cannot set "
         "--decoder-cross-attn-fn: sparse-attn-compare sets it (use --rows)"),
        (["--generate-flags", "--beam=2"], "--generate-flags cannot set --beam: "
         "sparse-attn-compare sets it (part of every row's decoding)"),
        (["--generate-flags", "--lenpen 2", "--tune-lenpen", "1,2"], "--generate-flags "
         "cannot set --lenpen: sparse-attn-compare sets it (use --tune-lenpen)"),
        (["--train-flags", "--no-such-flag"],
         "--train-flags '--no-such-flag': fairseq-train does not know --no-such-flag"),
        (["--train-flags", "--clip-norm x"], "--train-flags '--clip-norm x': fairseq-train "
         "says: argument --clip-norm: invalid float value: 'x'"),
        (["--generate-flags", "'--unkpen"], "--generate-flags \"'--unkpen\": No closing "
         "quotation"),
        (["--train-flags", "--out", "x"], "argument --train-flags: expected one argument "
         "(see sparse-attn-compare --help)"),
        (["--train-flags", "--attn-impl cuda"], "--train-flags '--attn-impl cuda': "
         "fairseq-train says: --attn-impl: unknown value 'cuda'; choose from auto, torch, "
         "compiled, triton"),
    ]
    if not torch.cuda.is_available():  # fairseq-train fails with --fp16 on a CPU
        cases.append((["--train-flags", "--fp16"], "--train-flags '--fp16': fairseq-train "
                      "cannot train with --fp16 without a GPU, and this machine shows none "
                      "(torch.cuda.is_available() is False)"))
    for argv, said in cases:
        refused = subprocess.run([*command, *argv], capture_output=True, text=True,
                                 cwd=tmp_path, env=fairseq_env())
        assert (refused.returncode, refused.stdout, refused.stderr) == (
            1, "", f"sparse-attn-compare: error: {said}\n"), argv
        assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


def test_a_row_stops_when_its_validation_loss_stops_improving(tmp_path):
    compare.main(["--train-size", "200", "--eval-size", "30", "--max-updates", "400",
                  "--validate-every", "5", "--patience", "1", "--minutes-per-row", "60",
                  "--rows", "softmax", "--work-dir", str(tmp_path / "work")])
    out = tmp_path / "work" / "report"  # without --out: the work folder, not results/
    row = json.loads((out / "comparison.json").read_text())["rows"][0]
    losses = [loss for _, loss in row["validation_curve"]]
    assert row["stopped"] == "converged" and row["updates"] < 400
    assert losses[-1] >= losses[-2]  # patience 1: the first validation that did not improve


def test_a_prepared_folder_gives_its_test_splits_and_subwords(tmp_path):
    (tmp_path / "train.de-en.de.idx").touch()
    (tmp_path / "valid.de-en.de.idx").touch()
    with pytest.raises(CorpusError, match="no binarised test split"):
        open_corpus(tmp_path)
    for split in ("test", "test1", "test2"):
        (tmp_path / f"{split}.de-en.de.idx").touch()
    (tmp_path / "PREPARED.json").write_text(json.dumps({
        "settings": {"corpus": "multi30k_de_en", "subwords": "sentencepiece"},
        "test_sets": {"test": "test_2016_flickr", "test1": "test_2017_flickr"}}))
    corpus = open_corpus(tmp_path)
    assert (corpus.src, corpus.tgt, corpus.remove_bpe) == ("de", "en", "sentencepiece")
    assert corpus.tests == {"test": "test_2016_flickr", "test1": "test_2017_flickr",
                            "test2": "test2"}
    assert open_corpus(tmp_path, "subword_nmt").remove_bpe == "subword_nmt"
    (tmp_path / "train.en-de.en.idx").touch()
    with pytest.raises(CorpusError, match="expected one binarised training split"):
        open_corpus(tmp_path)


def test_why_training_stopped_is_read_from_fairseqs_own_words(tmp_path):
    from sparse_attn_experiments.pipeline import stop_reason, validation_curve

    log = tmp_path / "train.log"
    config = "INFO | fairseq_cli.train | {'optimization': {'stop_time_hours': 0.5}}\n"
    valid = ('2026-11-23 | INFO | valid | {"epoch": 1, "valid_loss": "%s", '
             '"valid_num_updates": "%d"}\n')
    done = "INFO | fairseq_cli.train | done training in 60.0 seconds\n"
    log.write_text(config + valid % ("5.5", 100) + "INFO | Stopping training due to "
                   "cumulative_training_time: 0.51 > stop_time_hours: 0.5\n" + done)
    assert stop_reason(log) == "time budget"
    log.write_text(log.read_text() + config + "INFO | Stopping training due to num_updates: "
                   "300 >= max_update: 300\n" + valid % ("4.25", 300) + done)
    assert stop_reason(log) == "cap"  # the resumed run's reason; the config's is no stop
    log.write_text(log.read_text() + config + "INFO | early stop since valid performance "
                   "hasn't improved for last 5 runs\n" + done)
    assert stop_reason(log) == "converged"
    assert validation_curve(log) == [(100, 5.5), (300, 4.25)]


def test_each_row_is_paired_with_softmax_on_the_same_sentences(tmp_path):
    from types import SimpleNamespace

    from sparse_attn_experiments.comparison.paired import KEY, pair_with_softmax
    from sparse_attn_experiments.comparison.report import paired_table
    from sparse_attn_experiments.comparison.translations import keep
    from sparse_attn_plugin.evaluation import corpus_bleu
    from sparse_attn_plugin.evaluation.significance import paired_bootstrap

    work, out, tests = tmp_path / "work", tmp_path / "out", {"test": "test_2016_flickr"}
    refs = [f"a man rides a bike number {i} ." for i in range(30)]
    hyps = {"softmax": [r.replace("bike", "horse") if i % 2 else r for i, r in enumerate(refs)],
            "sparsemax": [r.replace("man", "dog") if i % 3 else r for i, r in enumerate(refs)]}
    hyps["sparsemax"][4] = ""  # an empty translation keeps its line
    for name, lines in hyps.items():
        (work / name).mkdir(parents=True)
        (work / name / "generate-test.log").write_text("".join(  # fairseq's order: by length
            f"T-{i}\t{refs[i]}\nH-{i}\t-0.5\t{lines[i]}\n" for i in reversed(range(30))))

    def rows():
        return [{"attention": name, "bleu": {"test": corpus_bleu(hyps.get(name, refs),
                                                                  refs).score}}
                for name in ("softmax", "sparsemax", "hard")]

    paired = rows()
    pair_with_softmax(paired, work, out, tests)
    expected = paired_bootstrap(hyps["sparsemax"], hyps["softmax"], refs).record()
    assert paired[1][KEY] == {"test": expected}
    assert KEY not in paired[0] and KEY not in paired[2]  # hard: no translations here
    table = paired_table(paired, {r["attention"]: r["attention"] for r in paired},
                         SimpleNamespace(tests=tests))
    assert "| attention | BLEU test_2016_flickr - softmax |" in table
    assert (f"| sparsemax | {expected['difference']:+.2f} [{expected['low']:+.2f}, "
            f"{expected['high']:+.2f}], p {expected['p']:.3f} |") in table
    assert "| hard | n/a (translations not kept) |" in table

    # The report keeps the translations in test order; a row no longer compared goes.
    (out / "translations" / "topk").mkdir(parents=True)
    (out / "translations" / "notes.txt").write_text("a file that is no row's\n")
    assert keep(["softmax", "sparsemax", "hard"], work, out, tests) == ["softmax", "sparsemax"]
    for name, lines in hyps.items():
        assert (out / "translations" / name / "test_2016_flickr.txt").read_text() == (
            "".join(line + "\n" for line in lines))
    assert sorted(p.name for p in (out / "translations").iterdir()) == ["softmax", "sparsemax"]

    # Its work folder gone (a committed row on a fresh clone), a row is paired from the
    # translations the report kept, the references read from another row's log.
    shutil.rmtree(work / "sparsemax")
    again = rows()
    pair_with_softmax(again, work, out, tests)
    assert again[1][KEY] == {"test": expected}
    (out / "translations" / "sparsemax" / "test_2016_flickr.txt").write_text("one line\n")
    with pytest.raises(ValueError, match="sparsemax has 1 translations, softmax 30, for 30"):
        pair_with_softmax(rows(), work, out, tests)

    # Without translations a recorded pairing is kept while it matches the rows' BLEU.
    shutil.rmtree(out / "translations" / "sparsemax")
    recorded = rows()
    recorded[1][KEY] = {"test": expected}
    pair_with_softmax(recorded, work, out, tests)
    assert recorded[1][KEY] == {"test": expected}
    recorded[0]["bleu"]["test"] += 1  # softmax trained again since: the pairing is stale
    pair_with_softmax(recorded, work, out, tests)
    assert KEY not in recorded[1]
    assert paired_table(recorded, {r["attention"]: r["attention"] for r in recorded},
                        SimpleNamespace(tests={"test": "t"})) == ""

    # Two rows that translated different sentences are not paired.
    (work / "hard").mkdir()
    (work / "hard" / "generate-test.log").write_text("T-0\tanother sentence\nH-0\t-1\tx\n")
    with pytest.raises(ValueError, match="translate different sentences"):
        pair_with_softmax(rows(), work, out, tests)


def test_the_table_says_whether_a_stopped_row_was_still_learning():
    from sparse_attn_experiments.comparison.report import stopped_cell

    def row(stopped, losses):
        curve = [(100 * (i + 1), loss) for i, loss in enumerate(losses)]
        return {"stopped": stopped, "updates": curve[-1][0], "validation_curve": curve,
                "valid_loss": min(losses)}

    assert stopped_cell(row("time budget", [3.0, 2.0, 1.5])) == \
        "300 (time budget ended; valid loss still improving)"
    assert stopped_cell(row("cap", [3.0, 1.4, 1.5])) == \
        "300 (update cap reached; valid loss still improving)"
    assert stopped_cell(row("cap", [3.0, 1.4, 1.5, 1.6])) == "400 (update cap reached)"
    assert stopped_cell(row("converged", [3.0, 1.4, 1.5, 1.6])) == "400 (converged)"


def test_the_length_table_gives_each_rows_bleu_without_its_brevity_penalty():
    import math
    from types import SimpleNamespace

    from sacrebleu.metrics import BLEU

    from sparse_attn_experiments.comparison.report import length_table
    from sparse_attn_plugin.evaluation import corpus_bleu

    refs = [f"a man in a red shirt rides a bike number {i} ." for i in range(20)]
    hyps = {"softmax": refs, "entmax_alpha": [r.replace(" red shirt", "") for r in refs]}
    rows = [{"attention": name, "bleu": {"test": corpus_bleu(lines, refs).score},
             "length_ratio": {"test": corpus_bleu(lines, refs).length_ratio}}
            for name, lines in hyps.items()]
    rows.append({"attention": "sparsemax", "bleu": {"test": 30.0}})  # recorded before lengths
    table = length_table(rows, {r["attention"]: r["attention"] for r in rows},
                         SimpleNamespace(tests={"test": "test_2016_flickr"}))

    short = BLEU(tokenize="none", force=True).corpus_score(hyps["entmax_alpha"], [refs])
    precisions = 100 * math.exp(sum(math.log(p / 100) for p in short.precisions) / 4)
    assert short.bp < 1 and precisions > short.score
    assert "| attention | test_2016_flickr: hyp/ref; BLEU without BP |" in table
    assert f"| entmax_alpha | {short.sys_len / short.ref_len:.3f}; {precisions:.2f} |" in table
    assert "| softmax | 1.000; 100.00 |" in table and "sparsemax" not in table
    assert length_table(rows[2:], {"sparsemax": "sparsemax"},
                        SimpleNamespace(tests={"test": "t"})) == ""


def test_the_reading_gives_how_each_trailing_rows_loss_gap_moved():
    from sparse_attn_experiments.comparison.report import _gap_trends, loss_gaps

    def row(name, losses, every=100):
        return {"attention": name, "validation_curve": [[every * (i + 1), loss]
                                                         for i, loss in enumerate(losses)]}

    softmax = row("softmax", [5.0, 4.0, 3.5, 3.2])
    slow = row("sparsemax", [5.2, 4.6, 3.9, 3.4])
    close = row("topk", [5.0, 4.01, 3.5, 3.22])
    assert loss_gaps(row("hard", [5.5, 4.5], every=200), softmax) == [
        (200, pytest.approx(1.5)), (400, pytest.approx(1.3))]
    text = _gap_trends([softmax, slow, close])
    assert "sparsemax +0.60 at 200 updates, +0.20 at 400" in text
    assert "topk" not in text                      # within 0.05 of softmax at the end
    assert "only training to convergence says" in text
    assert "the last gap is what is left" in _gap_trends([softmax, slow], still_improving=False)
    assert _gap_trends([softmax, close]) == "" and _gap_trends([slow]) == ""


@pytest.mark.parametrize("probe_s,heard_at_end", [(0.0, False), (1e9, True)])
def test_training_tells_its_speed_once(synthetic_bin, tmp_path, monkeypatch, probe_s,
                                       heard_at_end):
    """``pipeline.train``'s ``on_speed``: once, at the first logging interval after the
    probe time (here at once), or at the end of a shorter run."""
    from sparse_attn_experiments import pipeline

    from helpers.models import TINY

    monkeypatch.setattr(pipeline, "SPEED_PROBE_S", probe_s)
    heard = []
    result = pipeline.train(synthetic_bin, tmp_path, ["--arch", "sparse_transformer", *TINY,
                                                      "--cpu", "--log-interval", "1",
                                                      "--max-tokens", "1024",
                                                      "--optimizer", "adam", "--lr", "1e-3"],
                            4, on_speed=lambda ups, wps: heard.append((ups, wps)))
    assert len(heard) == 1 and heard[0][0] > 0 and heard[0][1] > 0
    assert result.updates == 4
    # at the end: the rate of all the intervals after the first; at once: of the first two
    assert heard_at_end == (heard[0][1] == result.words_per_second)


def test_the_convergence_script_gives_its_usage_and_refuses_bad_input(tmp_path):
    script = REPO / "scripts" / "real_data_convergence.sh"

    def run(path, *argv):
        return subprocess.run(["bash", str(path), *argv], capture_output=True, text=True)

    usage = run(script, "--help")
    assert usage.returncode == 0 and "real_data_convergence.sh [MODEL [ROWS]]" in usage.stdout
    assert usage.stdout.rstrip().endswith("# ROWS default: softmax,sparsemax,hard,csparsemax,"
                                          "entmax_alpha,entmax15")  # the whole comment
    unknown = run(script, "big")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr == ("scripts/real_data_convergence.sh: error: unknown MODEL 'big' "
                              "(small or tiny)\n")
    elsewhere = tmp_path / "scripts" / script.name      # a checkout without data-bin/
    elsewhere.parent.mkdir()
    shutil.copy(script, elsewhere)
    unprepared = run(elsewhere, "tiny")
    assert unprepared.returncode == 1 and "prepare Multi30k first" in unprepared.stderr
    assert not (tmp_path / "results").exists()


def test_the_real_data_scripts_write_under_work_unless_told_to_publish(tmp_path):
    """scripts/real_data_*.sh as typed, in a copy of the checkout whose python stands in
    for ours and notes what it is asked (the runs themselves take hours): every report goes
    under .work/, into results/ only with PUBLISH=results."""
    checkout, asked = tmp_path / "checkout", tmp_path / "asked"
    (checkout / "scripts").mkdir(parents=True)
    for name in ("real_data_comparisons.sh", "real_data_convergence.sh"):
        shutil.copy(REPO / "scripts" / name, checkout / "scripts" / name)
    (checkout / "data-bin" / "multi30k_de_en").mkdir(parents=True)
    (checkout / "data-bin" / "multi30k_de_en" / "PREPARED.json").write_text("{}")
    realdata = tmp_path / "realdata"
    for corpus in ("multi30k/raw", "kftt_cicada30k"):
        (realdata / corpus).mkdir(parents=True)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {asked}\n')
    python.chmod(0o755)
    env = {k: v for k, v in fairseq_env().items() if k != "PUBLISH"} | {"PYTHON": str(python)}

    def reports(script, *argv, **more):
        asked.unlink(missing_ok=True)
        ran = subprocess.run(["bash", str(checkout / "scripts" / script), *argv],
                             env=env | more, capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr
        return [line.split("--out ")[1].split()[0] for line in asked.read_text().splitlines()
                if "sparse_attn_experiments.compare" in line]

    comparisons = ("real_data_comparisons.sh", "--realdata", str(realdata))
    assert reports(*comparisons) == [".work/multi30k", ".work/kftt30k"]
    assert reports(*comparisons, PUBLISH="results") == ["results/multi30k", "results/kftt30k"]
    assert reports("real_data_convergence.sh", "tiny") == [".work/multi30k_convergence_tiny"]
    assert reports("real_data_convergence.sh", PUBLISH="results") == [
        "results/multi30k_convergence"]
    assert not (checkout / "results").exists()

