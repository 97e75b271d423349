"""Source positions as the attention sees them: real tokens, then the sink, then padding.

Malaviya et al.'s (2018) code put the ``<SINK>`` token in the last padded column, wrong for
every row shorter than the longest (fairseq pads on the left, and sorts batches only
approximately). :class:`SourceLayout` places it right after each row's last real token in a
right-padded layout (as packed LSTMs need): :meth:`SourceLayout.to_model` moves per-position
tensors there, inserting the sink, and :meth:`SourceLayout.to_source` moves attention
weights back to the batch's columns, without it, as fairseq's generator expects.
"""

from typing import Optional

import torch
from torch import Tensor


class SourceLayout:
    """Column maps between a batch's source layout and the model's.

    Args:
        padding_mask: ``(B, S)``, True on padding, padding on one side of each row.
        sink: insert one sink column after every row's last real token.

    Attributes:
        lengths: ``(B,)`` real tokens per row (without the sink).
        padding_mask: ``(B, S')`` the model's padding mask, ``S' = S + sink``.
        sink_index: ``(B,)`` column of each row's sink in the model's layout (``lengths``).
        model_columns: ``(B, S)`` the model column of every batch column.
    """

    def __init__(self, padding_mask: Tensor, sink: bool = False):
        batch, src_len = padding_mask.shape
        real = ~padding_mask
        self.sink = sink
        self.lengths = real.sum(dim=1)
        self.sink_index = self.lengths
        extra = int(sink)
        self.model_len = src_len + extra
        self.model_columns = torch.where(
            real,
            real.cumsum(dim=1) - 1,
            self.lengths[:, None] + extra + padding_mask.cumsum(dim=1) - 1,
        )
        # Batch column feeding each model column; column S stands for the sink.
        source_of = torch.full((batch, self.model_len), src_len, dtype=torch.long,
                               device=padding_mask.device)
        self._source_of = source_of.scatter(
            1, self.model_columns, torch.arange(src_len, device=padding_mask.device).expand(
                batch, src_len))
        columns = torch.arange(self.model_len, device=padding_mask.device)
        self.padding_mask = columns >= (self.lengths + extra)[:, None]

    def to_model(self, x: Tensor, sink_value: Optional[Tensor] = None) -> Tensor:
        """``x`` ``(B, S, *)`` in the batch's columns -> ``(B, S', *)`` in the model's, with
        ``sink_value`` (broadcast to ``x.shape[2:]``) at each sink; padding columns keep
        ``x``'s padding values."""
        if self.sink:
            if sink_value is None:
                raise ValueError("this layout has a sink: give its value")
            sink = torch.as_tensor(sink_value, dtype=x.dtype, device=x.device)
            x = torch.cat([x, sink.expand(x.size(0), 1, *x.shape[2:])], dim=1)
        index = self._source_of.view(*self._source_of.shape, *([1] * (x.dim() - 2)))
        return x.gather(1, index.expand(-1, -1, *x.shape[2:]))

    def to_source(self, weights: Tensor) -> Tensor:
        """Attention ``(B, ..., S')`` over the model's columns -> ``(B, ..., S)`` over the
        batch's, without the sink."""
        return to_source_columns(weights, self.model_columns)

    def is_identity(self) -> bool:
        """True when the model's columns are the batch's (no sink, right-padded)."""
        return not self.sink and bool(
            (self.model_columns == torch.arange(self.model_columns.size(1),
                                                device=self.model_columns.device)).all())


def to_source_columns(weights: Tensor, model_columns: Tensor) -> Tensor:
    """``weights`` ``(B, ..., S')`` over a model's columns -> ``(B, ..., S)`` over the batch's,
    given :attr:`SourceLayout.model_columns` ``(B, S)``."""
    shape = (weights.size(0),) + (1,) * (weights.dim() - 2) + (model_columns.size(1),)
    return weights.gather(-1, model_columns.view(shape).expand(*weights.shape[:-1], -1))
