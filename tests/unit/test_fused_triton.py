"""The Triton kernels (``--attn-impl triton``) run under Triton's interpreter on CPU tensors:
the same weights and gradients as the eager solver and the entmax package over alpha in
[1.01, 2] with masks, ties and -inf, float64 gradcheck for scores and alpha, top-k with
ties, and one clear line where the kernels cannot run (``tests/conftest.py`` sets
``TRITON_INTERPRET=1``). With ``TRITON_INTERPRET=0`` on a machine with a GPU the same tests
compile the kernels and run them on CUDA tensors (``on_device``)."""

import os

import pytest
import torch
from entmax import entmax_bisect
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_attn_plugin.errors import SettingsError
from sparse_attn_plugin.normalizers import NormalizerOptions, build_normalizer, fused_triton
from sparse_attn_plugin.normalizers.entmax_newton import entmax_newton
from sparse_attn_plugin.normalizers.topk import topk_softmax

from helpers.scores import (
    NEG_INF,
    assert_empty_rows_give_zeros,
    candidates,
    random_scores,
    with_ties,
)

pytestmark = pytest.mark.requires("triton")

DEVICE = ("cuda" if os.environ.get("TRITON_INTERPRET") == "0" and torch.cuda.is_available()
          else "cpu")


def on_device(kernel):
    """``kernel`` run on ``DEVICE`` (its tensor arguments moved there), its result moved back
    to the CPU; gradients flow back to the CPU tensors."""
    def run(*args):
        return kernel(*(a.to(DEVICE) if torch.is_tensor(a) else a for a in args)).cpu()
    return run


entmax_triton = on_device(fused_triton.entmax_triton)
entmax15_triton = on_device(fused_triton.entmax15_triton)
sparsemax_triton = on_device(fused_triton.sparsemax_triton)
topk_triton = on_device(fused_triton.topk_triton)

ALPHAS = [1.01, 1.05, 1.2, 1.5, 1.7, 1.9, 1.99, 2.0]


def grads(fn, scores, params=()):
    """``fn(scores)`` and its gradients for the scores and ``params``."""
    scores = scores.detach().requires_grad_()
    out = fn(scores)
    upstream = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return (out, *torch.autograd.grad(out, [scores, *params], upstream))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_entmax_matches_the_eager_solver_and_the_entmax_package(alpha):
    scores = with_ties(random_scores(shape=(2, 3, 5, 11), seed=3))
    probs = entmax_triton(scores, alpha)
    torch.testing.assert_close(probs, entmax_newton(scores, alpha), atol=1e-10, rtol=0)
    torch.testing.assert_close(probs, entmax_bisect(scores, alpha, n_iter=100), atol=1e-10,
                               rtol=0)
    assert (probs[torch.isneginf(scores)] == 0).all()


@pytest.mark.parametrize("alpha", ALPHAS)
def test_float32_agrees_with_float64_bisection_to_float32_precision(alpha):
    scores = random_scores(shape=(4, 4, 6, 40), seed=4) * 3
    wide = entmax_bisect(scores, alpha, n_iter=100)
    assert (entmax_triton(scores.float(), alpha) - wide).abs().max() < 5e-6


def test_sparsemax_and_entmax15_cases_equal_the_general_kernel():
    scores = with_ties(random_scores(seed=5))
    general = torch.tensor(2.0, dtype=scores.dtype).view(1, 1, 1, 1)
    torch.testing.assert_close(sparsemax_triton(scores), entmax_triton(scores, general),
                               atol=1e-12, rtol=0)
    general = torch.tensor(1.5, dtype=scores.dtype).view(1, 1, 1, 1)
    torch.testing.assert_close(entmax15_triton(scores), entmax_triton(scores, general),
                               atol=1e-12, rtol=0)


