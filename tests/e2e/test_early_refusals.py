"""fairseq-train refuses the plugin's bad flags as typed, before it creates ``--save-dir``
or trains a step: one line on stderr, exit status 1, no folder, no ``crash.pt`` (issue
44, findings 10 and 12: ``--fertility-value nan`` trained and then crashed; the fertility
criterion without a predictor was refused at the first step; an unknown ``--attn-fn``
printed 185 lines of usage and exited 2; a refusal left an empty ``--save-dir``)."""

import pytest

from helpers import BIN, PLUGIN
from helpers.fairseq_runs import run

SMALL = ["--encoder-embed-dim", "16", "--encoder-hidden-size", "16"]
CONSTRAINED = ["--arch", "sparse_lstm", *SMALL, "--task", "sparse_translation",
               "--attn-fn", "csparsemax", "--sink-token"]
CRITERION = "label_smoothed_cross_entropy_with_fertility"
NORMALISERS = "softmax, topk, sparsemax, entmax15, entmax_alpha"


@pytest.mark.parametrize("flags,message", [
    ([*CONSTRAINED, "--fertility-value", "nan"],
     "--fertility-value must be a finite number, got nan"),
    ([*CONSTRAINED, "--exhaustion-c", "inf"], "--exhaustion-c must be a finite number, got inf"),
    ([*CONSTRAINED, "--criterion", CRITERION],
     f"--criterion {CRITERION} trains the fertility predictor of csoftmax or csparsemax "
     "cross-attention with --fertility predicted; this model has csparsemax cross-attention "
     "and --fertility constant"),
    (["--arch", "sparse_transformer", "--fertility", "predicted", "--criterion", CRITERION],
     f"--criterion {CRITERION} trains the fertility predictor of csoftmax or csparsemax "
     "cross-attention with --fertility predicted; this model has softmax cross-attention "
     "and --fertility predicted"),
    ([*CONSTRAINED, "--fertility", "predicted", "--criterion", CRITERION, "--task",
      "translation"], f"--criterion {CRITERION} trains on the per-token fertilities that "
                      "--task sparse_translation batches; this run has --task translation"),
    (["--arch", "sparse_transformer", "--attn-fn", "nope"],
     f"--attn-fn: unknown attention normaliser 'nope'; choose from {NORMALISERS}, hard, "
     "csoftmax, csparsemax"),
    (["--arch", "sparse_lstm", "--attn-fn", "hard"],
     f"--attn-fn: unknown attention normaliser 'hard'; choose from {NORMALISERS}, csoftmax, "
     "csparsemax"),
    (["--arch", "kernel_transformer", "--kernel", "gauss"],
     "--kernel: unknown kernel 'gauss'; choose from linear, polynomial, exponential, rbf"),
    ([*CONSTRAINED[:-1]], "csparsemax attention needs --sink-token (as in the paper)"),
])
def test_bad_flags_are_refused_before_save_dir_is_created(synthetic_bin, tmp_path, flags,
                                                          message):
    save_dir = tmp_path / "checkpoints"
    proc = run([BIN / "fairseq-train", synthetic_bin, "--user-dir", PLUGIN, "--cpu",
                "--optimizer", "adam", "--lr", "5e-3", "--max-tokens", "1000", "--max-update",
                "1", "--save-dir", save_dir, *flags], check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert len(proc.stderr.splitlines()) == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"error: {message}"), proc.stderr
    assert not save_dir.exists(), "the refused run created --save-dir"
