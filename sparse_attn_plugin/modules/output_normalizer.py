"""The output layer's normaliser from a model's configuration: alpha-entmax and its
Fenchel-Young loss where the model trains, or was trained, with ``--criterion entmax_loss
--loss-alpha A`` (Peters, Niculae & Martins 2019), else None (fairseq's softmax). The
criterion (:mod:`..criterions.entmax_loss`) trains with it and the models
(:mod:`..models.output_entmax`) decode with it.
"""

import math
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Callable, Optional

import torch
from torch import Tensor

from ..errors import SettingsError
from ..functional import entmax15, entmax_alpha, sparsemax
from ..losses import entmax15_loss, entmax_bisect_loss, sparsemax_loss
from ..normalizers.dispatch import long_rows
from ..normalizers.entmax_partial import partial_sort_log_weights

#: The criterion's name, and its flag's default.
CRITERION = "entmax_loss"
DEFAULT_ALPHA = "1.5"
#: The Newton solver's cap for alpha-entmax, the same in the loss and at decoding.
N_ITER = 50


def parse_loss_alpha(text) -> float:
    """The alpha of ``--loss-alpha TEXT``: a number in (1, 2]; else a one-line
    :class:`SettingsError` naming the flag."""
    try:
        alpha = float(text)
    except (TypeError, ValueError):
        alpha = math.nan
    if not 1.0 < alpha <= 2.0:  # NaN fails too
        raise SettingsError(f"--loss-alpha must be a number in (1, 2] (2 sparsemax, 1.5 "
                            f"1.5-entmax), got {text!r}")
    return alpha


@dataclass(frozen=True)
class OutputEntmax:
    """The output normaliser alpha-entmax at ``alpha`` and its Fenchel-Young loss, computed
    by the exact sparsemax and 1.5-entmax where alpha is 2 or 1.5; ``impl`` as in
    :mod:`..functional`."""

    alpha: float
    impl: str = "auto"

    @cached_property
    def _functions(self):
        """The normaliser and its loss, built once (read at every step and decoding step)."""
        if self.alpha == 2.0:
            return partial(sparsemax, impl=self.impl), partial(sparsemax_loss, impl=self.impl)
        if self.alpha == 1.5:
            return partial(entmax15, impl=self.impl), partial(entmax15_loss, impl=self.impl)
        return (partial(entmax_alpha, alpha=self.alpha, n_iter=N_ITER, impl=self.impl),
                partial(entmax_bisect_loss, alpha=self.alpha, n_iter=N_ITER, impl=self.impl))

    @property
    def normalize(self) -> Callable[[Tensor], Tensor]:
        """``z -> alpha-entmax(z)`` along the last dim."""
        return self._functions[0]

    def log_normalize(self, logits: Tensor) -> Tensor:
        """``log alpha-entmax(z)`` along the last dim, ``-inf`` where a token has probability
        0: with no gradient wanted and over long rows (a beam's step over a vocabulary,
        :func:`..normalizers.dispatch.long_rows`), from the supports of the partial sort; else
        the logarithm of :attr:`normalize`'s weights, taken where they are not 0."""
        wanted = torch.is_grad_enabled() and logits.requires_grad
        if not wanted and self.impl in ("auto", "torch") and long_rows(logits) and \
                bool(torch.isfinite(logits.amax(-1)).all()):
            return partial_sort_log_weights(logits, self.alpha)
        probs = self.normalize(logits)
        if wanted:
            return probs.log()
        zero = probs == 0
        return probs.masked_fill(zero, 1.0).log_().masked_fill_(zero, -math.inf)

    def loss(self, logits: Tensor, target: Tensor, ignore_index: int,
             reduction: str = "sum") -> Tensor:
        """The loss of ``logits`` ``(..., V)`` (half in float32: entmax is unstable there) for
        ``target`` ``(...)``, 0 where the target is ``ignore_index``; ``sum`` or ``none``."""
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        return self._functions[1](logits, target, ignore_index=ignore_index,
                                    reduction=reduction)


def output_entmax_of(args) -> Optional[OutputEntmax]:
    """What a model configured by ``args`` (fairseq-train's flags, or a checkpoint's) puts on
    its output: :class:`OutputEntmax` if it trains or was trained with this criterion, else
    None (fairseq's softmax). A bad ``--loss-alpha`` is a one-line SettingsError."""
    if getattr(args, "criterion", None) != CRITERION:
        return None
    return OutputEntmax(parse_loss_alpha(getattr(args, "loss_alpha", DEFAULT_ALPHA)),
                        getattr(args, "attn_impl", None) or "auto")
