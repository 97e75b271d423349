"""Where the fertilities that bound constrained attention come from (Malaviya et al. 2018).

The fertility ``f_j`` of source token ``j`` is the total attention it may receive over all
decoder steps: ``constant``, ``guided`` (the largest aligned count of its word type) or
``predicted`` (in training the aligner's count clamped to the tagger's classes, otherwise
the :class:`FertilityPredictor`'s expectation; both plus ``slack``). docs/methods.md,
"Constrained attention with fertility".
"""

import logging
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor, nn

from ..errors import SparseAttnError
from .fertility_predictor import FertilityPredictor

logger = logging.getLogger(__name__)

STRATEGIES = ("constant", "guided", "predicted")
#: The criterion that trains the fertility predictor, and the task whose batches carry the
#: fertilities it trains on (``models.fertility_args.check_fertility_criterion`` refuses a
#: run without them): their registered names.
CRITERION = "label_smoothed_cross_entropy_with_fertility"
TASK = "sparse_translation"
#: The constrained attention flags' defaults (the models' flags; the task reads
#: ``fertility_max``); the predictor's sizes are the reference tagger's.
DEFAULTS = {
    "sink_token": False,
    "attn_rows_may_sum_below_one": False,
    "exhaustion_c": 0.0,
    "fertility": "constant",
    "fertility_value": 2.0,
    "fertility_table": None,
    "fertility_slack": 1.0,
    "fertility_predictor_embed_dim": 256,
    "fertility_predictor_hidden_size": 256,
    "fertility_predictor_layers": 2,
    "fertility_predictor_dropout": 0.2,
    "fertility_max": 10,
}
#: Fertility of the source's end-of-sentence token under the guided and predicted strategies.
EOS_FERTILITY = 1.0


class FertilityError(SparseAttnError, ValueError):
    """Fertilities that are missing or unreadable; the message is one line."""


def missing_table_error(path) -> FertilityError:
    return FertilityError(f"guided fertility table {path} does not exist "
                          "(write it with sparse-attn-align fertility --out-guided)")


def read_guided_table(path, dictionary) -> Tensor:
    """Per-type fertilities ``(len(dictionary),)`` from a ``word<TAB>fertility`` file: at least
    1, and 1 for types the table lacks. Raises FertilityError naming the file and line."""
    table = torch.ones(len(dictionary))
    path = Path(path)
    if not path.is_file():
        raise missing_table_error(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        raise FertilityError(f"guided fertility table {path} is empty")
    known = 0
    for number, line in enumerate(lines, 1):
        word, sep, value = line.rpartition("\t")
        if not sep or not value.strip().isdigit():
            raise FertilityError(f"{path}:{number}: expected 'word<TAB>fertility', "
                                 f"got {line!r}")
        index = dictionary.index(word)
        if index != dictionary.unk():
            table[index] = max(1, int(value))
            known += 1
    logger.info("guided fertilities for %d of %d source types from %s", known,
                len(dictionary), path)
    return table


class Fertility(nn.Module):
    """Per-token fertilities ``(B, S)`` for a batch of source tokens, by one strategy.

    Args:
        strategy: one of :data:`STRATEGIES`.
        dictionary: the source dictionary (padding and EOS indices; guided table).
        value: the constant fertility.
        table_path: the guided table, read once and kept in the checkpoint: a model
            loaded from a checkpoint (``fairseq-generate``) does not need the file.
        slack: added to predicted (and, in training, aligned) fertilities.
        predictor: the tagger, for ``predicted``.
    """

    def __init__(self, strategy: str, dictionary, value: float = 2.0,
                 table_path: Optional[str] = None, slack: float = 1.0,
                 predictor: Optional[FertilityPredictor] = None):
        super().__init__()
        if strategy not in STRATEGIES:
            raise FertilityError(f"unknown fertility strategy {strategy!r}; choose from "
                                 f"{', '.join(STRATEGIES)}")
        self.strategy = strategy
        self.pad, self.eos = dictionary.pad(), dictionary.eos()
        self.value, self.slack = float(value), float(slack)
        self.predictor = predictor
        self.missing_table = None
        if strategy == "guided":
            if table_path is not None and not Path(table_path).exists():
                # Loading a checkpoint fills the buffer; training without it fails below.
                self.missing_table = str(table_path)
                table = torch.ones(len(dictionary))
            else:
                table = read_guided_table(table_path, dictionary)
            self.register_buffer("table", table)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if prefix + "table" in state_dict:
            self.missing_table = None
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, src_tokens: Tensor, src_fertility: Optional[Tensor] = None) -> Tensor:
        """Fertilities in ``src_tokens``' layout; ``src_fertility`` holds the aligner's counts
        (padding side as ``src_tokens``), needed by ``predicted`` in training."""
        if self.strategy == "constant":
            fertility = torch.full(src_tokens.shape, self.value, device=src_tokens.device)
        elif self.strategy == "guided":
            if self.missing_table is not None:
                raise missing_table_error(self.missing_table)
            fertility = self.table[src_tokens]
        elif self.training:
            if src_fertility is None:
                raise FertilityError(
                    "--fertility predicted trains on the aligner's per-token fertilities, "
                    "but the batch has none: use --task sparse_translation with "
                    "{split}.{src}-{tgt}.fert files next to the data")
            fertility = self.predictor.target(src_fertility.float()) + self.slack
        else:
            with torch.no_grad():
                fertility = self.predictor.expected(self.predictor(src_tokens)) + self.slack
        if self.strategy != "constant":
            fertility = fertility.masked_fill(src_tokens.eq(self.eos), EOS_FERTILITY)
        return fertility.masked_fill(src_tokens.eq(self.pad), 0.0)
