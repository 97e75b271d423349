"""fairseq's own commands on tiny models: the transformer's (``train``, ``generate``) and
the constrained LSTM's (``fairseq_train``, ``fairseq_generate``, with the flags of each
fertility strategy in ``STRATEGY``).

Each runs as a subprocess through the console script, as a user types it, or with
``in_process=True`` through fairseq's own parser and ``fairseq_cli.{train,generate}.main``
in the test process: the same code without an interpreter start-up (torch and fairseq
imported again, about 4 s), for tests whose subject is the model or its decoding rather
than the command line."""

import io
import logging
import subprocess
from contextlib import contextmanager, redirect_stdout
from types import SimpleNamespace

import pytest

from . import BIN, PLUGIN, fairseq_env
from .models import TINY


def _device(cpu):
    """``--cpu``, or nothing: fairseq then computes on a CUDA device where one is visible
    (the GPU tier, tests/gpu)."""
    return ["--cpu"] if cpu else []


def run(cmd, check=True):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=fairseq_env())
    if check and proc.returncode != 0:
        pytest.fail(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def train(data, save_dir, *flags, updates=8, in_process=False, arch="sparse_transformer",
          cpu=True):
    argv = [data, "--user-dir", PLUGIN, "--arch", arch, *_device(cpu), *TINY,
            "--optimizer", "adam", "--lr", "5e-3", "--max-tokens", "1000", "--max-update",
            updates, "--save-dir", save_dir, "--no-epoch-checkpoints", "--no-progress-bar",
            "--seed", "1", *flags]
    fairseq("fairseq-train", argv, in_process)
    return save_dir / "checkpoint_last.pt"


def generate(data, checkpoint, *flags, in_process=False, cpu=True):
    return [line for line in _generate(data, checkpoint, flags, in_process, cpu).splitlines()
            if line.startswith("H-")]


def translations(data, checkpoint, *flags, in_process=False, cpu=True):
    """What :func:`generate` decodes, with its scores: see :func:`decoded`."""
    return decoded(_generate(data, checkpoint, flags, in_process, cpu))


def _generate(data, checkpoint, flags, in_process, cpu):
    return fairseq("fairseq-generate", [
        data, "--user-dir", PLUGIN, "--path", checkpoint, "--beam", "3", "--max-len-b", "30",
        "--batch-size", "16", *_device(cpu), *flags], in_process).stdout


def decoded(stdout):
    """``{sentence id: (hypothesis, score, positional scores)}`` from fairseq-generate's
    ``H-`` and ``P-`` lines (printed in batch order)."""
    fields = {kind: {int(line.split("\t")[0][2:]): line.split("\t")[1:]
                     for line in stdout.splitlines() if line.startswith(f"{kind}-")}
              for kind in ("H", "P")}
    assert fields["H"].keys() == fields["P"].keys(), "an H- line without its P- line"
    return {i: (text, float(score), tuple(map(float, fields["P"][i][0].split())))
            for i, (score, text) in sorted(fields["H"].items())}


#: The largest :func:`gap` between decodes that are the same to rounding: ``P-`` lines
#: print 4 decimals, so a difference of 1e-6 can show as 1e-4.
ROUNDING = 2e-4


def gap(one, other):
    """How far apart two :func:`decoded` decodes of the same sentences are: infinite if a
    hypothesis differs, else the largest difference of a sentence's score or of one of
    its positional scores. The same decode twice gives 0. The scores catch a switched
    attention where the hypotheses agree: on the tests' tiny models a switch of
    normaliser or kernel moved some score of a shared hypothesis by 0.03 or more."""
    assert one.keys() == other.keys(), "decodes of different sentences"
    if any(one[i][0] != other[i][0] for i in one):
        return float("inf")
    return max(max(abs(a - b) for a, b in zip((one[i][1], *one[i][2]),
                                              (other[i][1], *other[i][2]))) for i in one)


def fairseq(command, argv, in_process=False, check=True):
    """``COMMAND ARGV`` (``fairseq-train`` or ``fairseq-generate``): what it wrote
    (``stdout``: the hypotheses of generate, the log of train in process) and
    ``returncode``."""
    if not in_process:
        return run([BIN / command, *argv], check=check)
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import generate as fairseq_generate
    from fairseq_cli import train as fairseq_train

    training = command == "fairseq-train"
    parser = options.get_training_parser() if training else options.get_generation_parser()
    # --num-workers 0: batches made in this process; a forked loader worker's shutdown
    # here can wait out torch's 5 s join timeout.
    args = options.parse_args_and_arch(parser, [*map(str, argv), "--num-workers", "0"])
    with _fairseq_log() as log, redirect_stdout(io.StringIO()) as printed:
        if training:
            distributed_utils.call_main(convert_namespace_to_omegaconf(args), fairseq_train.main)
        else:
            fairseq_generate.main(args)
    return SimpleNamespace(stdout=printed.getvalue() + log.getvalue(), returncode=0)


@contextmanager
def _fairseq_log():
    """What fairseq logs at INFO while the block runs, as text (and not on stdout)."""
    text, root = io.StringIO(), logging.getLogger()
    handler = logging.StreamHandler(text)
    levels = {name: logging.getLogger(name).level for name in ("fairseq", "fairseq_cli")}
    shown = [h for h in root.handlers if getattr(h, "stream", None) is not None
             and type(h) is logging.StreamHandler]  # fairseq_cli's basicConfig on stdout
    for name in levels:
        logging.getLogger(name).setLevel(logging.INFO)
    for h in shown:
        root.removeHandler(h)
    root.addHandler(handler)
    try:
        yield text
    finally:
        root.removeHandler(handler)
        for h in shown:
            root.addHandler(h)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


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


def fairseq_train(data, save_dir, *flags, check=True, updates=6, in_process=False, cpu=True):
    return fairseq("fairseq-train", [
        data, "--user-dir", PLUGIN, *_device(cpu), *LSTM, *flags, "--optimizer", "adam", "--lr",
        "5e-3", "--max-tokens", "1000", "--max-update", str(updates), "--save-dir", save_dir,
        "--no-epoch-checkpoints", "--no-progress-bar", "--seed", "1"], in_process, check)


def fairseq_generate(data, checkpoint, *flags, in_process=False, cpu=True):
    out = fairseq("fairseq-generate", [
        data, "--user-dir", PLUGIN, "--path", checkpoint, "--task", "sparse_translation",
        "--beam", "3", "--max-len-b", "20", "--batch-size", "16",
        "--required-batch-size-multiple", "1", *_device(cpu), *flags], in_process)
    return {line.split("\t")[0]: line.split("\t")[1:] for line in out.stdout.splitlines()
            if line.startswith("H-")}
