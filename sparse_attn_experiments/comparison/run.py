"""One row of a comparison: trained with ``fairseq-train`` until its validation loss stops
improving (``--patience``), its training time (``--stop-time-hours``, kept across
resumptions) ends or the update cap is reached; then its best checkpoint translates every
test split (``fairseq-generate``, beam 5) and is scored.

Resumable under ``WORK/ROW``: ``spec.json`` holds the commands' flags (other model, data or
decoding flags start afresh; ``--cpu`` does not), ``trained.json`` marks the training done
and names its machine, ``row.json`` holds the finished row, completed later with what it
lacks (a metric whose resource was missing, as Meteor without Java; length ratios). An
interrupted training, or one that stopped at a cap or budget since raised, resumes from
``checkpoint_last.pt``. Every record carries its ``spec``, so one already in ``--out``
seeds a work folder holding no training of that model (README.md, "Comparing kinds of
attention on a corpus").
"""

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from sparse_attn_plugin.evaluation import corpus_bleu, read_generate_output, scoring
from sparse_attn_plugin.evaluation.scoring import Scorer
from sparse_attn_plugin.files import write_json_atomic
from sparse_attn_plugin.reading import read_lines
from sparse_attn_plugin.sites import SITES

from .. import pipeline
from ..pipeline import device_flags
from ..provenance import describe_machine, git_commit
from .corpus import Corpus, drop_sink
from .models import Architecture
from .translations import generate_log

logger = logging.getLogger(__name__)

GENERATE = ["--beam", "5", "--batch-size", "128"]
#: More epochs than any run has: an epoch interval that never comes.
EPOCHS = 1_000_000


@dataclass(frozen=True)
class Schedule:
    """When a row's training stops: ``patience`` validations without a better loss,
    ``minutes`` of training, or ``max_update`` updates; a validation (and a checkpoint)
    every ``validate_every`` updates and at the end (None: after every epoch)."""

    patience: int
    minutes: Optional[float]
    max_update: int
    validate_every: Optional[int] = None

    def flags(self) -> List[str]:
        flags = ["--patience", str(self.patience)]
        if self.minutes:
            flags += ["--stop-time-hours", f"{self.minutes / 60:.6f}"]
        if self.validate_every:  # instead of after every epoch (and at the end)
            flags += ["--validate-interval-updates", str(self.validate_every),
                      "--save-interval-updates", str(self.validate_every),
                      "--keep-interval-updates", "1", "--validate-interval", str(EPOCHS),
                      "--save-interval", str(EPOCHS)]
        return flags


def row_flags(architecture: Architecture, name: str, schedule: Schedule, seed: int,
              passed: Tuple[Sequence[str], Sequence[str]] = ((), ())):
    """The ``fairseq-train`` and ``fairseq-generate`` flags of one row, each followed by
    the flags ``passed`` on to it (``--train-flags``, ``--generate-flags``)."""
    row = architecture.rows[name]
    train = [*architecture.flags, *row.train, *schedule.flags(), "--seed", str(seed),
             "--log-interval", "25", "--no-epoch-checkpoints", *device_flags(), *passed[0]]
    return train, [*GENERATE, *row.decode, *device_flags(), *passed[1]]


