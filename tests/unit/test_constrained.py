"""Constrained softmax and sparsemax (Malaviya et al. 2018): agreement with exact
KKT references written from the definitions (and a generic convex solver), float64
gradcheck for scores and bounds, simplex/bound/mask properties, feasibility
handling, half precision and the paper's toy example."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.optimize import minimize

from sparse_attn_plugin.normalizers.constrained import (
    ConstrainedNormalizer,
    CSoftmax,
    CSparsemax,
    InfeasibleBounds,
    csoftmax,
    csparsemax,
)

INF = math.inf
TRANSFORMS = {"csoftmax": csoftmax, "csparsemax": csparsemax}


# --- exact references (NumPy, one row at a time) -------------------------------------
#
# Both problems are strictly convex, so the KKT point is the unique solution. The
# references enumerate every assignment of the unmasked keys to "at its bound" /
# "below it" (and, for csparsemax, "at zero"), solve the equality constraint on it
# and keep the assignment whose solution satisfies every KKT inequality. Rows whose
# bounds sum to <= 1 over the unmasked keys follow the documented convention: p = u.

def _tight_or_empty(z, u):
    valid = np.isfinite(z)
    if not valid.any() or u[valid].sum() <= 1:
        return np.where(valid, u, 0.0)
    return None


def csoftmax_ref(z, u, tol=1e-12):
    """argmin KL(p || softmax(z)) over the simplex with p <= u. KKT: p_i = min(u_i, c e^z_i)
    with c > 0; a key is saturated (p_i = u_i) only if c e^z_i >= u_i. For a saturated
    set S the free keys share 1 - sum_S u as a softmax over themselves (computed from
    their own maximum, so scores far below a saturated key do not underflow)."""
    z, u = np.asarray(z, float), np.asarray(u, float)
    done = _tight_or_empty(z, u)
    if done is not None:
        return done
    valid = np.flatnonzero(np.isfinite(z))
    zv, uv = z[valid], u[valid]
    for bits in itertools.product([False, True], repeat=len(valid)):
        sat = np.array(bits)
        rest = 1 - uv[sat].sum()
        if sat.all() or np.isinf(uv[sat]).any() or rest <= 0:
            continue
        top = zv[~sat].max()
        log_c = np.log(rest) - top - np.log(np.exp(zv[~sat] - top).sum())
        with np.errstate(over="ignore"):
            share = np.exp(zv + log_c)                  # c e^z for every key
        if (share[~sat] <= uv[~sat] * (1 + tol) + tol).all() and (
                share[sat] >= uv[sat] * (1 - tol) - tol).all():
            out = np.zeros_like(z)
            out[valid] = np.where(sat, uv, share)
            return out
    raise AssertionError(f"no KKT point found for z={z}, u={u}")


def csparsemax_ref(z, u, tol=1e-12):
    """argmin ||p - z||^2 over the simplex with p <= u. KKT: p_j = clip(z_j - tau, 0, u_j);
    each key is at zero (z_j - tau <= 0), free (0 <= z_j - tau <= u_j) or at its bound
    (z_j - tau >= u_j), and tau = (sum_free z + sum_bound u - 1) / |free|."""
    z, u = np.asarray(z, float), np.asarray(u, float)
    done = _tight_or_empty(z, u)
    if done is not None:
        return done
    valid = np.flatnonzero(np.isfinite(z))
    zv, uv = z[valid], u[valid]
    for states in itertools.product((0, 1, 2), repeat=len(valid)):  # zero, free, bound
        s = np.array(states)
        free, bound = s == 1, s == 2
        if not free.any() or np.isinf(uv[bound]).any():
            continue
        tau = (zv[free].sum() + uv[bound].sum() - 1) / free.sum()
        d = zv - tau
        if ((d[s == 0] <= tol).all() and (d[free] >= -tol).all()
                and (d[free] <= uv[free] + tol).all() and (d[bound] >= uv[bound] - tol).all()):
            out = np.zeros_like(z)
            out[valid] = np.where(bound, uv, np.where(free, d, 0.0))
            return out
    raise AssertionError(f"no KKT point found for z={z}, u={u}")


REFERENCES = {"csoftmax": csoftmax_ref, "csparsemax": csparsemax_ref}


def ref_rows(name, scores, upper):
    scores, upper = np.broadcast_arrays(np.asarray(scores, float), np.asarray(upper, float))
    flat_z, flat_u = scores.reshape(-1, scores.shape[-1]), upper.reshape(-1, scores.shape[-1])
    return np.stack([REFERENCES[name](z, u) for z, u in zip(flat_z, flat_u)]).reshape(
        scores.shape)


def solver_ref(name, z, u):
    """The same problem handed to a generic solver (SLSQP) over the unmasked keys."""
    valid = np.isfinite(z)
    zv, uv = z[valid], u[valid]
    q = np.exp(zv - zv.max())
    q /= q.sum()
    if name == "csoftmax":
        def objective(p):
            p = np.maximum(p, 1e-300)
            return float(np.sum(p * (np.log(p) - np.log(q))))

        def gradient(p):
            return np.log(np.maximum(p, 1e-300)) - np.log(q) + 1
    else:
        def objective(p):
            return float(np.sum((p - zv) ** 2))

        def gradient(p):
            return 2 * (p - zv)
    bounds = [(1e-12 if name == "csoftmax" else 0.0, None if np.isinf(b) else b) for b in uv]
    cap = np.minimum(uv, 1.0)
    start = cap / cap.sum()                     # feasible: start <= cap <= u
    result = minimize(objective, start, jac=gradient, method="SLSQP", bounds=bounds,
                      constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1,
                                    "jac": lambda p: np.ones_like(p)}],
                      options={"ftol": 1e-14, "maxiter": 1000})
    assert result.success, result.message
    out = np.zeros_like(z)
    out[valid] = result.x
    return out


def random_instance(shape, seed, masked=0.25, zero=0.1, unbounded=0.1, scale=0.6):
    """Scores (-inf on masked keys) and bounds mixing small (often saturated),
    zero and +inf values; some rows end up infeasible."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.5, shape)
    z[rng.random(shape) < masked] = -INF
    u = rng.uniform(0.0, scale, shape)
    pick = rng.random(shape)
    u[pick < zero] = 0.0
    u[pick > 1 - unbounded] = INF
    return z, u


