"""alpha-normmax (sparse_attn_plugin.normalizers.normmax): the entmax package's
normmax_bisect (values and gradients, float64, the alphas its own tests use), an exact
sort-based reference at alpha = 2 and the identity with 1.5-entmax there, the optimality
conditions at any alpha, float64 gradcheck and gradgradcheck in the scores and alpha, and
the library contract (masks, non-finite rows, dtypes, dims, offsets) by hypothesis."""

import math
from functools import partial

import entmax
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_attn_plugin.functional import entmax15
from sparse_attn_plugin.normalizers.normmax import Normmax, normmax

from helpers import slice_contract as contract

#: The alphas of the entmax package's own normmax tests, and two more.
ALPHAS = (1.2, 1.5, 2.0, 5.0, 10.0, 1000.0)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("seed", range(3))
def test_weights_and_gradients_match_entmax_normmax_bisect(alpha, seed):
    p, grad, theirs, their_grad = contract.with_gradients(
        lambda x: normmax(x, alpha), lambda x: entmax.normmax_bisect(x, alpha, n_iter=200), seed)
    torch.testing.assert_close(p, theirs, rtol=0, atol=1e-12)
    assert grad.isfinite().all()
    # entmax's gradient multiplies ||p||^(alpha - 1) by p^(2 - alpha): at alpha = 1000 it is
    # 0 * inf = NaN on rows with several entries in the support; ours is finite there
    finite = their_grad.isfinite().all(-1)
    assert finite.any()
    torch.testing.assert_close(grad[finite], their_grad[finite], rtol=1e-9, atol=1e-12)


def sparse_reference(x):
    """normmax at alpha = 2 exactly, row by row: p proportional to (x - tau)_+ with tau the
    smaller root of sum_{j <= k} (x_j - tau)^2 = 1 over the top k entries, for the k whose
    root lies between the k-th and (k+1)-th largest."""
    out = np.zeros_like(x)
    for i, row in enumerate(x):
        top = np.sort(row)[::-1]
        for k in range(1, len(top) + 1):
            s1, s2 = top[:k].sum(), (top[:k] ** 2).sum()
            disc = s1 * s1 - k * (s2 - 1)
            if disc < 0:
                continue
            tau = (s1 - math.sqrt(disc)) / k
            if tau < top[k - 1] and (k == len(top) or top[k] <= tau):
                break
        u = np.maximum(row - tau, 0)
        out[i] = u / u.sum()
    return out


@pytest.mark.parametrize("seed", range(4))
def test_alpha_two_is_the_exact_quadratic_root_and_rescaled_entmax15(seed):
    x = contract.seeded_scores(rows=8, size=5 + seed, seed=seed, scale=0.5 + seed)
    p = normmax(x, 2)
    torch.testing.assert_close(p, torch.from_numpy(sparse_reference(x.numpy())), rtol=0,
                               atol=1e-14)
    # the same threshold solves 1.5-entmax of 2x, whose weights are (x - tau)_+^2
    root = entmax15(2 * x).sqrt()
    torch.testing.assert_close(p, root / root.sum(-1, keepdim=True), rtol=0, atol=1e-14)


def kkt_residual(x, p, alpha):
    """How far ``p`` is from the optimality conditions of max <x, p> - ||p||_alpha on the
    simplex: ``x_j - (p_j / ||p||)^(alpha - 1)`` is one ``tau`` on the support, and every
    entry off it has ``x_j <= tau`` (computed in float64 with exact powers)."""
    x, p = x.double().numpy(), p.double().numpy()
    worst = 0.0
    for row, weights in zip(x, p):
        on = weights > 0
        ratio = weights[on] / weights[on].max()
        norm_ratio = np.exp(np.log(np.sum(np.exp(alpha * np.log(ratio)))) / alpha)
        tau = row[on] - (ratio / norm_ratio) ** (alpha - 1)
        worst = max(worst, np.ptp(tau), np.max(row[~on] - tau.mean(), initial=-1.0))
    return worst


@settings(max_examples=40, deadline=None)
@given(alpha=st.floats(1.05, 50.0), size=st.integers(1, 9), scale=st.floats(0.1, 10.0),
       seed=st.integers(0, 2 ** 16))
def test_the_weights_meet_the_optimality_conditions_at_any_alpha(alpha, size, scale, seed):
    x = contract.seeded_scores(rows=4, size=size, seed=seed, scale=scale)
    p = normmax(x, alpha)
    torch.testing.assert_close(p.sum(-1), torch.ones(4, dtype=torch.float64))
    assert kkt_residual(x, p, alpha) < 1e-9
    assert torch.equal(normmax(x, alpha, n_iter=500), p)      # converged, not capped


@pytest.mark.parametrize("alpha", (1.2, 2.0, 5.0))
def test_gradcheck_and_gradgradcheck_in_scores_and_alpha(alpha):
    assert contract.gradchecks_with_parameter(normmax, alpha)


def test_gradcheck_at_alpha_1000_where_entmax_gives_nan():
    x = contract.seeded_scores(rows=4, size=6, seed=2).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: normmax(x, 1000.0), (x,))