def run_row(name: str, architecture: Architecture, corpus: Corpus, schedule: Schedule,
            work: Path, seed: int, scorer: Scorer, recorded: Optional[dict] = None,
            passed: Tuple[Sequence[str], Sequence[str]] = ((), ())) -> dict:
    """Train (or resume, or reuse) and score one row; ``recorded``: the row as an earlier
    comparison wrote it, reused when its spec trains the same model; ``passed``: the
    flags given on to every fairseq-train and fairseq-generate (part of the row's spec).
    See the module's docstring."""
    folder = Path(work) / name
    train_flags, generate_flags = row_flags(architecture, name, schedule, seed, passed)
    spec = {"data": str(corpus.data), "train": train_flags, "generate": generate_flags,
            "max_update": schedule.max_update}
    before = _read(folder / "spec.json")
    same_model = before is not None and _model_of(before) == _model_of(spec)
    if (recorded and "spec" in recorded and _model_of(recorded["spec"]) == _model_of(spec)
            and not same_model):  # never over a training of this model (its checkpoints)
        _seed(folder, recorded)
        before = _read(folder / "spec.json")
    if before is None or _model_of(before) != _model_of(spec):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        write_json_atomic(folder / "spec.json", spec)
    elif before != spec and _trains_on(_read(folder / "trained.json"), before, spec):
        for done in ("trained.json", "row.json"):  # a larger budget: train on from the last
            (folder / done).unlink(missing_ok=True)  # checkpoint
        write_json_atomic(folder / "spec.json", spec)
    done = _read(folder / "row.json")
    if done:
        logger.info(f"    {name}: finished before, reused")
        if _fill_in(done, folder, corpus, scorer):
            save_row(folder, done)
        return {**done, "spec": _read(folder / "spec.json")}
    trained = _read(folder / "trained.json")
    if not trained:
        result = pipeline.train(corpus.data, folder, train_flags, schedule.max_update,
                                desc=f"{name:>12} train", fresh=False, skip_first_interval=True)
        trained = {"updates": result.updates, "epochs": result.epochs,
                   "train_words_per_second": result.words_per_second,
                   "stopped": pipeline.stop_reason(result.log), "machine": describe_machine(),
                   "commit": git_commit()}
        write_json_atomic(folder / "trained.json", trained)
    row = {"attention": name, **trained, **score(corpus, folder, generate_flags, scorer)}
    curve = pipeline.validation_curve(folder / "train.log")
    row["validation_curve"] = curve
    row["valid_loss"] = min((loss for _, loss in curve), default=None)
    save_row(folder, row)
    return {**row, "spec": spec}


def _unscored(row: dict) -> List[str]:
    """The metrics scored on the first test split alone that ``row`` recorded as not
    scored (None: their resource was missing, as Meteor without Java)."""
    return [name for name, metric in scoring.METRICS.items()
            if not metric.with_bleu and metric.key in row and row[metric.key] is None]


def _fill_in(row: dict, folder: Path, corpus: Corpus, scorer: Scorer) -> bool:
    """Whether a finished ``row`` gained, from its saved translations, what it was scored
    without: a metric whose resource was missing then, the length ratios where an older
    version scored it."""
    unscored = _unscored(row)
    if not unscored and "length_ratio" in row:
        return False
    logs = {split: generate_log(folder.parent, folder.name, split) for split in corpus.tests}
    if not all(log.exists() for log in logs.values()):
        return False
    outputs = {split: read_generate_output(read_lines(log)) for split, log in logs.items()}
    first = outputs[corpus.first_test]
    gained = scorer.score(first.hypotheses, first.references,
                          [drop_sink(line) for line in first.sources],
                          unscored).record() if unscored else {}
    row.update(gained)
    filled = bool(gained)
    if "length_ratio" not in row:
        row["length_ratio"] = {split: corpus_bleu(out.hypotheses, out.references).length_ratio
                               for split, out in outputs.items()}
        filled = True
    return filled


#: What ``trained.json`` holds: how the training went (``updates`` and ``epochs``: how far
#: it went, as fairseq's log records it, :func:`pipeline.trained_length`).
_TRAINED = ("updates", "epochs", "train_words_per_second", "stopped", "machine", "commit")


