"""Budget sparsemax (sparse_attn_plugin.normalizers.budget): the entmax package's
budget_bisect (values and gradients, float64), the optimality conditions and a bisection
reference, sparsemax at budget 1, float64 gradcheck and gradgradcheck in the scores and the
budget, and the library contract (masks, non-finite rows, too few entries for the budget,
dtypes, dims, offsets) by hypothesis."""

import math
from functools import partial

import entmax
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_attn_plugin.functional import sparsemax
from sparse_attn_plugin.normalizers.budget import BudgetSparsemax, budget_sparsemax

from helpers import slice_contract as contract

BUDGETS = (0.5, 1.0, 1.5, 2.0, 3.0, 5.5)


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("seed", range(3))
def test_weights_and_gradients_match_entmax_budget_bisect(budget, seed):
    p, grad, theirs, their_grad = contract.with_gradients(
        lambda x: budget_sparsemax(x, budget),
        lambda x: entmax.budget_bisect(x, budget, n_iter=200), seed)
    torch.testing.assert_close(p, theirs, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad, their_grad, rtol=0, atol=1e-12)


def bisection_reference(x, budget, steps=200):
    """clip(x - tau, 0, 1) with sum = budget, tau by bisection in float64 (numpy)."""
    lo = x.min(-1, keepdims=True) - 1.0
    hi = x.max(-1, keepdims=True)
    for _ in range(steps):
        mid = (lo + hi) / 2
        over = np.clip(x - mid, 0, 1).sum(-1, keepdims=True) > budget
        lo, hi = np.where(over, mid, lo), np.where(over, hi, mid)
    return np.clip(x - (lo + hi) / 2, 0, 1)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 9), fraction=st.floats(0.05, 1.0), scale=st.floats(0.1, 10.0),
       seed=st.integers(0, 2 ** 16))
def test_the_weights_meet_the_optimality_conditions(size, fraction, scale, seed):
    budget = fraction * size
    x = contract.seeded_scores(rows=4, size=size, seed=seed, scale=scale)
    p = budget_sparsemax(x, budget)
    assert (p >= 0).all() and (p <= 1).all()
    torch.testing.assert_close(p.sum(-1), torch.full((4,), budget, dtype=torch.float64),
                               rtol=0, atol=1e-12 * size * scale)
    torch.testing.assert_close(p, torch.from_numpy(bisection_reference(x.numpy(), budget)),
                               rtol=0, atol=1e-12 * scale)
    for row, weights in zip(x, p):                        # one tau: x - p on the free set
        free = (weights > 0) & (weights < 1)                  # 0 and 1 exactly at bounds
        if free.any():
            tau = (row - weights)[free]
            assert tau.max() - tau.min() <= 1e-12 * scale
            assert (row[weights == 0] <= tau.min() + 1e-12 * scale).all()
            assert (row[weights == 1] - 1 >= tau.max() - 1e-12 * scale).all()


def test_budget_one_is_sparsemax_and_the_full_budget_is_all_ones():
    x = contract.seeded_scores(rows=5, size=6, seed=4, scale=2.0)
    torch.testing.assert_close(budget_sparsemax(x, 1), sparsemax(x), rtol=0, atol=1e-15)
    assert torch.equal(budget_sparsemax(x, 6), torch.ones_like(x))
    x[0, :3] = -math.inf
    full = budget_sparsemax(x[:1], 3)
    assert torch.equal(full, torch.tensor([[0.0, 0, 0, 1, 1, 1]], dtype=torch.float64))


def test_an_integer_budget_with_clear_winners_picks_them_exactly():
    x = torch.tensor([[5.0, 0.1, 3.0, -2.0, 0.0]])
    assert torch.equal(budget_sparsemax(x, 2), torch.tensor([[1.0, 0, 1, 0, 0]]))


