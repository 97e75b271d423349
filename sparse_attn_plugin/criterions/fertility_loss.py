"""Label-smoothed cross-entropy plus the fertility predictor's tagging loss.

``--criterion label_smoothed_cross_entropy_with_fertility`` trains the translation
model and, in the same run, the fertility predictor of ``--fertility predicted``
(Malaviya et al. 2018): ``loss = L_translation + lambda * L_fertility``, with
``L_fertility`` the tagger's summed, class-weighted NLL on the aligner's per-token counts
clamped to its classes ``1..K`` (``net_input["src_fertility"]``; the source EOS is not
scored; see :mod:`sparse_attn_plugin.modules.fertility_predictor`). The predictor has
its own embeddings and the translation model reads the aligner's counts in training, so
neither loss's gradient reaches the other's parameters. With
``--fertility-loss-only`` only the predictor is trained (the translation loss is
computed without gradient).

The logged ``loss`` (which fairseq validates, keeps the best checkpoint by and stops
early on) is ``L_translation`` alone, so a model with a predictor is compared, selected
and stopped on the same quantity as one without; ``fert_loss`` (per source token, in
nats) and ``fert_acc`` log the predictor. With ``--fertility-loss-only`` the logged
``loss`` is ``lambda * L_fertility``, the loss that run trains.
"""

from dataclasses import dataclass, field

import torch
from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from ..modules.fertility import CRITERION, TASK, FertilityError


@dataclass
class FertilityCriterionConfig(LabelSmoothedCrossEntropyCriterionConfig):
    fertility_loss_weight: float = field(
        default=1.0, metadata={"help": "lambda: weight of the predictor's loss"})
    fertility_loss_only: bool = field(
        default=False, metadata={"help": "train only the fertility predictor"})


@register_criterion(CRITERION, dataclass=FertilityCriterionConfig)
class FertilityCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, fertility_loss_weight=1.0,
                 fertility_loss_only=False):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size,
                         report_accuracy)
        self.fertility_loss_weight = fertility_loss_weight
        self.fertility_loss_only = fertility_loss_only

    def forward(self, model, sample, reduce=True):
        predictor = getattr(model, "fertility_predictor", None)
        if predictor is None:
            raise FertilityError(f"{CRITERION} needs a model with --fertility predicted")
        net_input = sample["net_input"]
        if "src_fertility" not in net_input:
            raise FertilityError(f"the batch has no fertilities: use --task {TASK} "
                                 "with {split}.{src}-{tgt}.fert files next to the data")
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.fertility_loss_only):
            loss, sample_size, logging_output = super().forward(model, sample, reduce)
        src_tokens = net_input["src_tokens"]
        mask = src_tokens.ne(self.padding_idx) & src_tokens.ne(self.task.source_dictionary.eos())
        fert_loss, fert_correct = predictor.loss(predictor(src_tokens),
                                                 net_input["src_fertility"], mask)
        weighted = self.fertility_loss_weight * fert_loss
        logging_output.update(fert_loss=fert_loss.data, fert_correct=utils.item(fert_correct),
                              fert_tokens=utils.item(mask.sum()))
        if self.fertility_loss_only:
            logging_output["loss"] = weighted.data
            return weighted, sample_size, logging_output
        return loss + weighted, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        tokens = sum(log.get("fert_tokens", 0) for log in logging_outputs)
        if tokens:
            fert_loss = sum(log.get("fert_loss", 0) for log in logging_outputs)
            correct = sum(log.get("fert_correct", 0) for log in logging_outputs)
            metrics.log_scalar("fert_loss", fert_loss / tokens, tokens, round=3)
            metrics.log_scalar("fert_acc", 100.0 * correct / tokens, tokens, round=2)
