"""Attention statistics read from trained models, their figures, and the
``sparse-attn-analyze`` command line."""

from .attention_stats import (
    HeadStats,
    SiteStats,
    attention_statistics,
    head_statistics,
    learned_alphas,
)

__all__ = ["HeadStats", "SiteStats", "attention_statistics", "head_statistics",
           "learned_alphas"]
