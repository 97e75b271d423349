"""Drive ``fairseq-train`` and ``fairseq-generate`` as a user would, and read what
they report: training words/s, validation loss, generation sentences/s.

Used by the demo, the benchmarks and the reproduction scripts, so every number
they print comes from fairseq's own commands run with this plugin.
"""

import json
import logging
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from tqdm import tqdm

import sparse_attn_plugin
from sparse_attn_plugin.errors import SparseAttnError
from sparse_attn_plugin.evaluation import GenerateOutput, read_generate_output
from sparse_attn_plugin.evaluation.generate_output import unknown_words

logger = logging.getLogger(__name__)

#: fairseq's --user-dir: the plugin package's folder.
PLUGIN_DIR = Path(sparse_attn_plugin.__file__).resolve().parent
#: seconds of training after which ``train``'s ``on_speed`` hears the speed so far
SPEED_PROBE_S = 60.0
_JSON_LOG = re.compile(r"\| (train_inner|train|valid) \| (\{.*\})\s*$")
_GEN_SPEED = re.compile(r"\(([\d.,]+) sentences/s")
_SUBSET_SIZE = re.compile(r"^INFO:fairseq\.tasks\.\w+:.* (\d+) examples$", re.MULTILINE)
#: An H- line's sentence id: the sentences fairseq-generate translated.
_HYPOTHESIS_ID = re.compile(r"^H-(\d+)\t", re.M)
#: fairseq 0.12 drops a last batch smaller than --required-batch-size-multiple (8 by
#: default; fairseq issue #5036), so a test set of 3003 sentences would be scored on
#: 3000. Generation never needs the multiple.
WHOLE_SUBSET = ["--required-batch-size-multiple", "1"]


def device_flags() -> List[str]:
    """``--cpu`` where no GPU is visible, so fairseq's commands run anywhere."""
    import torch  # here: the commands that only read or prepare files start without it

    return [] if torch.cuda.is_available() else ["--cpu"]


#: fairseq-train flags that fail where no GPU is visible (fairseq 0.12 with --cpu:
#: ``--fp16`` asserts CUDA, the bf16 ones look for a TPU); ``--amp`` and
#: ``--memory-efficient-fp16`` train there, and fairseq-generate takes all of them.
GPU_ONLY_TRAINING = ("--fp16", "--bf16", "--memory-efficient-bf16")


def cpu_refusal(train_flags: Sequence[str]) -> Optional[str]:
    """Why fairseq-train cannot run with ``train_flags`` on this machine (a flag of
    :data:`GPU_ONLY_TRAINING` where no GPU is visible), in one line; None where it can."""
    named = [flag for flag in train_flags if flag.split("=")[0] in GPU_ONLY_TRAINING]
    if not named or not device_flags():
        return None
    return (f"fairseq-train cannot train with {named[0]} without a GPU, and this machine "
            "shows none (torch.cuda.is_available() is False)")


def fairseq_command(name: str) -> List[str]:
    """The fairseq console script of the running interpreter's environment."""
    return [str(Path(sys.executable).with_name(name))]


@dataclass
class TrainResult:
    checkpoint: Path
    words_per_second: Optional[float]  # median over logging intervals (epochs if none);
    # None when a resumed run had nothing left to train
    valid_loss: Optional[float]  # last validation, base 2 as fairseq prints it
    updates: int  # what the log records at the end (:func:`trained_length`), resumptions too
    log: Path
    epochs: Optional[int] = None  # the epoch of the last update (:func:`trained_length`)


class FairseqFailed(SparseAttnError, RuntimeError):
    """A fairseq command exited with an error; the message gives its last line and log."""


def _fail(what: str, log: Path):
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
    raise FairseqFailed(f"{what} failed: {tail[0]} (full log: {log})")


def train_arguments(data: Path, save_dir: Path, flags: Sequence[str],
                    max_update: int) -> List[str]:
    """What :func:`train` gives ``fairseq-train``: the data, the plugin, the save dir,
    the update cap and JSON logs, then ``flags``."""
    return [str(data), "--user-dir", str(PLUGIN_DIR), "--save-dir", str(save_dir),
            "--max-update", str(max_update), "--log-format", "json", "--no-progress-bar",
            *flags]


