"""alpha-entmax by the safeguarded Newton solver: float64 gradcheck for scores and alpha,
agreement with the entmax package's bisection and sort-based algorithms and with an
independent NumPy bisection, over alpha in [1.01, 2] with masks, ties and -inf."""

import numpy as np
import pytest
import torch
from entmax import entmax15, entmax_bisect, sparsemax
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sparse_attn_plugin.normalizers import entmax_newton as solver
from sparse_attn_plugin.normalizers.entmax_newton import (
    entmax15_newton,
    entmax_newton,
    sparsemax_newton,
)

from helpers.reference import apply_rows, entmax_ref
from helpers.scores import random_scores, with_ties

ALPHAS = [1.01, 1.05, 1.2, 1.5, 1.7, 1.9, 1.99, 2.0]


@pytest.mark.parametrize("alpha", ALPHAS)
def test_matches_the_numpy_bisection_and_the_entmax_package(alpha):
    scores = with_ties(random_scores(seed=3))
    probs = entmax_newton(scores, alpha)
    np.testing.assert_allclose(probs, apply_rows(entmax_ref, scores, alpha), atol=1e-10)
    np.testing.assert_allclose(probs, entmax_bisect(scores, alpha, n_iter=100), atol=1e-10)
    assert (probs[torch.isneginf(scores)] == 0).all()


@pytest.mark.parametrize("alpha", ALPHAS)
def test_float32_agrees_with_float64_to_float32_precision(alpha):
    scores = random_scores(shape=(4, 4, 30, 40), seed=4) * 3
    wide = entmax_bisect(scores, alpha, n_iter=100)
    assert (entmax_newton(scores.float(), alpha) - wide).abs().max() < 5e-6


def test_sparsemax_and_entmax15_match_the_sort_based_algorithms():
    scores = with_ties(random_scores(seed=5))
    np.testing.assert_allclose(sparsemax_newton(scores), sparsemax(scores, dim=-1), atol=1e-14)
    np.testing.assert_allclose(entmax15_newton(scores), entmax15(scores, dim=-1), atol=1e-12)


def test_per_head_alpha_and_other_dims():
    alpha = torch.tensor([1.1, 1.5, 2.0], dtype=torch.float64).view(1, 3, 1, 1)
    scores = random_scores(seed=6)
    probs = entmax_newton(scores, alpha)
    for h, a in enumerate(alpha.flatten().tolist()):
        np.testing.assert_allclose(probs[:, h], apply_rows(entmax_ref, scores[:, h], a),
                                   atol=1e-10)
    dim1 = entmax_newton(scores.transpose(1, 3), 1.3, dim=1).transpose(1, 3)
    np.testing.assert_allclose(dim1, entmax_newton(scores, 1.3), atol=1e-14)


@pytest.mark.parametrize("fn", [sparsemax_newton, entmax15_newton,
                                lambda s: entmax_newton(s, 1.3)])
def test_gradcheck_scores(fn):
    scores = with_ties(random_scores(seed=7)).requires_grad_()
    assert torch.autograd.gradcheck(fn, (scores,), eps=1e-6, atol=1e-6)


def test_gradcheck_alpha_per_head():
    scores = random_scores(seed=8).requires_grad_()
    alpha = torch.tensor([1.05, 1.4, 1.95], dtype=torch.float64).view(1, 3, 1, 1)
    assert torch.autograd.gradcheck(entmax_newton, (scores, alpha.requires_grad_()),
                                    eps=1e-7, atol=1e-5)


def test_alpha_gradient_equals_the_entmax_packages():
    scores = random_scores(seed=9)
    upstream = torch.randn_like(scores)
    ours = torch.tensor([1.2, 1.6, 1.9], dtype=torch.float64).view(1, 3, 1, 1).requires_grad_()
    theirs = ours.detach().clone().requires_grad_()
    (g_ours,) = torch.autograd.grad(entmax_newton(scores, ours), ours, upstream)
    (g_theirs,) = torch.autograd.grad(
        entmax_bisect(scores, theirs.expand(2, 3, 4, 1), n_iter=100), theirs, upstream)
    np.testing.assert_allclose(g_ours, g_theirs, rtol=1e-8, atol=1e-10)


def test_few_newton_steps_where_bisection_needs_25(monkeypatch):
    steps = []
    step = solver._newton_step
    monkeypatch.setattr(solver, "_newton_step", lambda *a: steps.append(1) or step(*a))
    scores = torch.randn(32, 4, 40, 40, generator=torch.Generator().manual_seed(0))
    for alpha in (1.05, 1.5, 1.9):
        steps.clear()
        entmax_newton(scores, alpha)
        assert len(steps) <= 8, (alpha, len(steps))


def test_a_step_outside_the_bracket_is_replaced_by_a_halving(monkeypatch):
    """A Newton step thrown far outside [lo, hi] (as rounding might) still converges."""
    step = solver._newton_step

    def wild(x, tau, r):
        h, new, u, ur1 = step(x, tau, r)
        return h, new + 10.0 * torch.sign(new - tau), u, ur1

    monkeypatch.setattr(solver, "_newton_step", wild)
    scores = random_scores(seed=10)
    np.testing.assert_allclose(entmax_newton(scores, 1.4, max_iter=200),
                               apply_rows(entmax_ref, scores, 1.4), atol=1e-9)


score_rows = hnp.arrays(
    np.float64, hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=9),
    elements=st.one_of(st.floats(-30, 30), st.just(-np.inf)),
)


@settings(max_examples=80, deadline=None)
@given(scores=score_rows, alpha=st.floats(1.01, 2.0))
def test_simplex_support_and_reference(scores, alpha):
    scores[:, 0] = np.where(np.isfinite(scores[:, 0]), scores[:, 0], 0.0)  # one key per row
    probs = entmax_newton(torch.from_numpy(scores), alpha).numpy()
    assert (probs >= 0).all() and np.allclose(probs.sum(-1), 1.0)
    assert (probs[np.isneginf(scores)] == 0).all()
    np.testing.assert_allclose(probs, apply_rows(entmax_ref, scores, alpha), atol=1e-8)
