"""``--criterion entmax_loss`` through fairseq's own commands on the synthetic corpus:
fairseq-train as typed, then fairseq-generate with no extra flag decodes with the
checkpoint's 1.5-entmax (finite scores; softmax if overridden); the output layer learns
about as well as with cross-entropy in the same updates; bad flags are one line."""

import json
import math
import subprocess
import sys

import pytest
import torch
from fairseq import checkpoint_utils

from helpers import BIN, PLUGIN, REPO, fairseq_env
from helpers.fairseq_runs import ROUNDING, gap, run, train, translations
from helpers.models import batch

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.xdist_group("entmax_loss_cli"), pytest.mark.slow]

UPDATES = 300
ENTMAX = ["--criterion", "entmax_loss", "--loss-alpha", "1.5"]


@pytest.fixture(scope="module")
def entmax_checkpoint(synthetic_bin, tmp_path_factory):
    """A tiny transformer trained by ``fairseq-train ... --criterion entmax_loss
    --loss-alpha 1.5`` (the console script)."""
    return train(synthetic_bin, tmp_path_factory.mktemp("entmax"), *ENTMAX, updates=UPDATES)


def teacher_forced_accuracy(data, checkpoint) -> float:
    """How often the checkpoint's most probable next token is the reference's, over the
    test set's target tokens."""
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    model = models[0].eval()
    sample = batch(task, size=40)
    with torch.no_grad():
        lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
    real = sample["target"].ne(task.target_dictionary.pad())
    return (lprobs.argmax(-1) == sample["target"])[real].float().mean().item()


def test_generate_decodes_with_the_checkpoints_entmax(synthetic_bin, entmax_checkpoint):
    decode = translations(synthetic_bin, entmax_checkpoint)
    assert len(decode) == 40 and all(text for text, _, _ in decode.values())
    for _, score, positional in decode.values():
        assert math.isfinite(score) and all(math.isfinite(p) for p in positional)
    softmax = translations(synthetic_bin, entmax_checkpoint, "--model-overrides",
                           "{'criterion': 'cross_entropy'}", in_process=True)
    assert gap(decode, softmax) > ROUNDING, "the entmax checkpoint decoded with softmax"


def test_the_output_learns_as_well_as_with_cross_entropy(synthetic_bin, entmax_checkpoint,
                                                         tmp_path):
    """The same model, data and updates trained with cross-entropy: next-token accuracy
    (teacher forced, test set) at least as good within 3 points, both far above chance."""
    softmax = train(synthetic_bin, tmp_path, updates=UPDATES, in_process=True)
    entmax_accuracy = teacher_forced_accuracy(synthetic_bin, entmax_checkpoint)
    softmax_accuracy = teacher_forced_accuracy(synthetic_bin, softmax)
    assert softmax_accuracy > 0.15
    assert entmax_accuracy >= softmax_accuracy - 0.03, (entmax_accuracy, softmax_accuracy)


@pytest.mark.parametrize("value", ["2.5", "abc"])
def test_bad_loss_alpha_is_one_line(synthetic_bin, tmp_path, value):
    proc = run([BIN / "fairseq-train", synthetic_bin, "--user-dir", PLUGIN, "--arch",
                "sparse_transformer", "--cpu", "--max-tokens", "500", "--save-dir", tmp_path,
                "--criterion", "entmax_loss", "--loss-alpha", value], check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: --loss-alpha must be a number in (1, 2] (2 sparsemax, 1.5 1.5-entmax), "
        f"got {value!r}")
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir()), "nothing may be written"


def test_a_model_that_cannot_decode_with_entmax_is_refused_before_training(synthetic_bin,
                                                                         tmp_path):
    """Issue 55: --arch transformer was refused at the first step, after fairseq wrote
    crash.pt; now before training, and the --save-dir it made is gone again."""
    save_dir = tmp_path / "new"
    proc = run([BIN / "fairseq-train", synthetic_bin, "--user-dir", PLUGIN, "--arch",
                "transformer", "--cpu", "--max-tokens", "500", "--save-dir", save_dir,
                *ENTMAX], check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --criterion entmax_loss needs a model that decodes with entmax: --arch "
        "sparse_transformer*, sparse_lstm* or kernel_transformer*, not transformer")
    assert not save_dir.exists()


def test_the_output_layer_benchmark_times_the_checkpoints_own_logits(
        synthetic_bin, entmax_checkpoint, tmp_path):
    """benchmarks/bench_output_layer.py --checkpoint, as typed: the losses on the model's
    teacher-forced output and log 1.5-entmax on every step of its beam search, each
    against cross-entropy (log_softmax) in the same rounds, with the supports said."""
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_output_layer.py", "--out", str(tmp_path),
         "--shapes", "64x1100", "--threads", "1", "--repeats", "2",
         "--checkpoint", str(entmax_checkpoint), "--data", str(synthetic_bin)],
        cwd=REPO, env=fairseq_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "output_layer.json").read_text())["results"]["1"]
    forced = next(rows for name, rows in results.items() if "teacher-forced" in name)
    assert forced["cross_entropy"]["median"] == 1.0 and forced["entmax15_loss"]["median"] > 0
    steps = next(rows for name, rows in results.items() if "beam search" in name)
    assert steps["log entmax1.5 step"]["mean_support"] >= 1
    md = (tmp_path / "output_layer.md").read_text()
    assert f"The checkpoint: {UPDATES} updates of training with --criterion entmax_loss " \
           "--loss-alpha 1.5; the supports of its teacher-forced output:" in md
