"""fairseq's own commands on tiny models: the transformer's (``train``, ``generate``) and
the constrained LSTM's (``fairseq_train``, ``fairseq_generate``, with the flags of each
fertility strategy in ``STRATEGY``), as subprocesses; ``train(..., in_process=True)``
trains through fairseq's own parser and ``fairseq_cli.train.main`` in this process, for
tests whose subject is the trained model rather than the command."""

import subprocess

import pytest

from . import BIN, PLUGIN, fairseq_env
from .models import TINY


def run(cmd, check=True):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=fairseq_env())
    if check and proc.returncode != 0:
        pytest.fail(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def train(data, save_dir, *flags, updates=8, in_process=False):
    argv = [data, "--user-dir", PLUGIN, "--arch", "sparse_transformer", "--cpu", *TINY,
            "--optimizer", "adam", "--lr", "5e-3", "--max-tokens", "1000", "--max-update",
            updates, "--save-dir", save_dir, "--no-epoch-checkpoints", "--no-progress-bar",
            "--seed", "1", *flags]
    if in_process:
        train_here(argv)
    else:
        run([BIN / "fairseq-train", *argv])
    return save_dir / "checkpoint_last.pt"


def train_here(argv):
    """``fairseq-train ARGV`` in this process, without its interpreter start-up."""
    import logging

    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import train as fairseq_train

    logging.getLogger("fairseq").setLevel(logging.WARNING)  # its import set INFO on stdout
    args = options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), fairseq_train.main)


def generate(data, checkpoint, *flags):
    out = run([BIN / "fairseq-generate", data, "--user-dir", PLUGIN, "--path",
               checkpoint, "--beam", "3", "--max-len-b", "30", "--batch-size", "16", "--cpu",
               *flags])
    return [line for line in out.stdout.splitlines() if line.startswith("H-")]


LSTM = ["--arch", "sparse_lstm", "--encoder-embed-dim", "16", "--encoder-hidden-size", "16",
        "--task", "sparse_translation", "--attn-fn", "csparsemax", "--sink-token",
        "--exhaustion-c", "0.2"]
STRATEGY = {
    "constant": ["--fertility", "constant", "--fertility-value", "2"],
    "guided": ["--fertility", "guided"],
    "predicted": ["--fertility", "predicted", "--fertility-predictor-embed-dim", "8",
                  "--fertility-predictor-hidden-size", "8",
                  "--criterion", "label_smoothed_cross_entropy_with_fertility"],
}


def fairseq_train(data, save_dir, *flags, check=True, updates=6):
    return run([BIN / "fairseq-train", data, "--user-dir", PLUGIN, "--cpu", *LSTM, *flags,
                "--optimizer", "adam", "--lr", "5e-3", "--max-tokens", "1000",
                "--max-update", str(updates), "--save-dir", save_dir, "--no-epoch-checkpoints",
                "--no-progress-bar", "--seed", "1"], check=check)


def fairseq_generate(data, checkpoint, *flags):
    out = run([BIN / "fairseq-generate", data, "--user-dir", PLUGIN, "--path", checkpoint,
               "--task", "sparse_translation", "--beam", "3", "--max-len-b", "20",
               "--batch-size", "16", "--required-batch-size-multiple", "1", "--cpu", *flags])
    return {line.split("\t")[0]: line.split("\t")[1:] for line in out.stdout.splitlines()
            if line.startswith("H-")}
