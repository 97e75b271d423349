"""Random attention scores for normaliser tests."""

import functools

import pytest
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


def candidates(impl):
    """``pytest.param(function of the scores, its parameters, id=label)`` for every
    kernel an explicit ``--attn-impl impl`` may run for top-k (k = 3), sparsemax, 1.5-entmax and
    learned alpha-entmax (per-head alphas for 3 heads; alpha 1.3 for the partial sort of long
    rows, which takes one alpha only)."""
    from sparse_attn_plugin.normalizers.entmax_family import ENTMAX15, SPARSEMAX, _entmax_alpha
    from sparse_attn_plugin.normalizers.topk import _topk

    alpha = torch.tensor([1.2, 1.5, 1.9], dtype=torch.float64).view(1, 3, 1, 1)
    found = []
    for family, kernels, params in (("top-k", _topk(3), []), ("sparsemax", SPARSEMAX, []),
                                    ("1.5-entmax", ENTMAX15, []),
                                    ("alpha-entmax", _entmax_alpha(30), [alpha])):
        for name, fn in kernels.kernels(impl).items():
            if name == "partial sort" and params:
                fn, params = functools.partial(fn, alpha=1.3), []
            found.append(pytest.param(fn, params, id=f"{family} {name}"))
    return found


def assert_empty_rows_give_zeros(fn, params, dtype=torch.float64):
    """``fn(scores, *params)`` gives all-zero weights, and zero gradients to the scores
    and to ``params``, on a row with every key masked, and weights summing to one on the
    others."""
    scores = random_scores(shape=(2, 3, 4, 9), seed=11, dtype=dtype)
    scores[0, 1, 2] = NEG_INF
    scores.requires_grad_()
    params = [p.to(dtype).requires_grad_() for p in params]
    probs = fn(scores, *params)
    assert (probs[0, 1, 2] == 0).all() and torch.isfinite(probs).all()
    rest = torch.ones_like(probs[..., 0], dtype=torch.bool)
    rest[0, 1, 2] = False
    torch.testing.assert_close(probs.sum(-1)[rest], torch.ones_like(probs.sum(-1)[rest]))
    upstream = torch.randn(probs.shape, generator=torch.Generator().manual_seed(0), dtype=dtype)
    grads = torch.autograd.grad(probs, [scores, *params], upstream)
    assert all(torch.isfinite(g).all() for g in grads)
    assert (grads[0][0, 1, 2] == 0).all()