@pytest.mark.parametrize("budget", (0.7, 1.6, 2.4))
def test_gradcheck_and_gradgradcheck_in_scores_and_budget(budget):
    # small scores and a fractional budget: away from the kinks where a set changes
    assert contract.gradchecks_with_parameter(budget_sparsemax, budget, scale=0.5)


def test_the_budget_gradient_is_the_mean_over_the_free_entries():
    x = torch.tensor([[2.0, 0.3, 0.1, -1.0, 0.35]], dtype=torch.float64)
    budget = torch.tensor([[2.0]], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([[1.0, 2.0, 3.0, 4.0, 7.0]], dtype=torch.float64)
    p = budget_sparsemax(x, budget)                             # 1 at bound, 3 free, 1 zero
    assert p[0, 0] == 1 and p[0, 3] == 0 and ((p[0, [1, 2, 4]] > 0) & (p[0, [1, 2, 4]] < 1)).all()
    (p * g).sum().backward()
    torch.testing.assert_close(budget.grad, torch.tensor([[4.0]], dtype=torch.float64))


def test_budget_zero_gives_zeros_and_the_budget_its_gradient_from_above():
    # the only feasible point is 0 (the entmax package's own tests take budget 0); as B
    # grows from 0 the largest entries (here two, tied) share it
    x = torch.tensor([[0.5, 2.0, -1.0, 2.0, -math.inf]], dtype=torch.float64,
                     requires_grad=True)
    budget = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    g = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]], dtype=torch.float64)
    p = budget_sparsemax(x, budget)
    assert torch.equal(p, torch.zeros_like(p))
    (p * g).sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    small = budget_sparsemax(x.detach(), 1e-6)
    torch.testing.assert_close(budget.grad, (small * g).sum(-1, keepdim=True) / 1e-6)
    assert budget.grad.item() == 3.0
    assert torch.equal(budget_sparsemax(x.detach(), 0.0), torch.zeros_like(p))


def test_budget_per_row_broadcasts_along_any_dim():
    x = contract.seeded_scores(rows=12, size=5, seed=7).view(3, 4, 5)
    budget = torch.tensor([1.0, 2.5, 4.0], dtype=torch.float64).view(3, 1, 1)
    p = budget_sparsemax(x, budget)
    for i, value in enumerate(budget.flatten().tolist()):
        torch.testing.assert_close(p[i], budget_sparsemax(x[i], value), rtol=0, atol=0)
    torch.testing.assert_close(budget_sparsemax(x.transpose(1, 2), budget, dim=1),
                               p.transpose(1, 2), rtol=0, atol=0)


def test_the_module_is_the_function():
    x = contract.seeded_scores(seed=3).view(2, 3, 7)
    torch.testing.assert_close(BudgetSparsemax(1.5, dim=1)(x), budget_sparsemax(x, 1.5, dim=1),
                               rtol=0, atol=0)
    assert "budget=1.5" in repr(BudgetSparsemax(1.5))


