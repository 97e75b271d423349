"""fairseq-facing building blocks: attention with a pluggable normaliser and the
transformer layers that use it."""

from .multihead_attention import SparseMultiheadAttention
from .transformer_layers import (
    SparseTransformerDecoder,
    SparseTransformerDecoderLayer,
    SparseTransformerEncoder,
    SparseTransformerEncoderLayer,
)

__all__ = [
    "SparseMultiheadAttention", "SparseTransformerDecoder", "SparseTransformerDecoderLayer",
    "SparseTransformerEncoder", "SparseTransformerEncoderLayer",
]
