"""Attention statistics read from trained models."""

from .attention_stats import SiteStats, attention_statistics, learned_alphas

__all__ = ["SiteStats", "attention_statistics", "learned_alphas"]
