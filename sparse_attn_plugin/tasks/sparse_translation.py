"""``--task sparse_translation``: translation with per-token fertilities and coverage penalty.

Adds to fairseq's ``translation`` task:

* fertility files: ``{split}.{src}-{tgt}.fert`` next to the binarised data, one line per
  sentence, one non-negative integer per source token (``sparse-attn-align fertility
  --out-fert``, or the synthetic corpus's gold ``.fert``). When present they are batched
  as ``net_input["src_fertility"]`` in the layout of ``src_tokens`` (the source EOS gets
  1): the predicted-fertility strategy trains on them and the criterion trains the
  fertility predictor on them. A file whose counts do not match the binarised source is
  an error naming the file and line. A new model with ``--fertility predicted`` gets
  ``K = max(--fertility-max, largest training count)`` tagger classes, as the authors'
  code sets them (a model loaded from a checkpoint keeps its own).
* ``--coverage-penalty-beta B``: GNMT rescoring of finished hypotheses at generation
  (see :mod:`..search.coverage_penalty`); fairseq's ``--lenpen`` is its length-penalty exponent.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from fairseq import utils
from fairseq.data import BaseWrapperDataset
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..errors import SettingsError
from ..modules.fertility import DEFAULTS as FERTILITY_DEFAULTS
from ..modules.fertility import EOS_FERTILITY, TASK, FertilityError
from ..search.coverage_penalty import CoverageSequenceGenerator

logger = logging.getLogger(__name__)


def fertility_path(data_dir, split: str, src: str, tgt: str) -> Path:
    return Path(data_dir) / f"{split}.{src}-{tgt}.fert"


def largest_fertility(paths) -> int:
    """The largest count in the fertility files ``paths`` that exist (0 if none); values
    that are not counts are left for :func:`read_fertilities` to report."""
    largest = 0
    for path in paths:
        if Path(path).is_file():
            with open(path, encoding="utf-8") as lines:
                for line in lines:
                    largest = max([largest, *(int(v) for v in line.split() if v.isdigit())])
    return largest


def read_fertilities(path: Path, source_lengths) -> list:
    """One tensor of fertilities per line of ``path``, checked against the number of
    source tokens of each sentence (``source_lengths``, without EOS)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) != len(source_lengths):
        raise FertilityError(f"{path} has {len(lines)} lines but the binarised source has "
                         f"{len(source_lengths)} sentences")
    fertilities = []
    for number, (line, length) in enumerate(zip(lines, source_lengths), 1):
        values = line.split()
        if len(values) != length:
            raise FertilityError(f"{path}:{number}: {len(values)} fertilities for a source "
                             f"sentence of {length} tokens")
        if not all(v.isdigit() for v in values):
            raise FertilityError(f"{path}:{number}: fertilities must be non-negative integers")
        fertilities.append(torch.tensor([float(v) for v in values] + [EOS_FERTILITY]))
    return fertilities


class FertilityDataset(BaseWrapperDataset):
    """A language-pair dataset whose batches carry ``net_input["src_fertility"]``."""

    def __init__(self, dataset, fertilities, pad: int):
        super().__init__(dataset)
        self.fertilities = fertilities
        self.pad = pad

    def collater(self, samples):
        batch = self.dataset.collater(samples)
        if not batch:
            return batch
        src_tokens = batch["net_input"]["src_tokens"]
        values = torch.cat([self.fertilities[i] for i in batch["id"].tolist()])
        fertility = torch.zeros(src_tokens.shape, dtype=torch.float)
        batch["net_input"]["src_fertility"] = fertility.masked_scatter(
            src_tokens.ne(self.pad), values)
        return batch


@dataclass
class SparseTranslationConfig(TranslationConfig):
    coverage_penalty_beta: float = field(
        default=0.0, metadata={"help": "GNMT coverage penalty weight b at generation "
                                       "(0: off); --lenpen is its length-penalty exponent"})
    coverage_penalty_eps: float = field(
        default=0.1, metadata={"help": "floor of each source token's coverage"})


@register_task(TASK, dataclass=SparseTranslationConfig)
class SparseTranslationTask(TranslationTask):
    """Translation with per-token fertility files and coverage-penalty rescoring."""

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch, combine, **kwargs)
        dataset = self.datasets[split]
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        path = fertility_path(paths[(epoch - 1) % len(paths)], split, self.cfg.source_lang,
                              self.cfg.target_lang)
        if not path.is_file():
            logger.info("no fertility file %s: %s batches carry no fertilities", path, split)
            return
        lengths = [int(size) - 1 for size in dataset.src_sizes]  # without the source EOS
        fertilities = read_fertilities(path, lengths)
        self.datasets[split] = FertilityDataset(dataset, fertilities, self.src_dict.pad())
        logger.info("fertilities of %d %s sentences from %s", len(lengths), split, path)

    def build_model(self, cfg, from_checkpoint=False):
        """fairseq's model; a new fertility tagger gets a class for every training count."""
        if not from_checkpoint and getattr(cfg, "fertility", None) == "predicted":
            paths = [fertility_path(data, self.cfg.train_subset, self.cfg.source_lang,
                                    self.cfg.target_lang)
                     for data in utils.split_paths(self.cfg.data)]
            seen = largest_fertility(paths)
            least = getattr(cfg, "fertility_max", None) or FERTILITY_DEFAULTS["fertility_max"]
            classes = max(least, seen)
            logger.info("fertility tagger: classes 1..%d (largest training count %d)",
                        classes, seen)
            cfg.fertility_max = classes
        return super().build_model(cfg, from_checkpoint)

    def train_step(self, *args, **kwargs):
        return _one_line_errors(super().train_step, *args, **kwargs)

    def valid_step(self, *args, **kwargs):
        return _one_line_errors(super().valid_step, *args, **kwargs)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        **kwargs):
        if self.cfg.coverage_penalty_beta:
            if getattr(args, "score_reference", False):
                raise SettingsError("--coverage-penalty-beta does not apply to --score-reference")
            seq_gen_cls = CoverageSequenceGenerator
            extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {},
                                        coverage_beta=self.cfg.coverage_penalty_beta,
                                        coverage_eps=self.cfg.coverage_penalty_eps)
        return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs,
                                       **kwargs)


def _one_line_errors(step, *args, **kwargs):
    """Run a training or validation step; a :class:`FertilityError` there (a batch without
    fertilities, a model without a fertility predictor) ends the run with one line. The
    step runs inside fairseq's training loop, the command-line edge: its trainer saves
    ``crash.pt`` for any Exception, and a SystemExit passes through untouched."""
    try:
        return step(*args, **kwargs)
    except FertilityError as err:
        raise SystemExit(f"error: {err}") from None
