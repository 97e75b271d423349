"""``--criterion entmax_loss --loss-alpha A``: an output layer trained with the
alpha-entmax Fenchel-Young loss and decoded with alpha-entmax (Peters, Niculae & Martins
2019, "Sparse Sequence-to-Sequence Models")::

    L(z; y) = H_alpha(p) + <p - e_y, z>,   p = alpha-entmax(z),   dL/dz = p - e_y,

per target token, summed over the tokens that are not padding (:mod:`..losses`). ``A`` is
2 (sparsemax), 1.5 (1.5-entmax, the default) or any number in (1, 2] (alpha-entmax). The
logged ``loss`` is that sum per token in base 2, as fairseq's ``cross_entropy`` logs its
own; it is no log-likelihood, so no perplexity is derived from it.

The models read the criterion and ``A`` from their own configuration (fairseq saves the
training flags with the checkpoint), so a model trained with it decodes with
``log alpha-entmax(z)``, ``-inf`` where a token has probability 0, with no flag at
generation (:mod:`..models.output_entmax`).
"""

import math
from dataclasses import dataclass, field
from typing import Optional

from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from omegaconf import II

from ..errors import SettingsError
from ..modules.output_normalizer import (
    CRITERION,
    DEFAULT_ALPHA,
    OutputEntmax,
    parse_loss_alpha,
)


@dataclass
class EntmaxLossConfig(FairseqDataclass):
    loss_alpha: str = field(default=DEFAULT_ALPHA, metadata={
        "help": "alpha of the output's entmax and its loss: 2 sparsemax, 1.5 1.5-entmax "
                "(default), any number in (1, 2] alpha-entmax"})
    sentence_avg: bool = II("optimization.sentence_avg")
    #: The model's architecture (fairseq's --arch), to refuse one that cannot decode with
    #: entmax before training starts (at the first step fairseq would write crash.pt).
    arch: Optional[str] = II("model._name")


def _check_arch(arch: Optional[str]) -> None:
    """A one-line SettingsError unless ``--arch arch`` (None: not known here) is one of
    ours that decodes with entmax (its class has the ``output_entmax`` of
    :class:`..models.output_entmax.OutputEntmaxMixin`)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    model = ARCH_MODEL_REGISTRY.get(arch) if arch else None
    if model is not None and not hasattr(model, "output_entmax"):
        raise SettingsError(f"--criterion {CRITERION} needs a model that decodes with "
                            f"entmax: --arch sparse_transformer*, sparse_lstm* or "
                            f"kernel_transformer*, not {arch}")


@register_criterion(CRITERION, dataclass=EntmaxLossConfig)
class EntmaxLossCriterion(FairseqCriterion):
    """The alpha-entmax loss of the model's output (see the module); the model must be one
    of ours, which decodes with the same alpha-entmax."""

    def __init__(self, task, loss_alpha=DEFAULT_ALPHA, sentence_avg=False, arch=None):
        super().__init__(task)
        _check_arch(arch)
        self.alpha = parse_loss_alpha(loss_alpha)
        self.sentence_avg = sentence_avg

    def output_entmax(self, model) -> OutputEntmax:
        """The model's :class:`OutputEntmax`, checked to be this criterion's."""
        output = getattr(model, "output_entmax", None)
        if output is None:
            raise SettingsError(f"--criterion {CRITERION} needs a model that decodes with "
                                f"entmax: --arch sparse_transformer*, sparse_lstm* or "
                                f"kernel_transformer*, not {type(model).__name__}")
        if output.alpha != self.alpha:
            raise SettingsError(f"--loss-alpha {self.alpha:g} but the model decodes with "
                                f"alpha {output.alpha:g}")
        return output

    def forward(self, model, sample, reduce=True):
        output = self.output_entmax(model)
        logits = model(**sample["net_input"])[0]
        target = model.get_targets(sample, (logits,))
        loss = output.loss(logits, target, self.padding_idx, "sum" if reduce else "none")
        nsentences = sample["target"].size(0)
        sample_size = nsentences if self.sentence_avg else sample["ntokens"]
        logging_output = {"loss": loss.data, "ntokens": sample["ntokens"],
                          "nsentences": nsentences, "sample_size": sample_size}
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """``loss`` per token (per sentence with ``--sentence-avg``) in base 2."""
        loss = sum(log.get("loss", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        metrics.log_scalar("loss", loss / sample_size / math.log(2), sample_size, round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
