"""Random attention scores for normaliser tests."""

import torch

NEG_INF = float("-inf")


def random_scores(shape=(2, 3, 4, 7), masked_fraction=0.3, seed=0, dtype=torch.float64):
    """Scores with -inf on a random subset of keys; every row keeps >= 1 key."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(shape, generator=gen, dtype=dtype) * 2
    mask = torch.rand(shape, generator=gen) < masked_fraction
    mask[..., 0] = False
    return scores.masked_fill(mask, NEG_INF)


def with_ties(scores):
    """``scores`` with two rows of equal scores and one row of a single unmasked key."""
    scores = scores.clone()
    scores[0, 0, 0] = 0.7
    scores[0, 0, 1, :3] = 1.3
    scores[0, 0, 2, 1:] = NEG_INF
    return scores
