"""Normalisers: float64 gradcheck, simplex/mask properties, agreement with
independent references, half precision, and learned-alpha range."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats
from torch.func import functional_call

from sparse_attn_plugin.normalizers import (
    CONSTRAINED,
    NAMES,
    EntmaxAlpha,
    NormalizerOptions,
    TopK,
    build_normalizer,
)
from sparse_attn_plugin.site_normalizers import check_fits

from helpers.reference import apply_rows, entmax_ref, softmax_ref, topk_ref
from helpers.scores import NEG_INF, random_scores

# The normalisers of scores alone: the constrained ones also take bounds and are
# tested in test_constrained.py.
UNBOUNDED = [name for name in NAMES if name not in CONSTRAINED]
# Hard retrieval's gradient is straight-through, not the derivative of its one-hot
# forward, so gradcheck does not apply; test_hard_retrieval.py checks its formulas.
DIFFERENTIABLE = [name for name in UNBOUNDED if name != "hard"]


def make(name, heads=3, **options):
    return build_normalizer(name, heads, NormalizerOptions(**options)).double()


# --- gradients ---------------------------------------------------------------------

@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradcheck_scores(name):
    norm = make(name, topk=3, entmax_max_iter=70)
    scores = random_scores().requires_grad_()
    assert torch.autograd.gradcheck(norm, (scores,), eps=1e-6, atol=1e-5)


def test_gradcheck_alpha():
    norm = make("entmax_alpha", entmax_max_iter=70)
    logits = torch.tensor([-0.7, 0.1, 1.3], dtype=torch.float64, requires_grad=True)
    scores = random_scores(seed=1).requires_grad_()

    def fn(s, z):
        return functional_call(norm, {"alpha_logit": z}, (s,))

    assert torch.autograd.gradcheck(fn, (scores, logits), eps=1e-6, atol=1e-5)


def test_topk_gradient_reaches_only_kept_entries():
    scores = torch.tensor([[[[3.0, 1.0, 2.0, 0.5]]]], dtype=torch.float64, requires_grad=True)
    TopK(k=2)(scores)[..., 0].sum().backward()
    assert scores.grad[0, 0, 0, 1] == 0 and scores.grad[0, 0, 0, 3] == 0
    assert scores.grad[0, 0, 0, 0] != 0 and scores.grad[0, 0, 0, 2] != 0


# --- properties --------------------------------------------------------------------

score_arrays = hnp.arrays(
    np.float64,
    hnp.array_shapes(min_dims=4, max_dims=4, min_side=1, max_side=6),
    elements=st.one_of(st.floats(-50, 50), st.just(-np.inf)),
)


@pytest.mark.parametrize("name", UNBOUNDED)
@settings(max_examples=60, deadline=None)
@given(scores=score_arrays, k=st.integers(1, 7))
def test_simplex_and_masks(name, scores, k):
    heads = scores.shape[1]
    probs = build_normalizer(name, heads, NormalizerOptions(topk=k)).double()(
        torch.from_numpy(scores)).detach().numpy()
    masked = np.isneginf(scores)
    empty = masked.all(axis=-1)
    assert np.isfinite(probs).all()
    assert (probs >= 0).all()
    assert (probs[masked] == 0).all(), "a masked key got weight"
    assert (probs[empty] == 0).all(), "a fully masked row must give zeros"
    np.testing.assert_allclose(probs.sum(-1)[~empty], 1.0, atol=1e-6)
    if name == "topk":  # support: the entries >= the k-th largest score (ties kept)
        np.testing.assert_array_equal(probs > 0, apply_rows(topk_ref, scores, k) > 0)


@settings(max_examples=40, deadline=None)
@given(scores=hnp.arrays(np.float64, (2, 2, 3, 9), elements=st.floats(-5, 5, allow_subnormal=False),
                         unique=True), k=st.integers(1, 9))
def test_topk_support_size_is_k_without_ties(scores, k):
    probs = TopK(k)(torch.from_numpy(scores))
    assert ((probs > 0).sum(-1) == k).all()


def test_topk_clamps_k_to_unmasked_keys():
    scores = random_scores(masked_fraction=0.6, seed=3)
    np.testing.assert_allclose(TopK(k=50)(scores), torch.softmax(scores, -1), atol=1e-12)


def test_topk_train_only_is_softmax_at_inference():
    norm, scores = TopK(k=2, train_only=True), random_scores(seed=4)
    assert (norm.train()(scores) == 0).any()
    np.testing.assert_allclose(norm.eval()(scores), torch.softmax(scores, -1), atol=1e-12)


@pytest.mark.parametrize("name", UNBOUNDED)
def test_fully_masked_row_gives_zero_weights_and_gradients(name):
    scores = random_scores(seed=5)
    scores[0, 1, 2] = NEG_INF
    scores.requires_grad_()
    probs = make(name)(scores)
    assert (probs[0, 1, 2] == 0).all() and torch.isfinite(probs).all()
    (probs * torch.randn_like(probs)).sum().backward()
    assert torch.isfinite(scores.grad).all() and (scores.grad[0, 1, 2] == 0).all()


# --- agreement with independent references -----------------------------------------

def test_softmax_and_topk_match_reference():
    scores = random_scores(seed=6)
    np.testing.assert_allclose(make("softmax")(scores), apply_rows(softmax_ref, scores), atol=1e-12)
    np.testing.assert_allclose(make("topk", topk=3)(scores), apply_rows(topk_ref, scores, 3),
                               atol=1e-12)


@pytest.mark.parametrize("name,alpha", [("sparsemax", 2.0), ("entmax15", 1.5)])
def test_exact_entmax_matches_bisection_reference(name, alpha):
    scores = random_scores(seed=7)
    np.testing.assert_allclose(make(name)(scores), apply_rows(entmax_ref, scores, alpha), atol=1e-9)


def test_learned_alpha_matches_reference_per_head():
    alphas = [1.05, 1.5, 1.9]
    norm = EntmaxAlpha(num_heads=3, n_iter=80).double()
    with torch.no_grad():
        norm.alpha_logit.copy_(torch.tensor([math.log((a - 1) / (2 - a)) for a in alphas]))
    scores = random_scores(seed=8)
    probs = norm(scores).detach().numpy()
    for h, alpha in enumerate(alphas):
        np.testing.assert_allclose(probs[:, h], apply_rows(entmax_ref, scores[:, h], alpha),
                                   atol=1e-8)


def test_learned_alpha_agrees_with_exact_algorithms_at_their_alphas():
    scores = random_scores(seed=9)
    for alpha, exact in [(1.5, "entmax15"), (1.999999, "sparsemax")]:
        norm = EntmaxAlpha(3, alpha_init=alpha, n_iter=80).double()
        np.testing.assert_allclose(norm(scores).detach(), make(exact)(scores), atol=1e-5)


def test_entmax_functions_of_the_entmax_package_agree():
    from entmax import entmax15, sparsemax

    scores = random_scores(masked_fraction=0.0, seed=10)
    np.testing.assert_allclose(make("sparsemax")(scores), sparsemax(scores, dim=-1), atol=1e-12)
    np.testing.assert_allclose(make("entmax15")(scores), entmax15(scores, dim=-1), atol=1e-12)


# --- precision and learned alpha ---------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", UNBOUNDED)
def test_half_precision_is_computed_in_float32(name, dtype):
    scores = random_scores(seed=11, dtype=torch.float32)
    norm = build_normalizer(name, 3).eval()
    probs = norm(scores.to(dtype))
    assert probs.dtype == torch.float32 and torch.isfinite(probs).all()
    np.testing.assert_allclose(probs.detach(), norm(scores.to(dtype).float()).detach(), atol=1e-6)


def test_alpha_initialised_as_asked_and_stays_in_range_under_large_steps():
    norm = EntmaxAlpha(num_heads=4, alpha_init=1.3)
    np.testing.assert_allclose(norm.alpha().detach(), 1.3, atol=1e-6)
    opt = torch.optim.SGD(norm.parameters(), lr=1e4)
    scores = random_scores(shape=(2, 4, 3, 5), seed=12, dtype=torch.float32)
    for direction in (1.0, -1.0, 1.0):
        for _ in range(5):
            opt.zero_grad()
            (direction * norm(scores).pow(2).sum()).backward()
            opt.step()
            alpha = norm.alpha()
            assert ((alpha >= 1.01) & (alpha <= 2.0)).all(), alpha


@pytest.mark.parametrize("cast", [
    lambda m: m.half(), lambda m: m.bfloat16(), lambda m: m.to(torch.float16),
    lambda m: m.to("cpu", torch.bfloat16), lambda m: m.to(dtype=torch.float16),
])
def test_alpha_logit_stays_float32_when_the_module_is_cast_to_half_precision(cast):
    """fairseq's trainer calls model.half() under --fp16 (.to(bfloat16) under --bf16):
    z (and its gradient) keep their float32 values; float64 still applies."""
    norm = EntmaxAlpha(num_heads=3, alpha_init=1.03)
    norm.alpha_logit.grad = torch.tensor([1e-5, 3e-7, 0.1234567])
    z, grad = norm.alpha_logit.detach().clone(), norm.alpha_logit.grad.clone()
    assert not torch.equal(z.half().float(), z)  # float16 would change this z
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), norm)
    cast(module)
    assert module[0].weight.dtype in (torch.float16, torch.bfloat16)
    assert norm.alpha_logit.dtype == norm.alpha_logit.grad.dtype == torch.float32
    assert torch.equal(norm.alpha_logit.detach(), z) and torch.equal(norm.alpha_logit.grad, grad)
    assert isinstance(norm.alpha_logit, torch.nn.Parameter)
    assert [p is norm.alpha_logit for p in module.parameters()] == [False, False, True]
    assert norm.double().alpha_logit.dtype == torch.float64
    assert norm.float().alpha_logit.dtype == torch.float32


def test_random_alpha_init_draws_each_heads_z_from_a_standard_normal():
    """Correia et al.'s code: ``pre_alpha = nn.Parameter(torch.randn(head_count))``."""
    torch.manual_seed(0)
    z = EntmaxAlpha(num_heads=4000, alpha_init="random").alpha_logit.detach().double()
    assert stats.kstest(z.numpy(), "norm").pvalue > 0.01
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05
    torch.manual_seed(0)
    assert torch.equal(EntmaxAlpha(4000, "random").alpha_logit.detach().double(), z)  # seeded
    heads = EntmaxAlpha(num_heads=8, alpha_init="random").alpha()
    assert len(set(heads.tolist())) == 8 and ((heads >= 1.01) & (heads <= 2)).all()


