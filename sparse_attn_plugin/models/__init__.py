"""Registered fairseq models and their named architectures."""

from .sparse_transformer import SparseTransformerModel

__all__ = ["SparseTransformerModel"]
