"""sparse-attn-analyze on checkpoints fairseq-train wrote: tables that parse and agree
with the model, PNG figures, and one clear line for input it cannot use."""

import csv

import pytest
import torch

from sparse_attn_plugin.analysis import cli
from sparse_attn_plugin.analysis.teacher_forced import sentence_attention
from sparse_attn_plugin.checkpoints import load_model
from sparse_attn_plugin.normalizers import EntmaxAlpha

from helpers.fairseq_runs import STRATEGY, fairseq_train, train

PNG = b"\x89PNG\r\n\x1a\n"


def one_error_line(capsys) -> str:
    """The one ``error:`` line on stderr (fairseq's log lines around it aside)."""
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1, errors
    return errors[0]


def test_heads_table_has_every_layer_site_and_head(alpha_run, synthetic_bin, tmp_path, capsys):
    cli.main(["heads", str(alpha_run / "checkpoint_last.pt"), "--data", str(synthetic_bin),
              "--out", str(tmp_path), "--name", "run"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-alphas.png", "run-heads.csv",
                                                          "run-heads.md"]
    assert (tmp_path / "run-alphas.png").read_bytes().startswith(PNG)
    rows = list(csv.DictReader((tmp_path / "run-heads.csv").open()))
    assert len(rows) == 3 * 2 * 4                                  # sites x layers x heads
    encoder = [r for r in rows if r["site"] == "encoder_self"]
    assert all(r["alpha"] == "" for r in encoder)                  # sparsemax: no alpha
    assert any(float(r["zero_fraction"]) > 0 for r in encoder)     # sparsemax has zeros
    state = torch.load(alpha_run / "checkpoint_last.pt", weights_only=False)["model"]
    logit = state["decoder.layers.1.encoder_attn.normalizer.alpha_logit"]
    cross = [float(r["alpha"]) for r in rows if (r["site"], r["layer"]) == ("decoder_cross", "1")]
    assert cross == pytest.approx(EntmaxAlpha.alpha_of(logit).tolist(), abs=1e-6)
    for r in rows:
        assert 0 <= float(r["zero_fraction"]) <= 1 and float(r["entropy"]) >= 0
        assert 0 <= float(r["head_diversity"]) <= torch.log(torch.tensor(4.0)) + 1e-6
    assert "| decoder_cross | 1 |" in (tmp_path / "run-heads.md").read_text()
    assert str(tmp_path / "run-heads.csv") in capsys.readouterr().out


def test_trajectory_follows_alpha_over_the_saved_checkpoints(alpha_run, tmp_path):
    cli.main(["trajectory", str(alpha_run), "--out", str(tmp_path)])
    name = alpha_run.name
    assert (tmp_path / f"{name}-alpha-trajectory.png").read_bytes().startswith(PNG)
    rows = list(csv.DictReader((tmp_path / f"{name}-alpha-trajectory.csv").open()))
    assert sorted({int(r["updates"]) for r in rows}) == [1, 2, 3]
    assert {r["site"] for r in rows} == {"decoder_self", "decoder_cross"}
    assert len(rows) == 3 * 2 * 2 * 4                        # steps x sites x layers x heads
    head = [float(r["alpha"]) for r in rows if (r["site"], r["layer"], r["head"])
            == ("decoder_cross", "0", "0")]
    assert len(set(head)) == 3                                # alpha is learned: it moves
    first = [float(r["alpha"]) for r in rows if (r["updates"], r["site"], r["layer"])
             == ("1", "decoder_cross", "0")]
    assert len(set(first)) == 4    # started apart: one Adam step moves all heads by about lr


def test_maps_put_two_models_side_by_side(alpha_run, synthetic_bin, tmp_path):
    cli.main(["maps", str(alpha_run / "checkpoint_1_1.pt"), str(alpha_run / "checkpoint_1_3.pt"),
              "--data", str(synthetic_bin), "--sentence", "3", "--labels", "early", "late",
              "--out", str(tmp_path)])
    assert (tmp_path / "early-vs-late-maps.png").read_bytes().startswith(PNG)


def test_one_sentence_attention_is_a_distribution_per_query(alpha_run, synthetic_bin):
    model, task = load_model(alpha_run / "checkpoint_last.pt", synthetic_bin)
    weights, queries, keys, layer = sentence_attention(model, task, "valid", 0,
                                                           "encoder_self", -1, "1")
    assert weights.shape == (len(queries), len(keys)) and queries == keys and layer == 1
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(queries)))


def test_an_lstm_has_one_cross_attention_head_read_step_by_step(synthetic_bin, tmp_path):
    """sparse_lstm with constrained sparsemax and the sink (Malaviya et al. 2018)."""
    fairseq_train(synthetic_bin, tmp_path / "lstm", *STRATEGY["constant"], updates=2)
    checkpoint = tmp_path / "lstm" / "checkpoint_last.pt"
    cli.main(["heads", str(checkpoint), "--data", str(synthetic_bin), "--out", str(tmp_path),
              "--name", "lstm"])
    rows = list(csv.DictReader((tmp_path / "lstm-heads.csv").open()))
    assert [(r["site"], r["layer"], r["head"], r["alpha"]) for r in rows] == [
        ("decoder_cross", "0", "0", "")]
    assert 0 < float(rows[0]["zero_fraction"]) < 1
    model, task = load_model(checkpoint, synthetic_bin)
    weights, queries, keys, layer = sentence_attention(model, task, "valid", 0,
                                                           "decoder_cross", -1, "mean")
    assert weights.shape == (len(queries), len(keys)) and keys[-1] == "<sink>" and layer == 0
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(queries)))
    # a decoder row is named by the token it predicts: the reference, ending in </s>
    reference = task.dataset("valid")[0]["target"]
    assert queries == [task.target_dictionary[t] for t in reference.tolist()]
    assert queries[-1] == "</s>" and "</s>" not in queries[:-1]


