"""Registered fairseq models and their named architectures."""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

from .kernel_transformer import KernelTransformerModel
from .sparse_lstm import SparseLSTMModel
from .sparse_transformer import SparseTransformerModel

__all__ = ["KernelTransformerModel", "SparseLSTMModel", "SparseTransformerModel"]
