"""Kernel smoothers (Tsai et al. 2019): each kernel against a direct numpy computation,
the exponential kernel against softmax attention, products of kernels, rows that cannot
be normalised, float64 gradients."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_attn_plugin.normalizers.kernels import (
    KERNELS,
    Gram,
    gram,
    lookup_gram,
    relative_distances,
    relative_sinusoid_gram,
    sinusoid,
    smoother_weights,
)


def numpy_kernel(kind, q, k):
    """k(q_i, k_j) one pair at a time, straight from the definitions."""
    d = q.shape[-1]
    out = np.zeros((q.shape[0], k.shape[0]))
    for i in range(q.shape[0]):
        for j in range(k.shape[0]):
            dot = float(q[i] @ k[j])
            out[i, j] = {"linear": dot, "polynomial": dot ** 2,
                         "exponential": math.exp(dot / math.sqrt(d)),
                         "rbf": math.exp(-float(((q[i] - k[j]) ** 2).sum()) / math.sqrt(d))}[kind]
    return out


def inputs(seed, t=3, s=5, d=4, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t, d, generator=g, dtype=dtype),
            torch.randn(s, d, generator=g, dtype=dtype))


@pytest.mark.parametrize("kind", KERNELS)
def test_each_kernel_matches_numpy(kind):
    q, k = inputs(0)
    mask = torch.tensor([True, True, False, True, True])
    expected = numpy_kernel(kind, q.numpy(), k.numpy()) * mask.numpy()
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(smoother_weights(gram(kind, q, k), mask).numpy(), expected,
                               rtol=1e-10, atol=1e-12)


def test_exponential_kernel_smoother_is_softmax_attention():
    q, k = inputs(1, t=4, s=6, d=8)
    mask = torch.ones(4, 6, dtype=torch.bool).tril(1)
    scores = (q @ k.T / math.sqrt(8)).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(smoother_weights(gram("exponential", q, k), mask),
                               torch.softmax(scores, -1))


def test_product_kernels_multiply():
    q, k = inputs(2)
    exp_, rbf, poly = (gram(kind, q, k) for kind in ("exponential", "rbf", "polynomial"))
    both = (exp_ * rbf)
    assert both.log is not None  # stays in log space
    direct = numpy_kernel("exponential", q.numpy(), k.numpy()) * numpy_kernel(
        "rbf", q.numpy(), k.numpy())
    np.testing.assert_allclose(smoother_weights(both).numpy(),
                               direct / direct.sum(-1, keepdims=True), rtol=1e-10)
    mixed = numpy_kernel("polynomial", q.numpy(), k.numpy()) * numpy_kernel(
        "exponential", q.numpy(), k.numpy())
    np.testing.assert_allclose(smoother_weights(poly * exp_).numpy(),
                               mixed / mixed.sum(-1, keepdims=True), rtol=1e-10)


def test_rows_that_cannot_be_normalised_give_finite_weights():
    # all keys masked: zero weights, zero gradients, for every kernel
    for kind in KERNELS:
        q, k = (x.requires_grad_() for x in inputs(3))
        weights = smoother_weights(gram(kind, q, k), torch.zeros(5, dtype=torch.bool))
        assert torch.equal(weights, torch.zeros_like(weights))
        weights.sum().backward()
        assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
    # polynomial with a zero query: every kernel value 0, weights 0
    q, k = inputs(4)
    q[0] = 0
    assert torch.equal(smoother_weights(gram("polynomial", q, k))[0], torch.zeros(5,
                                                                           dtype=q.dtype))
    # linear values that cancel: large but finite, never NaN
    weights = smoother_weights(Gram(value=torch.tensor([[1.0, -1.0, 0.0]])))
    assert torch.isfinite(weights).all() and weights.abs().max() > 1e3
    # exponential scores far apart do not overflow
    huge = Gram(log=torch.tensor([[1e4, 0.0, -1e4]]))
    torch.testing.assert_close(smoother_weights(huge), torch.tensor([[1.0, 0.0, 0.0]]))


@pytest.mark.parametrize("kind", KERNELS)
def test_float64_gradcheck(kind):
    q, k = (x.requires_grad_() for x in inputs(5, t=2, s=4, d=3))
    mask = torch.tensor([True, False, True, True])
    values = torch.randn(4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    assert torch.autograd.gradcheck(
        lambda a, b: smoother_weights(gram(kind, a, b), mask) @ values, (q, k))


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(["polynomial", "exponential", "rbf"]), st.integers(0, 10_000),
       st.integers(1, 6))
def test_non_negative_kernels_give_distributions(kind, seed, keys):
    q, k = inputs(seed, t=3, s=keys, d=4)
    mask = torch.rand(3, keys, generator=torch.Generator().manual_seed(seed)) > 0.3
    mask[:, 0] = True
    weights = smoother_weights(gram(kind, q, k), mask)
    assert (weights >= 0).all() and weights[~mask].eq(0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, dtype=q.dtype))


# -- positional kernels --------------------------------------------------------------------------

def test_sinusoid_is_vaswanis():
    positions = torch.tensor([0, 3, -2, 7])
    table = sinusoid(positions, 6).numpy()
    for row, p in zip(table, positions.tolist()):
        for i in range(3):
            angle = p / 10000 ** (2 * i / 6)
            assert row[i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert row[3 + i] == pytest.approx(math.cos(angle), abs=1e-6)


def test_positional_kernels_match_numpy():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 4, generator=g, dtype=torch.float64)           # 3 queries, d = 4
    table = torch.randn(5, 4, generator=g, dtype=torch.float64)       # a_{-2} .. a_{2}
    q_pos, k_pos = torch.tensor([4, 5, 6]), torch.tensor([0, 1, 2, 3, 4, 5, 6])
    distances = relative_distances(q_pos, k_pos)
    looked_up = lookup_gram(x, table, distances).log.numpy()
    relative = relative_sinusoid_gram(x, distances).log.numpy()
    for i, tq in enumerate(q_pos.tolist()):
        for j, tk in enumerate(k_pos.tolist()):
            a = table[min(max(tq - tk, -2), 2) + 2].numpy()
            assert looked_up[i, j] == pytest.approx(float(x[i].numpy() @ a))
            r = [math.sin((tq - tk) / 10000 ** (2 * p / 4)) for p in range(2)] + \
                [math.cos((tq - tk) / 10000 ** (2 * p / 4)) for p in range(2)]
            assert relative[i, j] == pytest.approx(float(x[i].numpy() @ np.array(r)), abs=1e-6)


def test_a_given_span_of_distances_changes_nothing_and_a_short_one_is_refused():
    q_pos, k_pos = torch.tensor([[4, 5, 6]]), torch.tensor([[0, 1, 2, 3, 4, 5, 6]])
    distances = relative_distances(q_pos, k_pos)
    x = torch.randn(1, 3, 4, dtype=torch.float64)
    measured = relative_sinusoid_gram(x, distances).log
    torch.testing.assert_close(relative_sinusoid_gram(x, distances, span=(-6, 6)).log,
                               measured)
    with pytest.raises(RuntimeError):
        relative_sinusoid_gram(x, distances, span=(0, 6))


def test_product_with_a_positional_kernel_is_a_distribution():
    q, k = inputs(8)
    distances = relative_distances(torch.arange(3), torch.arange(5))
    product = gram("exponential", q, k) * relative_sinusoid_gram(q, distances)
    weights = smoother_weights(product, distances >= 0)       # causal
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, dtype=q.dtype))
    assert weights[0, 1:].eq(0).all()