@pytest.mark.parametrize("init,alpha", [(1.3, 1.3), ("1.3", 1.3), (1.5, 1.5)])
def test_numeric_alpha_init_starts_every_head_there(init, alpha):
    z = EntmaxAlpha(num_heads=4, alpha_init=init).alpha_logit.detach()
    assert torch.equal(z, torch.full((4,), math.log((alpha - 1) / (2 - alpha))))


def test_alpha_is_not_stored_as_a_parameter():
    names = [n for n, _ in EntmaxAlpha(num_heads=2).named_parameters()]
    assert names == ["alpha_logit"]


# --- bad options -------------------------------------------------------------------

@pytest.mark.parametrize("make_bad,message", [
    (lambda: TopK(k=0), "k >= 1"),
    (lambda: EntmaxAlpha(2, alpha_init=2.0), "alpha init"),
    (lambda: EntmaxAlpha(2, alpha_init=1.0), "alpha init"),
    (lambda: EntmaxAlpha(2, alpha_init="randn"), "alpha init must be 'random' or a number"),
    (lambda: EntmaxAlpha(2, n_iter=0), "integer n_iter >= 1"),
    (lambda: build_normalizer("softmaxx", 2), "unknown attention normaliser 'softmaxx'"),
    (lambda: check_fits("topk", "nowhere"), "cannot be used"),
])
def test_bad_options_are_clear(make_bad, message):
    with pytest.raises(ValueError, match=message):
        make_bad()