# --- agreement with the exact references -------------------------------------------

def test_references_agree_with_a_generic_convex_solver():
    z, u = random_instance((12, 5), seed=11, masked=0.15, zero=0.0)
    checked = 0
    for zr, ur in zip(z, u):
        valid = np.isfinite(zr)
        if valid.sum() < 2 or ur[valid].sum() <= 1.05:
            continue
        for name in TRANSFORMS:
            np.testing.assert_allclose(REFERENCES[name](zr, ur), solver_ref(name, zr, ur),
                                       atol=2e-5)
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("name", TRANSFORMS)
def test_forward_matches_exact_reference(name):
    z, u = random_instance((5, 3, 4, 6), seed=1)
    z[0, 0, 0] = -INF                                   # a fully masked row
    u[0, 1, 0] = [0.2, 0.1, 0.3, 0.0, 0.1, 0.05]        # infeasible: sum 0.75
    z[0, 1, 0] = [0.5, -1.0, 2.0, 0.3, -INF, 1.0]
    got = TRANSFORMS[name](torch.from_numpy(z), torch.from_numpy(u)).numpy()
    want = ref_rows(name, z, u)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)

    # The instance covers what it should: every case below occurs in it.
    valid = np.isfinite(z)
    total = np.where(valid, u, 0).sum(-1)
    feasible = valid.any(-1) & (total > 1)
    saturated = valid & np.isfinite(u) & (u > 0) & np.isclose(want, u) & feasible[..., None]
    assert saturated.sum() >= 10, "too few saturated keys"
    assert (valid & (u == 0)).sum() >= 5 and (valid & np.isinf(u)).sum() >= 5
    assert (~valid).sum() >= 20 and (~feasible & valid.any(-1)).sum() >= 3
    if name == "csparsemax":
        zero_weight = valid & (want == 0) & (u > 0) & feasible[..., None]
        assert zero_weight.sum() >= 5, "too few sparse zeros"
    # Infeasible rows are clamped to their bounds.
    np.testing.assert_array_equal(got[0, 1, 0], [0.2, 0.1, 0.3, 0.0, 0.0, 0.05])
    assert (got[0, 0, 0] == 0).all()


