"""Issue 44's contract for the constrained normalisers (csoftmax, csparsemax), through
the public API (``sparse_attn_plugin.functional`` and the modules): shift invariance,
non-finite scores and bounds, dtypes and empty rows, second-order gradients. Checked
against float64 references solved here by bisection on the threshold, and by seeded
hypothesis properties over shapes, dtypes, offsets, masks, ties and bounds."""

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import sparse_attn_plugin.functional as F
from sparse_attn_plugin.normalizers import CSoftmax, CSparsemax, InfeasibleBounds

NAN, INF = math.nan, math.inf
FUNCTIONS = {"csoftmax": F.csoftmax, "csparsemax": F.csparsemax}
MODULES = {"csoftmax": CSoftmax, "csparsemax": CSparsemax}
HALF = (torch.float16, torch.bfloat16)


# --- references: bisection on the threshold, float64, row by row (vectorised) --------

def weights_at(name, z, u, t):
    """p(t): csoftmax ``min(u, exp(z + t))`` (t = log c), csparsemax ``clip(z - t, 0, u)``
    (t = tau), 0 on masked keys (z = -inf)."""
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.minimum(u, np.exp(z + t)) if name == "csoftmax" else np.clip(z - t, 0, u)
    return np.where(np.isfinite(z), p, 0.0)


def reference(name, z, u, steps=100):
    """The weights for scores ``z`` (``-inf`` masked) and bounds ``u >= 0``: the threshold
    where sum p(t) = 1, by bisection (the sum is monotone in t); p = u on rows whose bounds
    sum to at most 1, 0 on rows all masked."""
    z, u = np.broadcast_arrays(np.asarray(z, np.float64), np.asarray(u, np.float64))
    with np.errstate(all="ignore"):                 # rows all masked or clamped: no t
        return _bisect(name, z, u, steps)


def _bisect(name, z, u, steps):
    valid = np.isfinite(z)
    top = np.where(valid, z, -INF).max(-1, keepdims=True)
    z = z - np.where(np.isfinite(top), top, 0.0)            # the max is 0: no overflow
    if name == "csoftmax":     # sum increases with t: softmax sums to 1 with every p <= 1
        lo = -np.log(np.where(valid, np.exp(z), 0.0).sum(-1, keepdims=True))
        hi = np.max(np.where(valid, np.log(np.minimum(u, 1.0)) - z, -INF), -1, keepdims=True)
        lo, hi = np.minimum(lo, hi), np.maximum(lo, hi) + 1.0
    else:                      # sum decreases with t; p_j >= min(u_j, 1) at t = lo
        lo = np.min(np.where(valid, z - np.minimum(u, 1.0), INF), -1, keepdims=True) - 1.0
        hi = np.zeros_like(lo)
    for _ in range(steps):
        mid = (lo + hi) / 2
        over = weights_at(name, z, u, mid).sum(-1, keepdims=True) > 1
        if name == "csoftmax":
            hi, lo = np.where(over, mid, hi), np.where(over, lo, mid)
        else:
            lo, hi = np.where(over, mid, lo), np.where(over, hi, mid)
    total = np.where(valid, u, 0.0).sum(-1, keepdims=True)
    p = weights_at(name, z, u, (lo + hi) / 2)
    return np.where(total <= 1, np.where(valid, u, 0.0), p), (lo + hi) / 2, z


def kink_margin(name, z, u):
    """Distance of the nearest unmasked key from a change of sets (where the map has a
    kink), and of each row's bound sum from 1; gradients are checked away from both."""
    _, t, z = reference(name, z, u)
    valid = np.isfinite(z)
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "csoftmax":
            gaps = [np.abs(z + t - np.log(u))]
        else:
            gaps = [np.abs(z - t), np.abs(z - u - t)]
    total = np.where(valid, u, 0.0).sum(-1)
    gaps = [np.where(valid & ~np.isnan(g), g, INF).min() for g in gaps]
    return min(*gaps, np.abs(total - 1).min())


