"""Registered fairseq criterions."""

from .entmax_loss import EntmaxLossCriterion
from .fertility_loss import FertilityCriterion

__all__ = ["EntmaxLossCriterion", "FertilityCriterion"]
