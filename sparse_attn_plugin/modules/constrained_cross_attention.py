"""Transformer cross-attention with fertility-constrained normalisers (csoftmax, csparsemax).

Every head keeps its own cumulative attention ``beta`` over decoder steps, bounded by the
source tokens' fertilities as in :mod:`.bounded_attention` (Malaviya et al. 2018)::

    p_{t,h} = csparsemax(z_{t,h} + c u_{t,h}, u_{t,h}),  u_{t,h} = max(0, f - beta_{t-1,h})

A full forward pass normalises the query steps one after another; incremental decoding
keeps ``beta`` under this module's own incremental-state key and reorders it with the beam
(fairseq's cross-attention reorder returns early while the batch has not shrunk).
"""

from typing import Optional, Tuple

from torch import Tensor

from ..normalizers.base import weighted_sum
from .bounded_attention import BoundedAttention
from .multihead_attention import SparseMultiheadAttention


class ConstrainedMultiheadAttention(SparseMultiheadAttention):
    """Encoder-decoder attention whose heads are bounded by fertilities.

    Args:
        bounded: the constrained normaliser with its exhaustion constant.
        *args, **kwargs: as for :class:`SparseMultiheadAttention`.
    """

    def __init__(self, *args, bounded: BoundedAttention, **kwargs):
        super().__init__(*args, normalizer=bounded.normalizer, **kwargs)
        self.bounded = bounded
        self.fertility: Optional[Tensor] = None

    needs_head_dim = True

    def attend(self, scores: Tensor, values: Tensor, need_weights: bool, incremental_state,
               rows_nonempty: bool) -> Tuple[Tensor, Optional[Tensor]]:
        if self.fertility is None:
            raise RuntimeError("constrained cross-attention called without fertilities: "
                               "the decoder binds them from the encoder output")
        coverage = None
        if incremental_state is not None:
            coverage = self.get_incremental_state(incremental_state, "coverage")
        if coverage is None:
            coverage = scores.new_zeros(scores.size(0), scores.size(1), scores.size(3),
                                        dtype=self.fertility.dtype)
        weights, coverage = self.bounded(scores, coverage,
                                         self.fertility[:, None, None, :])
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "coverage", coverage)
        probs = self.dropout_module(weights.type_as(values))
        return weighted_sum(probs, values), weights if need_weights else None

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """fairseq's reorder of the cached keys, then this module's coverage."""
        incremental_state = super().reorder_incremental_state(incremental_state, new_order)
        coverage = self.get_incremental_state(incremental_state, "coverage")
        if coverage is not None:
            self.set_incremental_state(incremental_state, "coverage",
                                       coverage.index_select(0, new_order))
        return incremental_state