def _seed(folder: Path, recorded: dict) -> None:
    """A work folder holding a recorded row as if this machine had made it: its spec,
    its training's outcome and the row; no checkpoints, so a larger budget trains it
    afresh."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    write_json_atomic(folder / "spec.json", recorded["spec"])
    write_json_atomic(folder / "trained.json",
                      {key: recorded[key] for key in _TRAINED if key in recorded})
    save_row(folder, recorded)


#: The flags of :meth:`Schedule.flags` that take a value: when training stops, not what
#: is trained.
_STOPPING = ("--patience", "--stop-time-hours", "--validate-interval-updates",
             "--save-interval-updates", "--keep-interval-updates", "--validate-interval",
             "--save-interval")
#: Where the commands run, not what they train or decode (:func:`pipeline.device_flags`).
_DEVICE = ("--cpu",)


def _model_of(spec: dict) -> dict:
    """What a row trains and decodes, without its stopping rule or its device."""
    kept, skip = [], False
    for flag in spec["train"]:
        if skip:
            skip = False
        elif flag in _STOPPING:
            skip = True
        elif flag not in _DEVICE:
            kept.append(flag)
    return {"data": spec["data"], "train": kept,
            "generate": [flag for flag in spec["generate"] if flag not in _DEVICE]}


def generate_flags_here(spec: dict) -> List[str]:
    """A row's ``fairseq-generate`` flags, for this machine's device."""
    return [flag for flag in spec["generate"] if flag not in _DEVICE] + device_flags()


def _trains_on(trained: Optional[dict], before: dict, now: dict) -> bool:
    """Whether a row trained under ``before`` goes on under the stopping rule of ``now``:
    it stopped at the update cap and the cap is higher now, or its time budget ended and
    the budget is larger now (a converged row is done)."""
    if not trained:
        return False
    if trained["stopped"] == "cap":
        return now["max_update"] > trained["updates"]
    if trained["stopped"] == "time budget":
        return _hours(now) > _hours(before)
    return False


def _hours(spec: dict) -> float:
    flags = spec["train"]
    return (float(flags[flags.index("--stop-time-hours") + 1])
            if "--stop-time-hours" in flags else float("inf"))


def score(corpus: Corpus, folder: Path, generate_flags: List[str], scorer: Scorer) -> dict:
    """Translate every test split with the best checkpoint; the metrics that go with
    BLEU on each, every other metric of :data:`scoring.METRICS` on ``test`` (where the
    scorer has what it needs), recorded by :func:`scoring.record_by_split`; speed; zero weights and
    learned alphas per site (teacher-forced on ``test``)."""
    checkpoint = folder / "checkpoint_best.pt"
    by_split, first = {}, None  # first: the generation of corpus.first_test
    for split in corpus.tests:
        generated = translate(corpus, checkpoint, generate_flags, split,
                              generate_log(folder.parent, folder.name, split))
        out = generated.output
        if first:
            by_split[split] = scorer.score(out.hypotheses, out.references,
                                           metrics=scoring.beside_bleu())
            continue
        first = generated
        by_split[split] = scorer.score(out.hypotheses, out.references,
                                       [drop_sink(line) for line in out.sources])
    stats = site_statistics(checkpoint, corpus.data)
    return {
        **scoring.record_by_split(by_split),
        "length_ratio": {split: scores.bleu.length_ratio for split, scores in by_split.items()},
        "generate_sentences_per_second": first.sentences_per_second,
        "zero_fraction": {site: stats[site].zero_fraction for site in SITES if site in stats},
        "alphas": {site: stats[site].alphas for site in SITES
                   if site in stats and stats[site].alphas},
    }


def translate(corpus: Corpus, checkpoint: Path, generate_flags: List[str], split: str,
              log: Path) -> pipeline.GenerateResult:
    """``checkpoint``'s translations of test split ``split`` (``fairseq-generate`` with
    :func:`translate_flags`), written to ``log``."""
    return pipeline.generate(corpus.data, checkpoint,
                             translate_flags(corpus, generate_flags, split), log)


def translate_flags(corpus: Corpus, generate_flags: Sequence[str], split: str) -> List[str]:
    """``generate_flags``, then the corpus's own (its length limits, its subwords merged)
    and the split."""
    remove_bpe = ["--remove-bpe", corpus.remove_bpe] if corpus.remove_bpe else []
    return [*generate_flags, *corpus.generate_flags, *remove_bpe, "--gen-subset", split]


def save_row(folder: Path, row: dict) -> None:
    """Keep a finished row in its work folder (``row.json``), without its spec (which
    ``spec.json`` holds)."""
    write_json_atomic(folder / "row.json", {k: v for k, v in row.items() if k != "spec"})


def site_statistics(checkpoint: Path, data: Path, subset: str = "test"):
    """Zero fraction and learned alphas per site, under teacher forcing on ``subset``
    (none for a model without attention normalisers, e.g. a kernel smoother)."""
    from sparse_attn_plugin.analysis import attention_statistics
    from sparse_attn_plugin.analysis.teacher_forced import dataset
    from sparse_attn_plugin.checkpoints import load_model

    model, task = load_model(checkpoint, data)
    batches = task.get_batch_iterator(dataset(task, subset), max_tokens=4096).next_epoch_itr(
        shuffle=False)
    try:
        return attention_statistics(model, batches)
    except ValueError:
        return {}


def _read(path: Path) -> Optional[dict]:
    return json.loads(path.read_text()) if path.exists() else None