def instance(seed, shape=(64, 12), masked=0.15, scale=3.0):
    """Feasible rows: normal scores (``-inf`` on some keys), bounds in [0.05, 0.6] with a
    ``+inf`` sink on the last key, the first key never masked."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, scale, shape)
    z[..., 1:][rng.random((*shape[:-1], shape[-1] - 1)) < masked] = -INF
    u = rng.uniform(0.05, 0.6, shape)
    u[..., -1] = INF
    return z, u


# --- finding 1: shift invariance ------------------------------------------------------

@pytest.mark.parametrize("name", FUNCTIONS)
def test_issue_examples_are_shift_invariant(name):
    # The issue's examples: [.7, 0, .7] (sum 1.4) and [.5, .5, 0, 0] before.
    scores = torch.tensor([1e30, -1e30, 0.0])
    torch.testing.assert_close(FUNCTIONS[name](scores, torch.tensor(0.7)),
                               torch.tensor([0.7, 0.0, 0.3]))
    torch.testing.assert_close(MODULES[name]()(torch.full((2, 4), 1e8), torch.tensor(0.5)),
                               torch.full((2, 4), 0.25))


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("offset", [100.0, 1e4, 1e6, -1e6])
def test_float32_rows_stay_on_the_simplex_at_large_offsets(name, offset):
    # Before: row sums off by 3e-5 at an offset of 100, 6e-3 at 1e4, 0.3 at 1e6.
    z, u = instance(seed=1)
    scores = torch.tensor(z + offset, dtype=torch.float32)
    upper = torch.tensor(u, dtype=torch.float32)
    got = FUNCTIONS[name](scores, upper)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=0, atol=1e-6)
    assert (got >= 0).all() and (got <= upper).all()
    # The float32 scores, shifted exactly in float64, solved by bisection.
    want = reference(name, scores.double().numpy() - offset, u)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("offset", [1e3, 1e8, 1e15, 1e30, -1e30])
def test_float64_equals_the_unshifted_result_at_any_offset(name, offset):
    # (At 1e30 every score rounds to the offset: the weights are those of equal scores.)
    z, u = instance(seed=2, scale=20.0)
    scores = torch.tensor(z + offset)
    unshifted = scores - offset                    # exact: the same float64 scores
    got = FUNCTIONS[name](scores, torch.tensor(u))
    want = FUNCTIONS[name](unshifted, torch.tensor(u))
    spread = unshifted.nan_to_num(0.0, 0.0, 0.0).abs().amax(-1, keepdim=True)
    assert ((got - want).abs() <= 8 * torch.finfo(torch.float64).eps * (1 + spread)).all()
    np.testing.assert_allclose(got, reference(name, unshifted.numpy(), u)[0], atol=1e-12)


# --- finding 2: non-finite scores -----------------------------------------------------

@pytest.mark.parametrize("name", FUNCTIONS)
def test_nan_or_inf_score_makes_its_row_nan(name):
    fn = FUNCTIONS[name]
    # The issue's examples: [1, 0, 1] (NaN taken as masked) and a sum of 3 before.
    assert fn(torch.tensor([1.0, NAN, 3.0]), torch.tensor(1.0)).isnan().all()
    assert fn(torch.tensor([1.0, INF, 0.0]), torch.tensor(1.0), check=True).isnan().all()
    # float16 scores that overflow to +inf, next to a clean row and an all-masked one.
    scores = torch.tensor([[7e4, 1.0, -INF], [0.5, 1.0, -INF], [-INF, -INF, -INF]])
    scores = scores.half().requires_grad_()
    upper = torch.tensor([0.4, 0.7, 1.0], requires_grad=True)
    weights = MODULES[name]()(scores, upper)
    assert weights.dtype == torch.float32 and weights[0].isnan().all()
    alone = fn(scores.detach()[1:2], upper.detach())
    assert torch.equal(weights[1:2], alone) and (weights[2] == 0).all()
    weights.backward(torch.ones_like(weights))
    assert scores.grad[0].isnan().all() and upper.grad.isnan().all()   # u feeds row 0
    assert torch.isfinite(scores.grad[1:]).all() and (scores.grad[2] == 0).all()


# --- finding 5: bounds outside the domain ---------------------------------------------

@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("bound", [NAN, -0.1, -INF])
def test_nan_or_negative_bound_on_an_unmasked_key(name, bound):
    fn = FUNCTIONS[name]
    scores = torch.tensor([[0.3, 1.0, -0.5], [0.3, 1.0, -INF], [0.2, 0.4, 0.1]])
    upper = torch.tensor([[0.6, 0.5, bound], [0.6, 0.5, bound], [0.5, 0.5, 0.5]])
    # Before: a negative weight, weights summing to 3, or NaN let through check=True.
    got = fn(scores, upper)
    assert got[0].isnan().all()
    # The same bound on a masked key is ignored; other rows are as if alone.
    assert torch.equal(got[1], fn(scores[1], upper[1].nan_to_num(0.0).clamp_min(0.0)))
    assert torch.equal(got[2], fn(scores[2], upper[2]))
    with pytest.raises(InfeasibleBounds, match=r"^attention upper bounds must be >= 0 .* "
                                               r"first at index \(0, 2\)[^\n]*$"):
        MODULES[name](check=True)(scores, upper)
    fn(scores[1:], upper[1:], check=True)               # masked key: nothing to refuse


# --- contract points 1 and 2: dtypes, empty rows --------------------------------------

@pytest.mark.parametrize("name", FUNCTIONS)
def test_dtypes_and_empty_rows(name):
    fn = FUNCTIONS[name]
    # The weights take the scores' dtype (float32 for half), whatever the bounds' dtype.
    for scores_dtype, weights_dtype in ((torch.float16, torch.float32),
                                        (torch.bfloat16, torch.float32),
                                        (torch.float32, torch.float32),
                                        (torch.float64, torch.float64)):
        for upper_dtype in (torch.float16, torch.float64, torch.int64):
            weights = fn(torch.ones(2, 3, dtype=scores_dtype), torch.ones(3, dtype=upper_dtype))
            assert weights.dtype == weights_dtype, (scores_dtype, upper_dtype)
    for dtype in (torch.int64, torch.bool, torch.complex64):
        with pytest.raises(TypeError, match=rf"^{name} needs floating-point scores \(float16, "
                                            rf"bfloat16, float32 or float64\), got {dtype}$"):
            fn(torch.ones(3, dtype=dtype), torch.ones(3))
    scores = torch.zeros(2, 0, dtype=torch.float16, requires_grad=True)
    weights = fn(scores, torch.ones(2, 0))
    assert weights.shape == (2, 0) and weights.dtype == torch.float32
    weights.sum().backward()
    assert scores.grad.shape == (2, 0)


# --- finding 6: second order ----------------------------------------------------------

def second_order_instance(name, seed):
    """A float64 instance with saturated and free keys (zero weights for csparsemax), a
    sink and a masked key, 1e-3 or more from every kink."""
    while True:
        z, u = instance(seed, shape=(3, 6), masked=0.2, scale=1.0)
        p = reference(name, z, u)[0]
        if kink_margin(name, z, u) > 1e-3 and np.isclose(p, u).sum() >= 2:
            return torch.tensor(z), torch.tensor(u)
        seed += 1000


@pytest.mark.parametrize("name", FUNCTIONS)
def test_second_order_is_exact(name):
    fn = FUNCTIONS[name]
    z, u = second_order_instance(name, seed=3)
    # jvp by double backward against central differences of the forward; before: off by
    # 0.2-2.6, and no graph under create_graph=True.
    dz, du = torch.randn_like(z), torch.randn_like(u).masked_fill(torch.isinf(u), 0.0)
    _, jvp = torch.autograd.functional.jvp(fn, (z, u), (dz, du))
    h = 1e-6
    central = (fn(z + h * dz, u + h * du) - fn(z - h * dz, u - h * du)) / (2 * h)
    np.testing.assert_allclose(jvp, central, atol=1e-8)
    scores = z.clone().requires_grad_()
    grad, = torch.autograd.grad(fn(scores, u), scores, torch.randn_like(z), create_graph=True)
    assert grad.grad_fn is not None
    # Hessian-vector product of a loss, against differences of its gradient.
    def loss(s):
        return (fn(s, u) ** 2 * torch.arange(6.0, dtype=s.dtype)).sum()

    def gradient(s):
        return torch.autograd.grad(loss(s.requires_grad_()), s)[0]
    _, hvp = torch.autograd.functional.hvp(loss, z, dz)
    np.testing.assert_allclose(hvp, (gradient(z + h * dz) - gradient(z - h * dz)) / (2 * h),
                               atol=1e-7)
    args = (z.requires_grad_(), u.requires_grad_())
    assert torch.autograd.gradcheck(fn, args) and torch.autograd.gradgradcheck(fn, args)


# --- properties (seeded, bounded) -----------------------------------------------------

#: float16 holds scores up to 65504 (and 1e3 to 0.5), bfloat16 to 3e38 (1e6 to 4e3).
OFFSETS = {torch.float16: [0.0, 1e3], torch.bfloat16: [0.0, -1e3, 1e6],
           torch.float32: [0.0, 100.0, -1e4, 1e6], torch.float64: [0.0, 1e6, -1e15, 1e30]}
BOUNDS = st.one_of(st.floats(0.0, 1.5), st.just(0.0), st.just(0.25), st.just(INF))


@st.composite
def rows_of(draw, dtypes=tuple(OFFSETS)):
    """Scores (``-inf`` masked keys, ties from a few repeated values), bounds, a dtype
    and an offset added to the scores."""
    rows, keys = draw(st.integers(1, 4)), draw(st.integers(1, 7))
    score = st.one_of(st.floats(-8, 8), st.sampled_from([-1.0, 0.0, 0.5]), st.just(-INF))
    z = np.array(draw(st.lists(score, min_size=rows * keys, max_size=rows * keys)))
    u = np.array(draw(st.lists(BOUNDS, min_size=rows * keys, max_size=rows * keys)))
    dtype = draw(st.sampled_from(dtypes))
    return z.reshape(rows, keys), u.reshape(rows, keys), dtype, draw(st.sampled_from(
        OFFSETS[dtype]))


def tolerance(dtype):
    return 1e-12 if dtype == torch.float64 else 2e-6


@pytest.mark.parametrize("name", FUNCTIONS)
@settings(max_examples=80, deadline=None, derandomize=True)
@given(case=rows_of())
def test_property_simplex_bounds_masks_and_shift(name, case):
    z, u, dtype, offset = case
    scores = torch.tensor(z + offset).to(dtype)
    upper = torch.tensor(u).to(dtype)
    got = FUNCTIONS[name](scores, upper)
    assert got.dtype == (torch.float32 if dtype in HALF else dtype)
    got, upper = got.double(), upper.double()
    assert torch.isfinite(got).all()
    valid = ~torch.isneginf(scores)
    assert (got[~valid] == 0).all() and (got >= 0).all() and (got <= upper).all()
    total = upper.masked_fill(~valid, 0.0).sum(-1)
    feasible = total > 1
    np.testing.assert_allclose(got.sum(-1)[feasible], 1.0, rtol=0, atol=tolerance(dtype))
    assert torch.equal(got[~feasible], upper.masked_fill(~valid, 0.0)[~feasible])
    # The rounded scores, the offset taken out exactly in float64: the same weights.
    want = reference(name, scores.double().numpy() - offset, upper.numpy())[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(dtype) * 8)


@pytest.mark.parametrize("name", FUNCTIONS)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(case=rows_of(), broken=st.lists(st.sampled_from(
    ["nan score", "+inf score", "nan bound", "negative bound", "masked nan bound"]),
    min_size=1, max_size=3), data=st.data())
def test_property_non_finite_rows(name, case, broken, data):
    z, u, dtype, offset = case
    z, u = z + offset, u.copy()
    rows = data.draw(st.lists(st.integers(0, len(z) - 1), min_size=len(broken),
                              max_size=len(broken)))
    for what, row in zip(broken, rows):
        key = data.draw(st.integers(0, z.shape[1] - 1))
        if what == "masked nan bound":
            z[row, key], u[row, key] = -INF, NAN
        elif what.endswith("score"):
            z[row, key] = NAN if what == "nan score" else INF
        else:
            z[row, key] = 0.0 if np.isneginf(z[row, key]) else z[row, key]
            u[row, key] = NAN if what == "nan bound" else -0.5
    scores = torch.tensor(z).to(dtype).requires_grad_()
    upper = torch.tensor(u).to(dtype)
    # The contract: NaN or +inf score, NaN or negative bound on an unmasked key.
    unmasked = ~np.isneginf(z)
    nan_rows = (unmasked & (np.isnan(z) | np.isposinf(z) | ~(u >= 0))).any(-1)
    got = FUNCTIONS[name](scores, upper)
    got.backward(torch.arange(got.shape[1], dtype=got.dtype).expand_as(got))
    for row in range(len(z)):
        if nan_rows[row]:
            assert got[row].isnan().all() and scores.grad[row].float().isnan().all()
        else:                                           # as if alone, bitwise
            alone = FUNCTIONS[name](scores.detach()[row:row + 1], upper[row:row + 1])
            assert torch.equal(got[row:row + 1], alone)
            assert torch.isfinite(scores.grad[row].float()).all()


@st.composite
def feasible_rows(draw):
    """Float64 rows for gradient checks: scores, bounds in [0.05, 0.9] or +inf (a key with
    no bound or bounds summing past 1 in each row), some keys masked."""
    rows, keys = draw(st.integers(1, 3)), draw(st.integers(2, 5))
    z = np.array(draw(st.lists(st.one_of(st.floats(-3, 3), st.just(-INF)),
                               min_size=rows * keys, max_size=rows * keys)))
    u = np.array(draw(st.lists(st.one_of(st.floats(0.05, 0.9), st.just(INF)),
                               min_size=rows * keys, max_size=rows * keys)))
    z, u = z.reshape(rows, keys), u.reshape(rows, keys)
    z[:, 0] = np.where(np.isinf(z[:, 0]), 0.0, z[:, 0])
    return z, u


@pytest.mark.parametrize("name", FUNCTIONS)
@settings(max_examples=10, deadline=None, derandomize=True)
@given(case=feasible_rows())
def test_property_gradcheck_and_gradgradcheck(name, case):
    z, u = case
    assume(kink_margin(name, z, u) > 1e-3)
    fn = FUNCTIONS[name]
    np.testing.assert_allclose(fn(torch.tensor(z), torch.tensor(u)),
                               reference(name, z, u)[0], atol=1e-12)
    args = (torch.tensor(z, requires_grad=True), torch.tensor(u, requires_grad=True))
    assert torch.autograd.gradcheck(fn, args, atol=1e-6)
    assert torch.autograd.gradgradcheck(fn, args, atol=1e-6)