def test_softmax_fills_only_its_empty_rows_not_through_the_general_guard(monkeypatch):
    """On a GPU the general guard (``base.guarded``) launches eleven kernels per call, every
    decoding step: softmax, whose NaN and ``+inf`` rows are NaN by themselves, fills only
    the rows with every key masked (zeros, zero gradient) and never calls it."""
    from sparse_attn_plugin import functional
    from sparse_attn_plugin.normalizers import base

    def refuse(*args):
        raise AssertionError("softmax went through base.guarded")
    monkeypatch.setattr(base, "guarded", refuse)
    inf = float("inf")
    scores = torch.tensor([[1.0, 2.0, -inf], [-inf, -inf, -inf], [0.0, float("nan"), 1.0],
                           [inf, 0.0, 1.0]], dtype=torch.float64, requires_grad=True)
    for weights in (base.Softmax()(scores), functional.softmax(scores)):
        torch.testing.assert_close(weights[0], torch.softmax(scores[0].detach(), -1))
        assert torch.equal(weights[1], torch.zeros(3, dtype=torch.float64))
        assert weights[2:].isnan().all()
        grad, = torch.autograd.grad(weights, scores, torch.ones_like(weights))
        assert torch.equal(grad[1], torch.zeros(3, dtype=torch.float64))
        assert grad[2:].isnan().all() and torch.isfinite(grad[:2]).all()