@pytest.mark.parametrize("name", TRANSFORMS)
def test_float32_close_to_float64(name):
    z, u = random_instance((6, 4, 8), seed=2, masked=0.2)
    want = TRANSFORMS[name](torch.from_numpy(z), torch.from_numpy(u))
    got = TRANSFORMS[name](torch.from_numpy(z).float(), torch.from_numpy(u).float())
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.double(), want, atol=2e-6)


@pytest.mark.parametrize("name", TRANSFORMS)
def test_large_scores_are_stable(name):
    z = torch.tensor([[800.0, 790.0, -700.0, 805.0], [-1e4, -1e4 - 1, -INF, -1e4 + 2]],
                     dtype=torch.float64)
    u = torch.tensor([[0.6, 0.6, 1.0, 0.3], [0.5, INF, 0.2, 0.25]], dtype=torch.float64)
    got = TRANSFORMS[name](z, u).numpy()
    np.testing.assert_allclose(got, ref_rows(name, z.numpy(), u.numpy()), atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_csoftmax_when_the_saturated_top_key_dwarfs_the_rest(dtype):
    # exp(5 - 120) underflows in float32 (and exp(-1000) in float64): once the top key
    # saturates, the mass it leaves must still go to the others by softmax among them.
    z = torch.tensor([[120.0, 5.0, 3.0], [0.0, -1000.0, -1001.0]], dtype=dtype)
    u = torch.tensor([[0.1, INF, 1.0], [0.3, 0.6, INF]], dtype=dtype)
    two, one = 1 / (1 + math.exp(-2)), 1 / (1 + math.exp(-1))   # softmax(a, a - d)[0]
    want = [[0.1, 0.9 * two, 0.9 * (1 - two)], [0.3, 0.7 * one, 0.7 * (1 - one)]]
    # (float32 holds -1000 to within 6e-5, which bounds the agreement there.)
    np.testing.assert_allclose(csoftmax(z, u), want, atol=1e-4 if dtype == torch.float32 else 1e-12)
    np.testing.assert_allclose(want, ref_rows("csoftmax", z.double().numpy(), u.double().numpy()),
                               atol=1e-12)


@pytest.mark.parametrize("name", TRANSFORMS)
def test_bounds_summing_to_one_plus_rounding(name):
    # Met in beam search: bounds f - beta that sum to 1 + 1 ulp in float32. Solving for
    # tau there once gave csparsemax weights summing to 0.19; the answer is the bounds.
    z = torch.tensor([[-0.4404089153, 0.1210426688, -0.4185915589, -0.2697702944,
                       0.3240574002]])
    u = torch.tensor([[0.0, 0.0, 0.5916876793, 0.2218701839, 0.1864422560]])
    assert u.sum().item() > 1
    got = TRANSFORMS[name](z, u)
    torch.testing.assert_close(got, u, atol=1e-6, rtol=0)
    torch.testing.assert_close(got, TRANSFORMS[name](z.double(), u.double()).float(),
                               atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_csparsemax_when_a_key_fills_the_simplex_exactly_at_its_bound(dtype):
    # tau = 2 puts the second key exactly at its bound 1: the sum is 1 on the whole flat
    # segment tau in [0.5, 2], which a formula for tau on that segment cannot find.
    # (The second row is a sink with bound 1 met in beam search, in dyadic numbers.)
    z = torch.tensor([[0.5, 3.0, -INF, -INF, -INF, -INF],
                      [-0.25, 0.75, -0.125, 0.5, 1.25, 5.5]], dtype=dtype)
    u = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
                      [1.5, 1.5, 1.25, 1.0, 1.0, 1.0]], dtype=dtype)
    want = [[0.0, 1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]]
    np.testing.assert_allclose(csparsemax(z, u), want, atol=1e-6)
    np.testing.assert_allclose(want, ref_rows("csparsemax", z.double().numpy(),
                                              u.double().numpy()), atol=1e-12)


