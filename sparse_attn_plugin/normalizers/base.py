"""The contract every attention normaliser follows.

A normaliser maps attention scores ``s`` of shape ``(B, H, T, S)`` (batch, heads,
queries, keys), with ``-inf`` on keys the masks hide, to attention weights of the
same shape whose rows lie on the probability simplex over the unmasked keys.

Two things are handled once here rather than in every method:

* half precision: scores in float16/bfloat16 are normalised in float32 (the entmax
  family returns NaN in half precision) and the weights come back in float32, as
  fairseq's own softmax does; the caller casts them back with ``type_as``;
* rows whose keys are all masked give all-zero weights (not NaN, not a crash),
  with zero gradient; this costs one reduction, plus two ``masked_fill`` when
  such a row exists (always on a GPU, where checking would stall the stream).
"""

from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

#: The attention sites of an encoder-decoder transformer, as named on the command line.
SITES = ("encoder_self", "decoder_self", "decoder_cross")


class Normalizer(nn.Module, ABC):
    """Base class: subclasses implement :meth:`normalize` on float32/float64 scores
    with at least one unmasked key per row."""

    def forward(self, scores: Tensor) -> Tensor:
        if scores.dtype in (torch.float16, torch.bfloat16):
            scores = scores.float()
        empty = torch.isneginf(scores.amax(dim=-1, keepdim=True))
        # Such rows are rare (fairseq's masks never make one), so on the CPU the two
        # full-size copies are skipped when there is none; on a GPU the check would
        # stall the stream, so the guard always runs there.
        if scores.is_cuda or bool(empty.any()):
            return self.normalize(scores.masked_fill(empty, 0.0)).masked_fill(empty, 0.0)
        return self.normalize(scores)

    @abstractmethod
    def normalize(self, scores: Tensor) -> Tensor:
        """Weights for float32/float64 scores with an unmasked key in every row."""


class Softmax(Normalizer):
    """``softmax(s)_j = exp(s_j) / sum_k exp(s_k)``: the dense baseline."""

    def normalize(self, scores: Tensor) -> Tensor:
        return torch.softmax(scores, dim=-1)
