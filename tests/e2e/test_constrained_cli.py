"""Constrained attention through fairseq's own commands: fairseq's train and generate
with each fertility strategy (the GUIDED table from the session's aligner), with and
without the coverage penalty, the two-stage predictor, a prepared corpus through the
console scripts as a user types them, and one-line errors for bad fertility inputs."""

import shutil

import pytest
import torch

from sparse_attn_plugin.evaluation.fertilities import (
    aligner_fertilities,
    guided_fertilities,
    guided_text,
)

from helpers import BIN, PLUGIN
from helpers.fairseq_runs import LSTM, STRATEGY, fairseq_generate, fairseq_train, run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

@pytest.fixture(scope="module")
def guided_table(synthetic_bin, aligned_synthetic, tmp_path_factory):
    """The GUIDED table the session's aligner gives the synthetic training text (as
    ``sparse-attn-align fertility --out-guided`` writes it)."""
    raw = synthetic_bin.parent / "raw"
    src, tgt = ((raw / name).read_text().splitlines() for name in ("train.src", "train.tgt"))
    table = guided_fertilities(src, aligner_fertilities(aligned_synthetic.aligner, src, tgt))
    path = tmp_path_factory.mktemp("aligner") / "guided.tsv"
    path.write_text(guided_text(table))
    return path


@pytest.mark.parametrize("strategy", list(STRATEGY))
def test_train_then_generate_with_and_without_coverage_penalty(
        synthetic_bin, guided_table, tmp_path, strategy):
    """fairseq's train and generate in process (the commands themselves: below)."""
    table = tmp_path / "guided.tsv"
    shutil.copy(guided_table, table)
    flags = STRATEGY[strategy] + (["--fertility-table", table] if strategy == "guided" else [])
    log = fairseq_train(synthetic_bin, tmp_path, *flags, in_process=True).stdout
    checkpoint = tmp_path / "checkpoint_last.pt"
    table.unlink()  # a GUIDED model decodes with the table its checkpoint holds
    plain = fairseq_generate(synthetic_bin, checkpoint, in_process=True)
    penalised = fairseq_generate(synthetic_bin, checkpoint, "--coverage-penalty-beta", "0.4",
                                 "--lenpen", "0.6", in_process=True)
    assert len(plain) == len(penalised) == 40
    assert any(plain[k][0] != penalised[k][0] for k in plain), "the penalty changed no score"
    if strategy == "predicted":  # the criterion trained the predictor in the same run
        assert "fert_loss" in log and "fert_acc" in log


def parameters(checkpoint):
    return torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]


def test_predictor_trained_on_its_own_then_with_the_translation_model(synthetic_bin, tmp_path):
    """Stage 1 (--fertility-loss-only) trains the tagger alone; stage 2 continues from its
    checkpoint with the joint criterion, and the result decodes."""
    for updates in (3, 6):
        fairseq_train(synthetic_bin, tmp_path / f"tagger{updates}", *STRATEGY["predicted"],
                      "--fertility-loss-only", updates=updates, in_process=True)
    short, long = (parameters(tmp_path / f"tagger{n}" / "checkpoint_last.pt") for n in (3, 6))
    tagger = [k for k in long if ".fertility.predictor." in k]
    assert tagger and any(not torch.equal(short[k], long[k]) for k in tagger)
    assert all(torch.equal(short[k], long[k]) for k in long if k not in tagger)  # untouched
    log = fairseq_train(synthetic_bin, tmp_path / "joint", *STRATEGY["predicted"],
                        "--restore-file", tmp_path / "tagger6" / "checkpoint_last.pt",
                        "--reset-optimizer", "--reset-dataloader", "--reset-meters",
                        "--reset-lr-scheduler", updates=12, in_process=True).stdout
    assert "fert_loss" in log
    joint = parameters(tmp_path / "joint" / "checkpoint_last.pt")
    assert any(not torch.equal(joint[k], long[k]) for k in long if k not in tagger)
    assert len(fairseq_generate(synthetic_bin, tmp_path / "joint" / "checkpoint_last.pt",
                                in_process=True)) == 40


def one_line_error(proc):
    assert proc.returncode != 0
    return proc.stderr.strip().splitlines()[-1]


def test_fertility_file_that_does_not_match_the_source_is_named(synthetic_bin, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(synthetic_bin, data)
    fert = data / "valid.src-tgt.fert"
    lines = fert.read_text().splitlines()
    lines[6] += " 1"
    fert.write_text("\n".join(lines) + "\n")
    proc = fairseq_train(data, tmp_path / "ckpt", *STRATEGY["predicted"], check=False)
    assert "valid.src-tgt.fert:7:" in one_line_error(proc)


def test_guided_fertility_needs_its_table(synthetic_bin, tmp_path):
    proc = fairseq_train(synthetic_bin, tmp_path, "--fertility", "guided", check=False)
    assert "--fertility guided needs --fertility-table" in one_line_error(proc)
    proc = fairseq_train(synthetic_bin, tmp_path, "--fertility", "guided", "--fertility-table",
                         tmp_path / "missing.tsv", check=False)
    assert "missing.tsv does not exist" in one_line_error(proc)


def test_constrained_attention_without_the_sink_stops_fairseq_train_with_one_line(
        synthetic_bin, tmp_path):
    no_sink = [flag for flag in LSTM if flag != "--sink-token"]
    proc = run([BIN / "fairseq-train", synthetic_bin, "--user-dir", PLUGIN, "--cpu", *no_sink,
                "--optimizer", "adam", "--lr", "5e-3", "--max-tokens", "1000", "--max-update",
                "1", "--save-dir", tmp_path], check=False)
    assert proc.returncode == 1
    assert one_line_error(proc) == (
        "error: csparsemax attention needs --sink-token (as in the paper): without it the "
        "weights sum to less than 1 once the fertilities are spent; pass "
        "--attn-rows-may-sum-below-one to run without the sink anyway")


def test_a_prepared_corpus_trains_a_constrained_model_with_no_manual_step(tmp_path):
    """sparse_attn_data --fertility output is what --task sparse_translation reads: the predictor
    trains on the aligner's fertilities and the model decodes (KFTT's fixture archive)."""
    from sparse_attn_data import kftt_ja_en, recipe

    from helpers import archives

    archives.kftt_archive(tmp_path / "raw")
    data = recipe.main(kftt_ja_en.RECIPE, [
        "--raw-dir", tmp_path / "raw", "--dest-dir", tmp_path / "data-bin", "--work-dir",
        tmp_path / "work", "--bpe-merges", "40", "--no-checksums", "--fertility"])
    log = run([BIN / "fairseq-train", data, "--user-dir", PLUGIN, "--cpu", *LSTM,
               *STRATEGY["predicted"], "--optimizer", "adam", "--lr", "5e-3",
               "--max-tokens", "1000", "--max-update", "4", "--save-dir", tmp_path / "ckpt",
               "--required-batch-size-multiple", "1",  # the fixture has 5 valid pairs
               "--no-epoch-checkpoints", "--no-progress-bar", "--seed", "1"]).stdout
    assert "fert_loss" in log and f"fertilities of 40 train sentences from {data}" in log
    hypotheses = fairseq_generate(data, tmp_path / "ckpt" / "checkpoint_last.pt",
                                  "--remove-bpe")
    assert len(hypotheses) == 7  # the fixture's test set