@pytest.mark.parametrize("name", TRANSFORMS)
def test_bounds_broadcast_and_gradient_reduces(name):
    z, u = random_instance((2, 3, 4, 5), seed=3, masked=0.1, zero=0.0)
    u = np.abs(u[:, :1, :1, :]) + 0.3           # (2, 1, 1, 5), feasible in every row
    scores = torch.from_numpy(z).requires_grad_()
    upper = torch.from_numpy(u).requires_grad_()
    weights = TRANSFORMS[name](scores, upper)
    assert weights.shape == scores.shape
    np.testing.assert_allclose(weights.detach(), ref_rows(name, z, u), atol=1e-10)
    grad = torch.randn_like(weights)
    (weights * grad).sum().backward()
    assert upper.grad.shape == upper.shape
    expanded = upper.detach().expand_as(scores).clone().requires_grad_()
    (TRANSFORMS[name](scores.detach(), expanded) * grad).sum().backward()
    np.testing.assert_allclose(upper.grad, expanded.grad.sum((1, 2), keepdim=True), atol=1e-12)


# --- gradients -----------------------------------------------------------------------

def hand_instance():
    """Rows away from ties and kinks, with saturated keys, bounds of 0 (on keys whose
    unbounded weight would be positive), +inf bounds, masked keys, zero weights and an
    infeasible row."""
    z = torch.tensor([[2.0, 1.0, 0.5, 1.5, -INF, -0.4],
                      [0.3, 1.7, -0.9, 0.8, 0.1, -INF],
                      [1.0, -2.0, 0.4, -INF, 0.9, 0.0],          # infeasible bounds
                      [0.2, 0.6, 3.0, -1.5, 2.6, 1.1]], dtype=torch.float64)
    u = torch.tensor([[0.3, 0.5, INF, 0.0, 0.7, 0.8],
                      [0.9, 0.25, 0.6, 0.45, INF, 0.0],
                      [0.2, 0.1, 0.3, 0.4, 0.15, 0.05],
                      [0.35, 0.4, 0.3, 0.2, 0.25, INF]], dtype=torch.float64)
    return z, u


@pytest.mark.parametrize("name", TRANSFORMS)
def test_gradcheck_hand_instance(name):
    z, u = hand_instance()
    fn = TRANSFORMS[name]
    weights = fn(z, u)
    u_fin = torch.where(torch.isfinite(u), u, torch.zeros_like(u))
    at_bound = torch.isfinite(z) & torch.isclose(weights, u_fin) & (u > 0)
    assert at_bound[[0, 1, 3]].sum() >= 3, "no saturated keys in the feasible rows"
    if name == "csparsemax":
        assert ((weights == 0) & torch.isfinite(z) & (u > 0)).sum() >= 2
    # A bound of 0 is at the edge of the domain (a negative bound gives a NaN row), so
    # it is held fixed; its one-sided derivative is checked by test_closed_form_gradients.
    zero = u == 0

    def at_fixed_zeros(z, u):
        return fn(z, u.masked_fill(zero, 0.0))
    assert torch.autograd.gradcheck(at_fixed_zeros, (z.requires_grad_(), u.requires_grad_()),
                                    eps=1e-6, atol=1e-7)


def margin(name, z, u, weights):
    """Smallest distance of an unmasked key from a kink of the map (a change of sets)."""
    gaps = []
    for zr, ur, wr in zip(z, u, weights):
        valid = np.isfinite(zr)
        if ur[valid].sum() <= 1:            # clamped row: p = u, linear in u
            continue
        if name == "csoftmax":              # kink where c exp(z_i) = u_i
            e = np.exp(zr - zr[valid].max())
            free = valid & (wr < ur)
            c = wr[free].sum() / e[free].sum()
            bounded = valid & np.isfinite(ur)
            gaps.append(np.abs(c * e - ur)[bounded] / np.maximum(ur[bounded], 1e-3))
        else:                               # kinks where z_j - tau = 0 or = u_j
            free = valid & (wr > 0) & (wr < ur)
            d = zr - (zr - wr)[free][0]
            gaps.append(np.minimum(np.abs(d), np.abs(d - ur))[valid])
    return np.concatenate(gaps).min()