def test_alpha_per_head_broadcasts_and_gets_its_gradient_summed():
    x = contract.seeded_scores(rows=2 * 3 * 4, size=5, seed=7).view(2, 3, 4, 5)
    alpha = torch.tensor([1.5, 2.0, 4.0], dtype=torch.float64).view(1, 3, 1, 1)
    p = normmax(x, alpha)
    for head, value in enumerate(alpha.flatten().tolist()):
        torch.testing.assert_close(p[:, head], normmax(x[:, head], value), rtol=0, atol=1e-15)
    # along another dim, alpha follows it
    torch.testing.assert_close(normmax(x.transpose(1, 3), alpha.transpose(1, 3), dim=1),
                               p.transpose(1, 3), rtol=0, atol=1e-15)
    alpha.requires_grad_()
    (normmax(x, alpha) * x).sum().backward()
    assert alpha.grad.shape == (1, 3, 1, 1) and alpha.grad.abs().sum() > 0


def test_the_module_is_the_function():
    x = contract.seeded_scores(seed=3).view(2, 3, 7)
    torch.testing.assert_close(Normmax(3.0, dim=1)(x), normmax(x, 3.0, dim=1), rtol=0, atol=0)
    assert "alpha=3.0" in repr(Normmax(3.0))


@pytest.mark.parametrize("call,words", [
    (lambda x: normmax(x, 1.0), "normmax needs alpha in (1, inf), got 1.0"),
    (lambda x: normmax(x, 0.5), "normmax needs alpha in (1, inf)"),
    (lambda x: normmax(x, math.inf), "normmax needs alpha in (1, inf)"),
    (lambda x: normmax(x, math.nan), "normmax needs alpha in (1, inf)"),
    (lambda x: normmax(x, True), "normmax needs alpha in (1, inf), got True"),
    (lambda x: normmax(x, "two"), "normmax needs alpha in (1, inf)"),
    (lambda x: normmax(x, torch.tensor([[2.0], [1.0], [3.0]])), "1 of 3 values are not"),
    (lambda x: normmax(x, torch.tensor([[2], [2], [2]])), "floating-point alpha tensor"),
    (lambda x: normmax(x, torch.full((3, 4), 2.0)), "must broadcast to x's shape"),
    (lambda x: normmax(x, 2.0, n_iter=0), "normmax needs an integer n_iter >= 1"),
    (lambda x: normmax(x, 2.0, n_iter=2.5), "normmax needs an integer n_iter >= 1"),
    (lambda x: Normmax(alpha=1.0), "Normmax needs alpha in (1, inf)"),
])
def test_out_of_domain_parameters_are_one_line_value_errors(call, words):
    with pytest.raises(ValueError) as raised:
        call(torch.randn(3, 4))
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_integer_scores_are_a_type_error():
    with pytest.raises(TypeError, match="normmax needs floating-point scores"):
        normmax(torch.ones(2, 3, dtype=torch.long))


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data(),
       alpha=st.sampled_from((1.3, 2.0, 7.0)), dtype=st.sampled_from(contract.DTYPES),
       offset=st.sampled_from((0.0, 100.0, -1e4)), special=st.sampled_from(contract.SPECIALS),
       target=st.integers(0, 200), seed=st.integers(0, 2 ** 16))
def test_contract_over_shapes_dims_dtypes_offsets_masks_and_non_finite(
        shape, data, alpha, dtype, offset, special, target, seed):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = contract.scores_with_specials(shape, dim, seed, special, target)
    rows = x.numel() // shape[dim]
    contract.check_contract(partial(normmax, alpha=alpha), x, dim, dtype, offset,
                   torch.ones(rows, dtype=torch.float64))


def test_a_non_finite_row_is_nan_with_nan_gradient_and_leaves_the_others_bit_for_bit():
    x = contract.seeded_scores(rows=4, size=5, seed=9)
    clean = normmax(x, 3.0)
    x[1, 3], x[2] = math.inf, -math.inf
    x.requires_grad_()
    p = normmax(x, 3.0)
    assert p[1].isnan().all() and (p[2] == 0).all()
    assert torch.equal(p[[0, 3]], clean[[0, 3]])
    p[[0, 1, 3]].sum().backward()
    assert x.grad[1].isnan().all() and (x.grad[2] == 0).all()
    assert x.grad[[0, 3]].isfinite().all()


def test_an_empty_dim_gives_empty_weights():
    assert normmax(torch.empty(3, 0), 2.0).shape == (3, 0)


#: How far float32 weights may be from float64 ones of the same scores: rounding, which
#: weighs more at large alpha, where the weights are steep in the scores near the threshold.
FLOAT32_TOLERANCE = {1.05: 2e-7, 2.0: 2e-7, 5.0: 1e-6, 1000.0: 3e-6}


@pytest.mark.parametrize("alpha", FLOAT32_TOLERANCE)
@pytest.mark.parametrize("offset", (0.0, 1e3, 1e6))
def test_float32_weights_are_within_rounding_of_float64_ones_of_the_same_scores(alpha, offset):
    # (a solver stopped at its tolerance, without a last Newton step, is further off)
    x = (contract.seeded_scores(rows=300, size=20, seed=11, scale=3.0) + offset).float()
    p32, p64 = normmax(x, alpha), normmax(x.double(), alpha)
    assert p32.dtype == torch.float32
    torch.testing.assert_close(p32.double(), p64, rtol=0, atol=FLOAT32_TOLERANCE[alpha])