def generate_arguments(data: Path, checkpoint: Path, flags: Sequence[str]) -> List[str]:
    """What :func:`generate` gives ``fairseq-generate``: the data, the plugin, the
    checkpoint and :data:`WHOLE_SUBSET`, then ``flags``."""
    return [str(data), "--user-dir", str(PLUGIN_DIR), "--path", str(checkpoint),
            *WHOLE_SUBSET, *flags]


def train(data: Path, save_dir: Path, flags: Sequence[str], max_update: int,
          desc: str = "train", env: Optional[dict] = None,
          skip_first_interval: bool = False, fresh: bool = True,
          on_speed: Optional[Callable[[float, float], None]] = None) -> TrainResult:
    """Train with fairseq-train and the plugin; show a progress bar.

    With ``fresh`` (the default) checkpoints already in ``save_dir`` are deleted
    first: fairseq-train would otherwise resume from ``checkpoint_last.pt`` and a
    re-run would train nothing. Without it, an interrupted run resumes where it
    stopped (``train.log`` goes on), and a finished one is kept as it is.
    ``skip_first_interval`` leaves the first logging interval (start-up, memory
    allocation) out of the words/s median. ``on_speed(updates per second, words per
    second)`` is called once: at the first logging interval :data:`SPEED_PROBE_S` seconds
    after the start, or at the end of a shorter run; updates/s from the first interval
    on (start-up left out), not called for a run of fewer than two intervals. Stopping
    the caller (an exception, Ctrl-C) stops fairseq-train too.
    """
    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    for stale in save_dir.glob("checkpoint*.pt") if fresh else ():
        stale.unlink()
    log = save_dir / "train.log"
    cmd = [*fairseq_command("fairseq-train"), *train_arguments(data, save_dir, flags, max_update)]
    with open(log, "w" if fresh else "a") as out, \
            tqdm(total=max_update, desc=desc, unit="upd", leave=False) as bar:
        seen = _TrainingLog(bar, on_speed)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        try:  # a stopped caller stops its training too, rather than orphaning it
            for line in proc.stdout:
                out.write(line)
                seen.read(line)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        code = proc.wait()
        out.flush()
        updates, epochs = trained_length(log)
        _show_end(bar, updates, "failed" if code else ended(log, flags))
    if code != 0:
        _fail("fairseq-train", log)
    seen.tell_speed()
    wps = seen.wps[1:] if skip_first_interval and len(seen.wps) > 1 else seen.wps
    wps = wps or seen.epoch_wps  # a run shorter than one logging interval
    if not wps and fresh:
        raise RuntimeError(f"fairseq-train logged no training speed (full log: {log})")
    return TrainResult(save_dir / "checkpoint_last.pt", statistics.median(wps) if wps else None,
                       seen.valid_loss, updates, log, epochs)


class _TrainingLog:
    """What fairseq-train's JSON log lines say as they come: words/s of each logging
    interval and of each epoch, the last validation loss, and ``(seconds, updates)`` at
    each interval, moving ``bar``; ``on_speed`` is told once (:func:`train`)."""

    def __init__(self, bar: tqdm, on_speed: Optional[Callable[[float, float], None]]):
        self.bar, self.on_speed = bar, on_speed
        self.wps: List[float] = []
        self.epoch_wps: List[float] = []
        self.valid_loss: Optional[float] = None
        self.started, self.intervals = time.perf_counter(), []

    def read(self, line: str) -> None:
        match = _JSON_LOG.search(line)
        if not match:
            return
        kind, record = match.group(1), json.loads(match.group(2))
        if kind == "train_inner":
            self.wps.append(float(record["wps"]))
            self.bar.update(int(record["num_updates"]) - self.bar.n)
            self.intervals.append((time.perf_counter(), self.bar.n))
            if self.intervals[-1][0] - self.started >= SPEED_PROBE_S:
                self.tell_speed()
        elif kind == "valid":
            self.valid_loss = float(record["valid_loss"])
        elif kind == "train":
            self.epoch_wps.append(float(record["train_wps"]))

    def tell_speed(self) -> None:
        """Tell ``on_speed`` the updates/s from the first interval on and the median
        words/s, once, where two intervals have been logged."""
        if self.on_speed and len(self.intervals) > 1:
            (first_s, first_u), (last_s, last_u) = self.intervals[0], self.intervals[-1]
            self.on_speed((last_u - first_u) / (last_s - first_s), statistics.median(self.wps))
            self.on_speed = None