@pytest.mark.parametrize("name", TRANSFORMS)
def test_gradcheck_random_instances(name):
    fn, seed, done = TRANSFORMS[name], 100, 0
    while done < 3:
        seed += 1
        z, u = random_instance((3, 6), seed=seed, masked=0.2, zero=0.0, unbounded=0.15,
                               scale=0.7)
        z[:, 0] = np.abs(z[:, 0])
        weights = fn(torch.from_numpy(z), torch.from_numpy(u)).numpy()
        if margin(name, z, u, weights) < 1e-3:
            continue
        args = (torch.from_numpy(z).requires_grad_(), torch.from_numpy(u).requires_grad_())
        assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-6)
        done += 1
    assert seed < 200


@pytest.mark.parametrize("name", TRANSFORMS)
def test_closed_form_gradients(name):
    z, u = hand_instance()
    z, u = z.requires_grad_(), u.requires_grad_()
    weights = TRANSFORMS[name](z, u)
    g = torch.linspace(-1.0, 2.0, z.numel(), dtype=z.dtype).view_as(z)
    dz, du = torch.autograd.grad(weights, (z, u), g)
    w = weights.detach()
    valid = torch.isfinite(z.detach())
    # Infeasible row 2: weights equal the bounds, dz = 0 and du = g on the unmasked keys.
    assert (dz[2] == 0).all()
    np.testing.assert_allclose(du[2], torch.where(valid[2], g[2], torch.zeros_like(g[2])))
    # +inf bounds and masked keys get no gradient.
    assert (du[torch.isinf(u.detach())] == 0).all() and (du[~valid] == 0).all()
    assert (dz[~valid] == 0).all()
    # Row 1 from the formulas in ALGORITHMS.md section 4.
    row, g1, ub = w[1], g[1], u.detach()[1]
    if name == "csoftmax":
        sat = valid[1] & torch.isclose(row, ub) & torch.isfinite(ub)
        m = (row * g1)[~sat].sum() / (1 - ub[sat].sum())
        np.testing.assert_allclose(dz[1], torch.where(sat, 0.0, row * (g1 - m)), atol=1e-12)
    else:
        free = valid[1] & (row > 0) & (row < ub)
        sat = valid[1] & torch.isfinite(ub) & ~free & ((row > 0) | (ub == 0))
        m = g1[free].mean()
        np.testing.assert_allclose(dz[1], torch.where(free, g1 - m, 0.0), atol=1e-12)
    np.testing.assert_allclose(du[1], torch.where(sat, g1 - m, 0.0), atol=1e-12)


# --- properties ----------------------------------------------------------------------

rows = st.integers(1, 4).flatmap(lambda r: st.integers(1, 5).map(lambda n: (r, n)))


@st.composite
def instances(draw):
    shape = draw(rows)
    z = draw(hnp.arrays(np.float64, shape, elements=st.one_of(
        st.floats(-50, 50), st.just(-INF))))
    u = draw(hnp.arrays(np.float64, shape, elements=st.one_of(
        st.floats(0, 2), st.just(0.0), st.just(INF))))
    return z, u


@pytest.mark.parametrize("name", TRANSFORMS)
@settings(max_examples=100, deadline=None)
@given(instance=instances())
def test_bounds_simplex_and_masks(name, instance):
    z, u = instance
    got = TRANSFORMS[name](torch.from_numpy(z), torch.from_numpy(u)).numpy()
    valid = np.isfinite(z)
    total = np.where(valid, u, 0).sum(-1)
    assert np.isfinite(got).all()
    assert (got >= 0).all() and (got <= u * (1 + 1e-12)).all()
    assert (got[~valid] == 0).all(), "a masked key got weight"
    feasible = valid.any(-1) & (total > 1)
    np.testing.assert_allclose(got.sum(-1)[feasible], 1.0, atol=1e-9)
    np.testing.assert_array_equal(got[~feasible], np.where(valid, u, 0)[~feasible])
    np.testing.assert_allclose(got, ref_rows(name, z, u), atol=1e-8)