@pytest.mark.parametrize("call,words", [
    (lambda x: budget_sparsemax(x, -1e-9), "budget_sparsemax needs budget in [0, 4]"),
    (lambda x: budget_sparsemax(x, -1.0), "budget_sparsemax needs budget in [0, 4]"),
    (lambda x: budget_sparsemax(x, 4.5), "got 4.5"),
    (lambda x: budget_sparsemax(x, 3.5, dim=0), "budget in [0, 3]"),
    (lambda x: budget_sparsemax(x, math.nan), "budget_sparsemax needs budget in"),
    (lambda x: budget_sparsemax(x, math.inf), "budget_sparsemax needs budget in"),
    (lambda x: budget_sparsemax(x, False), "got False"),
    (lambda x: budget_sparsemax(x, torch.tensor([[1.0], [-1.0], [5.0]])),
     "2 of 3 values are not"),
    (lambda x: budget_sparsemax(x, torch.tensor([[1], [1], [1]])),
     "floating-point budget tensor"),
    (lambda x: budget_sparsemax(x, torch.full((3, 4), 2.0)), "must broadcast to x's shape"),
])
def test_out_of_domain_budgets_are_one_line_value_errors(call, words):
    with pytest.raises(ValueError) as raised:
        call(torch.randn(3, 4))
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_a_slice_with_fewer_entries_than_the_budget_is_nan_with_nan_gradient():
    x = contract.seeded_scores(rows=4, size=5, seed=9)
    clean = budget_sparsemax(x, 2.5)
    x[1, :3] = -math.inf                                        # 2 entries left for 2.5
    x[2] = -math.inf                                            # none: zeros, as any row
    x.requires_grad_()
    p = budget_sparsemax(x, 2.5)
    assert p[1].isnan().all() and (p[2] == 0).all()
    assert torch.equal(p[[0, 3]], clean[[0, 3]])
    p.sum().backward()
    assert x.grad[1].isnan().all() and (x.grad[2] == 0).all()
    assert x.grad[[0, 3]].isfinite().all()


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data(),
       fraction=st.one_of(st.just(0.0), st.floats(0.1, 1.0)),
       dtype=st.sampled_from(contract.DTYPES),
       offset=st.sampled_from((0.0, 100.0, -1e4)), special=st.sampled_from(contract.SPECIALS),
       target=st.integers(0, 200), seed=st.integers(0, 2 ** 16))
def test_contract_over_shapes_dims_dtypes_offsets_masks_and_non_finite(
        shape, data, fraction, dtype, offset, special, target, seed):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    budget = fraction * shape[dim]
    x = contract.scores_with_specials(shape, dim, seed, special, target)
    rows = x.movedim(dim, -1).reshape(-1, shape[dim])
    too_few = (rows > -math.inf).sum(-1) < budget
    contract.check_contract(partial(budget_sparsemax, budget=budget), x, dim, dtype, offset,
                   torch.full((rows.size(0),), budget, dtype=torch.float64), too_few)


def test_an_empty_dim_gives_empty_weights():
    assert budget_sparsemax(torch.empty(3, 0), 2.0).shape == (3, 0)


@pytest.mark.parametrize("scale", [1e-3, 0.3, 5.0])
@pytest.mark.parametrize("budget", [0.5, 2.0, 7.5, 40.0])
def test_rows_longer_than_their_support_are_solved_from_their_largest_entries(scale, budget):
    """Rows of 300 entries: the threshold from the largest few (grown where the weights
    reach past them, as at scale 1e-3, where every entry is free) is the whole row's,
    weights and gradients, against one sort of every point and the bisection reference."""
    from sparse_attn_plugin.normalizers import budget as module

    x = contract.seeded_scores(rows=6, size=300, seed=5, scale=scale)
    x[0, :100] = -math.inf
    shifted = x - x.amax(-1, keepdim=True)
    b = torch.full((6, 1), budget, dtype=x.dtype)
    tau = module._budget_threshold_of_top(shifted, b, 4)
    torch.testing.assert_close(tau, module._budget_threshold(shifted, b), rtol=0, atol=1e-12)
    leaf = x.clone().requires_grad_()
    p = budget_sparsemax(leaf, budget)
    reference = np.concatenate([np.zeros((1, 100)), bisection_reference(x[:1, 100:].numpy(),
                                                                         budget)], 1)
    reference = np.concatenate([reference, bisection_reference(x[1:].numpy(), budget)])
    np.testing.assert_allclose(p.detach().numpy(), reference, rtol=0, atol=1e-12)
    g = contract.seeded_scores(rows=6, size=300, seed=6)
    (p * g).sum().backward()
    free = (p > 0) & (p < 1)
    expected = torch.where(free, g - (g * free).sum(-1, keepdim=True) / free.sum(-1, keepdim=True),
                           torch.zeros_like(g))
    torch.testing.assert_close(leaf.grad, expected, rtol=0, atol=1e-12)