def _show_end(bar: tqdm, updates: int, why: str) -> None:
    """Leave ``bar`` at the updates that ran, of the cap it counts to, with why training
    ended (``153/200 upd, time budget of 5 min ended``), never at a cap not reached."""
    bar.update(updates - bar.n)
    bar.set_postfix_str(why)


def ended(log: Path, flags: Sequence[str]) -> str:
    """Why the last run of a ``train.log`` stopped (:data:`STOPPED`), naming the time
    budget's minutes where ``flags`` (fairseq-train's) set one."""
    reason = stop_reason(log)
    if reason == "time budget" and "--stop-time-hours" in flags:
        minutes = 60 * float(flags[list(flags).index("--stop-time-hours") + 1])
        return f"time budget of {float(f'{minutes:.3g}'):g} min ended"
    return STOPPED[reason]


def trained_length(log: Path) -> Tuple[int, Optional[int]]:
    """``(updates, epoch)`` a ``train.log`` records at its end, every run appended to it
    counted: the last update fairseq logged (training, end-of-epoch or validation
    record) and the epoch it fell in (None where no record names one; the last epoch
    may be partial)."""
    updates, epoch = 0, None
    for line in Path(log).read_text(errors="replace").splitlines():
        match = _JSON_LOG.search(line)
        if not match:
            continue
        record = json.loads(match.group(2))
        prefix = "" if match.group(1) == "train_inner" else f"{match.group(1)}_"
        updates = max(updates, int(float(record.get(f"{prefix}num_updates", 0))))
        if "epoch" in record:
            epoch = max(epoch or 0, int(record["epoch"]))
    return updates, epoch


def validation_curve(log: Path) -> List[Tuple[int, float]]:
    """``(updates, validation loss)`` of every validation a ``train.log`` records (loss
    in base 2, as fairseq prints it)."""
    curve = []
    for line in Path(log).read_text(errors="replace").splitlines():
        match = _JSON_LOG.search(line)
        if match and match.group(1) == "valid":
            record = json.loads(match.group(2))
            curve.append((int(record["valid_num_updates"]), float(record["valid_loss"])))
    return curve


#: Why fairseq-train stopped, as its log says it, for :func:`stop_reason`.
_STOPS = (("early stop since valid performance hasn't improved", "converged"),
          ("Stopping training due to cumulative_training_time", "time budget"))
_DONE = "done training in"
#: How a table or a progress bar says each :func:`stop_reason`.
STOPPED = {"converged": "converged", "time budget": "time budget ended",
           "cap": "update cap reached"}


def stop_reason(log: Path) -> str:
    """``converged`` (``--patience`` validations without a better loss), ``time budget``
    (``--stop-time-hours``) or ``cap`` (``--max-update`` or ``--max-epoch``), from the
    last run a ``train.log`` records (the part before its last "done training")."""
    runs = Path(log).read_text(errors="replace").split(_DONE)
    last = runs[-2] if len(runs) > 1 else runs[0]
    return next((reason for marker, reason in _STOPS if marker in last), "cap")


@dataclass
class GenerateResult:
    output: GenerateOutput
    sentences_per_second: float
    log: Path


def generate(data: Path, checkpoint: Path, flags: Sequence[str], log: Path,
             env: Optional[dict] = None) -> GenerateResult:
    """Run fairseq-generate on a checkpoint and read its hypotheses and speed; every
    sentence of the subset is translated (see :data:`WHOLE_SUBSET`), or this fails."""
    cmd = [*fairseq_command("fairseq-generate"), *generate_arguments(data, checkpoint, flags)]
    with open(log, "w") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                              env=env).returncode
    if code != 0:
        _fail("fairseq-generate", Path(log))
    text = Path(log).read_text()
    speed = _GEN_SPEED.search(text)
    if not speed:
        raise RuntimeError(f"fairseq-generate reported no speed (full log: {log})")
    size, translated = _SUBSET_SIZE.findall(text), set(_HYPOTHESIS_ID.findall(text))
    if size and len(translated) != int(size[-1]):   # before the reader refuses a gap
        raise RuntimeError(f"fairseq-generate translated {len(translated)} of {size[-1]} "
                           f"sentences (full log: {log})")
    output = read_generate_output(text.splitlines())
    warning = unknown_words(output.references, log)
    if warning:   # the tables score these lines, as fairseq's own BLEU does
        logger.warning(f"{warning}; the scores here are against those lines, as "
                       "fairseq-generate's own BLEU")
    return GenerateResult(output, float(speed.group(1).replace(",", "")), Path(log))

