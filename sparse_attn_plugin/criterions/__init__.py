"""Registered fairseq criterions."""

from .fertility_loss import FertilityCriterion

__all__ = ["FertilityCriterion"]
