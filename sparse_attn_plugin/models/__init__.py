"""Registered fairseq models and their named architectures."""

from .sparse_lstm import SparseLSTMModel
from .sparse_transformer import SparseTransformerModel

__all__ = ["SparseLSTMModel", "SparseTransformerModel"]