# --- feasibility, empty rows, precision, modules -------------------------------------

@pytest.mark.parametrize("name", TRANSFORMS)
def test_check_raises_on_infeasible_bounds(name):
    z = torch.tensor([[0.1, 0.2, -INF], [0.3, 0.0, 1.0], [-INF, -INF, -INF]])
    u = torch.tensor([[0.4, 0.3, 5.0], [0.5, 0.5, 0.1], [0.0, 0.0, 0.0]])
    with pytest.raises(InfeasibleBounds, match=r"in 1 of 3 rows .*smallest sum 0\.7\b"):
        TRANSFORMS[name](z, u, check=True)
    with pytest.raises(InfeasibleBounds, match="must be >= 0"):
        TRANSFORMS[name](z[1:2], torch.tensor([[0.5, 0.6, -0.1]]), check=True)
    # Feasible rows and all-masked rows pass; an infeasible row is clamped without check.
    assert TRANSFORMS[name](z[1:], u[1:], check=True).sum(-1).tolist() == pytest.approx([1, 0])
    assert TRANSFORMS[name](z, u)[0].tolist() == pytest.approx([0.4, 0.3, 0.0])
    assert issubclass(InfeasibleBounds, ValueError)


@pytest.mark.parametrize("name", TRANSFORMS)
def test_all_masked_rows_give_zero_weights_and_gradients(name):
    z, u = random_instance((3, 4, 5), seed=5, masked=0.1)
    z[:, :, 0] = 1.0
    u[:, :, -1] = INF
    z[1, 2] = -INF
    u[1, 2] = [0.0, 1.0, INF, 0.5, 0.0]
    scores = torch.from_numpy(z).requires_grad_()
    upper = torch.from_numpy(u).requires_grad_()
    weights = TRANSFORMS[name](scores, upper)
    assert (weights[1, 2] == 0).all() and torch.isfinite(weights).all()
    (weights * torch.randn_like(weights)).sum().backward()
    for grad in (scores.grad, upper.grad):
        assert torch.isfinite(grad).all() and (grad[1, 2] == 0).all()


@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_float32(name, dtype):
    z, u = random_instance((4, 3, 7), seed=6, masked=0.2)
    u[..., 0] = INF
    z[..., 0] = 0.5
    scores = torch.from_numpy(z).to(dtype).requires_grad_()
    upper = torch.from_numpy(u).to(dtype).requires_grad_()
    weights = TRANSFORMS[name](scores, upper)
    assert weights.dtype == torch.float32
    want = TRANSFORMS[name](scores.detach().double(), upper.detach().double())
    np.testing.assert_allclose(weights.detach().double(), want, atol=1e-6)
    weights.sum().backward()
    assert scores.grad.dtype == dtype and torch.isfinite(scores.grad.float()).all()
    assert torch.isfinite(upper.grad.float()).all()


def test_modules():
    z, u = hand_instance()
    for cls, fn in ((CSoftmax, csoftmax), (CSparsemax, csparsemax)):
        module = cls()
        assert isinstance(module, ConstrainedNormalizer) and not module.check
        assert torch.equal(module(z, u), fn(z, u))
        assert "check=True" in repr(cls(check=True))
        with pytest.raises(InfeasibleBounds):
            cls(check=True)(z, u)                # row 2 is infeasible
    with pytest.raises(TypeError):
        ConstrainedNormalizer()