def test_per_head_alpha_gradients_equal_the_eager_solver():
    scores = with_ties(random_scores(shape=(2, 3, 4, 9), seed=6))
    alpha = torch.tensor([1.05, 1.5, 2.0], dtype=torch.float64).view(1, 3, 1, 1)
    alpha.requires_grad_()
    for ours, eager in zip(grads(lambda s: entmax_triton(s, alpha), scores, [alpha]),
                           grads(lambda s: entmax_newton(s, alpha), scores, [alpha])):
        torch.testing.assert_close(ours, eager, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("alpha", [2.0, 1.5, 1.3])
def test_fixed_alpha_gradients_equal_the_eager_solver(alpha):
    scores = with_ties(random_scores(shape=(2, 2, 3, 13), seed=7))
    for ours, eager in zip(grads(lambda s: entmax_triton(s, alpha), scores),
                           grads(lambda s: entmax_newton(s, alpha), scores)):
        torch.testing.assert_close(ours, eager, atol=1e-10, rtol=0)


def test_gradcheck_in_float64_for_scores_and_alpha():
    scores = random_scores(shape=(1, 2, 3, 6), seed=8).requires_grad_()
    alpha = torch.tensor([1.3, 1.8], dtype=torch.float64).view(1, 2, 1, 1).requires_grad_()
    assert torch.autograd.gradcheck(lambda s, a: entmax_triton(s, a), (scores, alpha))
    assert torch.autograd.gradcheck(lambda s: topk_triton(s, 3), (scores,))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 70), cols=st.integers(1, 70), alpha=st.floats(1.01, 2.0),
       seed=st.integers(0, 2**16))
def test_any_shape_sums_to_one_and_matches_the_eager_solver(rows, cols, alpha, seed):
    """Row counts and lengths around the block sizes (the last block part padding)."""
    scores = random_scores(shape=(rows, cols), seed=seed)
    probs = entmax_triton(scores, alpha)
    torch.testing.assert_close(probs.sum(-1), torch.ones(rows, dtype=scores.dtype))
    torch.testing.assert_close(probs, entmax_newton(scores, alpha), atol=1e-9, rtol=0)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_topk_matches_the_general_kernel_with_ties_and_short_rows(k):
    scores = with_ties(random_scores(shape=(2, 3, 5, 11), seed=9))
    scores[1, 1, 1] = torch.tensor([2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.1, -1.0])
    for ours, eager in zip(grads(lambda s: topk_triton(s, k), scores),
                           grads(lambda s: topk_softmax(s, k), scores)):
        torch.testing.assert_close(ours, eager, atol=1e-12, rtol=0)
    tied = topk_triton(scores, 3)[1, 1, 1]
    assert (tied[:4] > 0).all() and (tied[4:] == 0).all()        # all four tied maxima kept


def test_normalisers_with_attn_impl_triton_equal_the_eager_ones():
    scores = random_scores(shape=(2, 3, 4, 9), seed=10).float()
    scores[0, 0, 0] = NEG_INF                                    # a row with every key masked
    for name in ("topk", "sparsemax", "entmax15", "entmax_alpha"):
        options = NormalizerOptions(topk=3, entmax_alpha_init="random")
        torch.manual_seed(0)
        eager = build_normalizer(name, 3, options)
        torch.manual_seed(0)
        fused = build_normalizer(name, 3, NormalizerOptions(**{**options.__dict__,
                                                               "attn_impl": "triton"}))
        expected, *expected_grads = grads(eager, scores, list(eager.parameters()))
        fused.to(DEVICE)
        weights, *weight_grads = grads(on_device(fused), scores, list(fused.parameters()))
        torch.testing.assert_close(weights, expected, atol=2e-6, rtol=0)
        assert (weights[0, 0, 0] == 0).all()
        for ours, reference in zip(weight_grads, expected_grads):
            torch.testing.assert_close(ours.cpu(), reference, atol=2e-5, rtol=1e-4)


def test_cpu_scores_without_the_interpreter_get_one_clear_line(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(SettingsError, match="runs on a CUDA device .* this run is on the CPU"):
        fused_triton.entmax_triton(torch.randn(2, 5), 1.5)


def test_rows_longer_than_a_program_holds_are_refused():
    with pytest.raises(SettingsError, match="rows of at most 16384 keys; these have 16385"):
        topk_triton(torch.randn(1, fused_triton.MAX_COLS + 1), 3)


def test_without_triton_the_flag_is_refused_when_the_model_is_built(monkeypatch):
    monkeypatch.setattr(fused_triton, "have_triton", lambda: False)
    with pytest.raises(SettingsError, match="--attn-impl triton needs the triton package"):
        build_normalizer("sparsemax", 2, NormalizerOptions(attn_impl="triton"))


@pytest.mark.parametrize("fn,params", candidates("triton"))
def test_every_triton_candidate_zeroes_rows_with_every_key_masked(fn, params):
    assert_empty_rows_give_zeros(on_device(fn), params)
