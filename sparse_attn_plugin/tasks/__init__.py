"""Registered fairseq tasks."""

from .sparse_translation import SparseTranslationTask

__all__ = ["SparseTranslationTask"]