@pytest.mark.parametrize("argv,message", [
    (["heads", "missing.pt", "--data", "."], "missing.pt: no such checkpoint"),
    (["maps", "{ckpt}", "{ckpt}", "--data", "{data}", "--sentence", "999"],
     "--sentence 999: the valid split has 40 sentences"),
    (["maps", "{ckpt}", "{ckpt}", "--data", "{data}", "--sentence", "0", "--layer", "5"],
     "--layer 5: decoder_cross has layers 0-1"),
    (["maps", "{ckpt}", "{ckpt}", "--data", "{data}", "--sentence", "0", "--head", "9"],
     "--head 9: 'mean' or a head 0-3"),
    (["heads", "{ckpt}", "--data", "{data}", "--subset", "dev"], "no dev split"),
    (["trajectory", "{empty}"], "no epoch or update checkpoints in this folder"),
])
def test_bad_input_is_one_line(alpha_run, synthetic_bin, tmp_path, capsys, argv, message):
    (tmp_path / "empty").mkdir()
    filled = [a.format(ckpt=alpha_run / "checkpoint_last.pt", data=synthetic_bin,
                       empty=tmp_path / "empty") for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*filled, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 1
    assert message in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def non_plugin_checkpoint(alpha_run, path):
    """alpha_run's checkpoint as fairseq's own transformer (no attention normalisers)."""
    state = torch.load(alpha_run / "checkpoint_last.pt", weights_only=False)
    state["cfg"]["model"].arch = state["cfg"]["model"]._name = "transformer"
    state["model"] = {k: v for k, v in state["model"].items() if ".normalizer." not in k}
    torch.save(state, path)


def written(path, data: bytes):
    path.write_bytes(data)
    return path


def truncated(path) -> bytes:
    data = path.read_bytes()
    return data[:len(data) // 2]


def saved(path, obj):
    torch.save(obj, path)
    return path


@pytest.mark.parametrize("command", ["heads", "trajectory"])
@pytest.mark.parametrize("make,message", [
    (lambda run, bin_, d: bin_ / "dict.src.txt", "dict.src.txt: not a fairseq checkpoint"),
    (lambda run, bin_, d: bin_ / "train.src-tgt.src.bin", "bin: not a fairseq checkpoint"),
    (lambda run, bin_, d: written(d / "empty.pt", b""), "empty.pt: not a fairseq checkpoint"),
    (lambda run, bin_, d: written(d / "truncated.pt", truncated(run / "checkpoint_last.pt")),
     "truncated.pt: not a fairseq checkpoint"),
    (lambda run, bin_, d: saved(d / "tensors.pt", {"weights": torch.ones(2)}),
     "tensors.pt: not a fairseq checkpoint"),
])
def test_a_file_that_is_not_a_checkpoint_is_one_line(alpha_run, synthetic_bin, tmp_path, capsys,
                                                     command, make, message):
    path = make(alpha_run, synthetic_bin, tmp_path)
    argv = [command, str(path)] + (["--data", str(synthetic_bin)] if command == "heads" else [])
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 1
    assert message in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv,message", [
    (["heads", "{data}", "--data", "{data}"], "bin: a folder, not a checkpoint file"),
    (["heads", "{transformer}", "--data", "{data}"],
     "transformer.pt: the model has no attention normalisers"),
    (["heads", "{ckpt}", "--data", "{empty}"], "empty: not a binarised corpus"),
    (["heads", "{ckpt}", "--data", "{other}"], "cannot build its model on"),
])
def test_a_checkpoint_the_analysis_cannot_use_is_one_line(alpha_run, synthetic_bin, tmp_path,
                                                          capsys, argv, message):
    from sparse_attn_data.synthetic import binarize, write_corpus

    (tmp_path / "empty").mkdir()
    other, transformer = tmp_path / "other", tmp_path / "transformer.pt"
    if "{other}" in argv:  # a corpus with other dictionaries
        write_corpus(tmp_path / "raw", train=20, valid=5, test=5, src_vocab=20, tgt_vocab=20)
        binarize(tmp_path / "raw", other)
    if "{transformer}" in argv:
        non_plugin_checkpoint(alpha_run, transformer)
    filled = [a.format(data=synthetic_bin, ckpt=alpha_run / "checkpoint_last.pt", other=other,
                       empty=tmp_path / "empty", transformer=transformer) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*filled, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 1
    assert message in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_trajectory_of_a_model_without_learned_alpha_says_so(synthetic_bin, tmp_path, capsys):
    checkpoint = train(synthetic_bin, tmp_path / "softmax", "--attn-fn", "softmax", updates=1,
                       in_process=True)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["trajectory", str(checkpoint), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 1
    assert "no learned alphas (train with --attn-fn entmax_alpha" in one_error_line(capsys)