# --- the paper's toy example (Malaviya et al. 2018, Figure 1) ------------------------
#
# Three source words, fertility 1 each, scores z1 = (1.2, 0.8, -0.2),
# z2 = (0.7, 0.9, 0.1), z3 = (-0.2, 0.2, 0.9); bounds u_t = max(0, 1 - beta_{t-1}) with
# beta the cumulative attention (beta_0 = 0). Values derived by hand:
#
# csparsemax
#   t=1, u = (1, 1, 1): sparsemax(z1). Support {1, 2}: tau = (1.2 + 0.8 - 1) / 2 = 0.5,
#        p = (0.7, 0.3, 0) (-0.2 - 0.5 < 0); both below 1. beta = (0.7, 0.3, 0).
#   t=2, u = (0.3, 0.7, 1): sparsemax(z2) has support {1, 2}, tau = 0.3, p = (0.4, 0.6, 0),
#        but 0.4 > u_1 = 0.3, so word 1 sits at its bound; the rest 0.7 goes to word 2:
#        tau = 0.9 - 0.7 = 0.2, p_2 = 0.7 = u_2 (exactly at its bound too), word 3:
#        0.1 - 0.2 < 0 -> 0. p = (0.3, 0.7, 0); beta = (1, 1, 0).
#   t=3, u = (0, 0, 1): only word 3 may be attended: p = (0, 0, 1); beta = (1, 1, 1).
#
# csoftmax (exp(1.2) = 3.3201169, exp(0.8) = 2.2255409, exp(-0.2) = 0.8187308,
#           exp(0.7) = 2.0137527, exp(0.9) = 2.4596031, exp(0.1) = 1.1051709,
#           exp(0.2) = 1.2214028)
#   t=1, u = (1, 1, 1): no bound can bind (each share < 1), so p = softmax(z1)
#        = (3.3201169, 2.2255409, 0.8187308) / 6.3643886 = (0.5216710, 0.3496865, 0.1286425).
#        beta = the same.
#   t=2, u = 1 - beta = (0.4783290, 0.6503135, 0.8713575): softmax(z2)
#        = (2.0137527, 2.4596031, 1.1051709) / 5.5785267 = (0.3609829, 0.4409055, 0.1981116),
#        all below their bounds, so p = softmax(z2). beta = (0.8826539, 0.7905920, 0.3267541).
#   t=3, u = (0.1173461, 0.2094080, 0.6732459), summing to 3 - 2 = 1: the only feasible
#        point is p = u (softmax(z3) = (0.8187308, 1.2214028, 2.4596031) / 4.4997366
#        = (0.1819508, 0.2714387, 0.5466105) exceeds the first two bounds, which saturate;
#        the third word gets the remaining 1 - 0.1173461 - 0.2094080 = 0.6732459 = u_3).
#        beta = (1, 1, 1).
# Both end with every word attended exactly once. Figure 1 of the paper draws these
# as bar charts; the csparsemax steps match the sparse pattern it shows.

TOY_SCORES = [[1.2, 0.8, -0.2], [0.7, 0.9, 0.1], [-0.2, 0.2, 0.9]]
TOY_EXPECTED = {
    "csparsemax": [[0.7, 0.3, 0.0], [0.3, 0.7, 0.0], [0.0, 0.0, 1.0]],
    "csoftmax": [[0.5216710, 0.3496865, 0.1286425], [0.3609829, 0.4409055, 0.1981116],
                 [0.1173461, 0.2094080, 0.6732459]],
}


@pytest.mark.parametrize("name", TRANSFORMS)
def test_paper_toy_example(name):
    beta = torch.zeros(3, dtype=torch.float64)
    steps = []
    for z in TOY_SCORES:
        upper = (1.0 - beta).clamp_min(0.0)
        p = TRANSFORMS[name](torch.tensor(z, dtype=torch.float64), upper)
        steps.append(p)
        beta = beta + p
        assert (beta <= 1 + 1e-12).all(), "a word was attended more than its fertility"
        assert p.sum().item() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(torch.stack(steps), TOY_EXPECTED[name], atol=1e-7)
    np.testing.assert_allclose(beta, [1.0, 1.0, 1.0], atol=1e-12)
    if name == "csparsemax":
        assert (torch.stack(steps) == 0).sum() == 4     # exact zeros: the sparse pattern


# --- the benchmark script -------------------------------------------------------------

