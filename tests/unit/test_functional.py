"""The functional API (sparse_attn_plugin.functional): agreement with the entmax package
and with references written from the definitions, identity with the normaliser modules
(weights and gradients, bit for bit), any dim, masks, rows with every key masked, half
precision, alpha as a tensor with its gradient, bad arguments, and no fairseq import."""

import subprocess
import sys

import entmax
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sparse_attn_plugin import functional as F
from sparse_attn_plugin.normalizers import (
    CSoftmax,
    CSparsemax,
    Entmax15,
    EntmaxAlpha,
    Softmax,
    Sparsemax,
    TopK,
)
from sparse_attn_plugin.normalizers.dispatch import NEWTON_FROM

from helpers import REPO
from helpers.reference import apply_rows, softmax_ref, topk_ref
from helpers.scores import NEG_INF, random_scores

HEADS = 3
ALPHAS = (1.2, 1.5, 1.9)

#: name -> (function of (x, dim, impl), module making the same weights over the last dim)
UNBOUNDED = {
    "softmax": (lambda x, dim, impl: F.softmax(x, dim), lambda impl: Softmax()),
    "sparsemax": (lambda x, dim, impl: F.sparsemax(x, dim, impl), Sparsemax),
    "entmax15": (lambda x, dim, impl: F.entmax15(x, dim, impl), Entmax15),
    "topk": (lambda x, dim, impl: F.topk_softmax(x, 3, dim, impl), lambda impl: TopK(3, impl=impl)),
}


def upstream(like):
    """A fixed, uneven upstream gradient."""
    gen = torch.Generator().manual_seed(123)
    return torch.randn(like.shape, generator=gen, dtype=like.dtype)


def weights_and_grads(fn, x, *params):
    """``fn(x)`` and the gradients of ``<fn(x), upstream>`` for ``x`` and ``params``."""
    x = x.detach().requires_grad_()
    out = fn(x)
    return (out.detach(), *torch.autograd.grad(out, [x, *params], upstream(out)))


def assert_identical(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and torch.equal(a, b), (a - b).abs().max()


def finite(x, fill=-1e4):
    """``x`` with ``-inf`` replaced by a score far below any other (for the entmax
    package, the reference, which is not asked to handle ``-inf``)."""
    return x.masked_fill(torch.isneginf(x), fill)


# --- the functions are the modules -------------------------------------------------

@pytest.mark.parametrize("name", list(UNBOUNDED))
@pytest.mark.parametrize("dim", [-1, 1])
@pytest.mark.parametrize("shape", [(2, 3, 4, 7), (2, 4, 48, 48)],
                         ids=["small", f"over {NEWTON_FROM} scores"])
def test_functions_equal_their_modules_bit_for_bit(name, dim, shape):
    """With the dim moved last, the module's weights and gradients, exactly: the eager
    rule picks the sort below NEWTON_FROM scores and Newton above, both covered."""
    fn, module = UNBOUNDED[name]
    x = random_scores(shape=shape, seed=1, dtype=torch.float32)
    x[0, 0, 0] = NEG_INF                                   # a row with every key masked
    x = x.movedim(-1, dim)
    ours = weights_and_grads(lambda s: fn(s, dim, "torch"), x)
    norm = module("torch")
    theirs = weights_and_grads(lambda s: norm(s.movedim(dim, -1)).movedim(-1, dim), x)
    assert_identical(ours, theirs)


@pytest.mark.parametrize("dim", [-1, 2])
def test_entmax_alpha_equals_the_learned_alpha_module_with_its_alpha_gradient(dim):
    torch.manual_seed(0)
    module = EntmaxAlpha(HEADS, alpha_init="random", impl="torch")
    x = random_scores(seed=2, dtype=torch.float32)
    x[1, 2, 3] = NEG_INF
    x = x.movedim(-1, dim)
    logit = module.alpha_logit

    def function(s):
        alpha = EntmaxAlpha.alpha_of(logit).view(1, -1, 1, 1).movedim(-1, dim)
        return F.entmax_alpha(s, alpha, dim=dim, impl="torch")

    ours = weights_and_grads(function, x, logit)
    theirs = weights_and_grads(lambda s: module(s.movedim(dim, -1)).movedim(-1, dim), x, logit)
    assert_identical(ours, theirs)
    assert theirs[2].abs().min() > 0                           # every head's alpha learns


@pytest.mark.parametrize("name,fn,module", [
    ("csoftmax", F.csoftmax, CSoftmax), ("csparsemax", F.csparsemax, CSparsemax)])
@pytest.mark.parametrize("dim", [-1, 0])
def test_constrained_functions_equal_their_modules(name, fn, module, dim):
    x, upper = constrained_instance(seed=3)
    x, upper = x.movedim(-1, dim), upper.movedim(-1, dim)
    upper = upper.requires_grad_()
    ours = weights_and_grads(lambda s: fn(s, upper, dim=dim), x, upper)
    norm = module()
    theirs = weights_and_grads(
        lambda s: norm(s.movedim(dim, -1), upper.movedim(dim, -1)).movedim(-1, dim), x, upper)
    assert_identical(ours, theirs)


@pytest.mark.requires("triton")
def test_impl_reaches_the_kernels_triton_as_the_modules_run_it():
    """Under Triton's interpreter (tests/conftest.py): each function with impl="triton"
    equals its module built with it, and differs from the eager code by rounding only."""
    x = random_scores(shape=(2, 3, 4, 9), seed=4, dtype=torch.float32)
    x[0, 1, 2] = NEG_INF
    alpha = torch.tensor(ALPHAS).view(1, -1, 1, 1)
    for name in ("sparsemax", "entmax15", "topk"):
        fn, module = UNBOUNDED[name]
        ours = weights_and_grads(lambda s, fn=fn: fn(s, -1, "triton"), x)
        assert_identical(ours, weights_and_grads(module("triton"), x))
        for a, b in zip(ours, weights_and_grads(lambda s, fn=fn: fn(s, -1, "torch"), x)):
            torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    ours = weights_and_grads(lambda s: F.entmax_alpha(s, alpha, impl="triton"), x)
    eager = weights_and_grads(lambda s: F.entmax_alpha(s, alpha, impl="torch"), x)
    for a, b in zip(ours, eager):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


# --- agreement with independent references -----------------------------------------

score_arrays = hnp.arrays(
    np.float64, hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=6),
    elements=st.one_of(st.floats(-50, 50), st.just(-np.inf)))


def reference_along(reference, x, dim):
    """``reference`` (a function of float64 scores over the last dim, without ``-inf``) along
    ``dim``, with all-zero weights on slices whose entries are all ``-inf``."""
    moved = x.movedim(dim, -1)
    out = reference(finite(moved))
    empty = torch.isneginf(moved).all(-1, keepdim=True)
    return out.masked_fill(empty, 0.0).movedim(-1, dim)


@settings(max_examples=80, deadline=None)
@given(scores=score_arrays, data=st.data())
def test_sparsemax_and_entmax15_equal_the_entmax_package_along_any_dim(scores, data):
    x = torch.from_numpy(scores)
    dim = data.draw(st.integers(-x.dim(), x.dim() - 1), label="dim")
    for ours, theirs in ((F.sparsemax, entmax.sparsemax), (F.entmax15, entmax.entmax15)):
        expected = reference_along(lambda s, theirs=theirs: theirs(s, dim=-1), x, dim)
        torch.testing.assert_close(ours(x, dim=dim), expected, atol=1e-9, rtol=0)


@settings(max_examples=60, deadline=None)
@given(scores=score_arrays, data=st.data())
def test_entmax_alpha_equals_entmax_bisect_with_one_alpha_per_slice(scores, data):
    x = torch.from_numpy(scores)
    dim = data.draw(st.integers(-x.dim(), x.dim() - 1), label="dim")
    reduced = list(x.shape)
    reduced[dim] = 1
    alpha = torch.from_numpy(data.draw(hnp.arrays(np.float64, reduced, elements=st.floats(
        1.1, 2.0)), label="alpha"))
    ours = F.entmax_alpha(x, alpha, dim=dim)
    expected = reference_along(
        lambda s: entmax.entmax_bisect(s, alpha.movedim(dim, -1), dim=-1, n_iter=80), x, dim)
    torch.testing.assert_close(ours, expected, atol=1e-7, rtol=0)
    scalar = data.draw(st.floats(1.1, 2.0), label="scalar alpha")
    expected = reference_along(lambda s: entmax.entmax_bisect(s, scalar, dim=-1, n_iter=80),
                               x, dim)
    torch.testing.assert_close(F.entmax_alpha(x, scalar, dim=dim), expected, atol=1e-7, rtol=0)


@settings(max_examples=60, deadline=None)
@given(scores=score_arrays, k=st.integers(1, 7), data=st.data())
def test_topk_and_softmax_equal_the_numpy_references_along_any_dim(scores, k, data):
    x = torch.from_numpy(scores)
    dim = data.draw(st.integers(-x.dim(), x.dim() - 1), label="dim")
    moved = np.moveaxis(scores, dim, -1)
    np.testing.assert_allclose(F.topk_softmax(x, k, dim=dim),
                               np.moveaxis(apply_rows(topk_ref, moved, k), -1, dim), atol=1e-12)
    np.testing.assert_allclose(F.softmax(x, dim=dim),
                               np.moveaxis(apply_rows(softmax_ref, moved), -1, dim), atol=1e-12)


def constrained_instance(seed, shape=(2, 3, 7), dtype=torch.float64):
    """Scores with masked keys and feasible bounds (some 0, some +inf) summing to >= 1."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen, dtype=dtype) * 2
    x = x.masked_fill(torch.rand(shape, generator=gen) < 0.2, NEG_INF)
    x[..., 0] = torch.randn(shape[:-1], generator=gen, dtype=dtype)
    upper = torch.rand(shape, generator=gen, dtype=dtype) * 0.6
    upper = upper.masked_fill(torch.rand(shape, generator=gen) < 0.1, 0.0)
    upper[..., 0] = torch.where(torch.rand(shape[:-1], generator=gen) < 0.3, float("inf"), 1.0)
    return x, upper


def bisect(total, lo, hi, iters=200):
    """``t`` with ``total(t) = 1`` for a monotone ``total``, ``total(lo) < 1 <= total(hi)``."""
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if total(mid) >= 1 else (mid, hi)
    return (lo + hi) / 2


def csoftmax_ref(z, u):
    """``p = min(u, c exp(z))``, ``c`` by bisection on ``log c``."""
    ok = np.isfinite(z)
    e = np.where(ok, np.exp(z - z[ok].max()), 0.0)
    log_c = bisect(lambda t: np.minimum(u, np.exp(t) * e).sum(), -800.0, 800.0)
    return np.minimum(u, np.exp(log_c) * e)


def csparsemax_ref(z, u):
    """``p = clip(z - tau, 0, u)``, ``tau`` by bisection."""
    ok = np.isfinite(z)
    tau = bisect(lambda t: np.clip(z - t, 0.0, u).sum(), z[ok].max(), z[ok].min() - 2.0)
    return np.clip(z - tau, 0.0, u)


@pytest.mark.parametrize("fn,reference", [(F.csoftmax, csoftmax_ref),
                                          (F.csparsemax, csparsemax_ref)])
@pytest.mark.parametrize("dim", [-1, 1])
def test_constrained_equal_bisection_references_and_respect_the_bounds(fn, reference, dim):
    x, upper = constrained_instance(seed=5)
    ours = fn(x.movedim(-1, dim), upper.movedim(-1, dim), dim=dim).movedim(dim, -1)
    rows = [reference(z, u) for z, u in zip(x.reshape(-1, 7).numpy(), upper.reshape(-1, 7).numpy())]
    np.testing.assert_allclose(ours.reshape(-1, 7), np.stack(rows), atol=1e-9)
    assert (ours <= upper + 1e-12).all() and (ours[torch.isneginf(x)] == 0).all()
    np.testing.assert_allclose(ours.sum(-1), 1.0, atol=1e-9)


# --- gradients ---------------------------------------------------------------------

@pytest.mark.parametrize("name", list(UNBOUNDED))
@pytest.mark.parametrize("dim", [-1, 2])
def test_gradcheck_any_dim(name, dim):
    fn, _ = UNBOUNDED[name]
    x = random_scores(seed=6).movedim(-1, dim).requires_grad_()
    assert torch.autograd.gradcheck(lambda s: fn(s, dim, "torch"), (x,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("dim", [-1, 1])
def test_gradcheck_alpha_per_head_along_any_dim(dim):
    x = random_scores(seed=7).movedim(-1, dim).requires_grad_()
    alpha = torch.tensor(ALPHAS, dtype=torch.float64).view(1, -1, 1, 1).movedim(-1, dim)
    alpha = alpha.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda s, a: F.entmax_alpha(s, a, dim=dim, impl="torch", n_iter=70), (x, alpha),
        eps=1e-6, atol=1e-5)


def test_alpha_gradient_equals_entmax_bisects():
    x = random_scores(seed=8)
    alpha = torch.tensor(ALPHAS, dtype=torch.float64).view(1, -1, 1, 1)
    grads = []
    for fn in (lambda s, a: F.entmax_alpha(s, a), lambda s, a: entmax.entmax_bisect(
            finite(s), a.expand(*s.shape[:-1], 1), n_iter=80)):
        a = alpha.clone().requires_grad_()
        s = x.clone().requires_grad_()
        out = fn(s, a)
        grads.append(torch.autograd.grad(out, [s, a], upstream(out)))
    for ours, theirs in zip(*grads):
        torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("fn", [F.csoftmax, F.csparsemax])
def test_gradcheck_constrained_along_a_leading_dim(fn):
    x, upper = constrained_instance(seed=9)
    upper = upper.clamp_max(0.55)                  # finite bounds summing to >= 1
    x, upper = x.movedim(-1, 0).requires_grad_(), upper.movedim(-1, 0).requires_grad_()
    assert torch.autograd.gradcheck(lambda s, u: fn(s, u, dim=0), (x, upper), eps=1e-7,
                                    atol=1e-5)


# --- masks, empty rows, half precision ---------------------------------------------

FUNCTIONS = {
    **{name: (lambda x, dim, fn=fn: fn(x, dim, "auto")) for name, (fn, _) in UNBOUNDED.items()},
    "entmax_alpha": lambda x, dim: F.entmax_alpha(x, 1.3, dim=dim),
    "csoftmax": lambda x, dim: F.csoftmax(x, torch.full(x.shape, 0.6), dim=dim),
    "csparsemax": lambda x, dim: F.csparsemax(x, torch.full(x.shape, 0.6), dim=dim),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("dim", [-1, 0, 2])
def test_masked_keys_get_zero_and_all_masked_slices_zero_weights_and_gradients(name, dim):
    x = random_scores(shape=(4, 3, 5, 6), seed=10).movedim(-1, dim)
    index = [1, 2, 3]
    index.insert(dim % 4, slice(None))
    x[tuple(index)] = NEG_INF                            # one slice along dim, all masked
    weights, grad = weights_and_grads(lambda s: FUNCTIONS[name](s, dim), x)
    assert torch.isfinite(weights).all() and torch.isfinite(grad).all()
    assert (weights[torch.isneginf(x)] == 0).all()
    assert (weights[tuple(index)] == 0).all() and (grad[tuple(index)] == 0).all()
    sums = weights.sum(dim)
    empty = torch.isneginf(x).all(dim)
    assert empty.sum() == 1
    torch.testing.assert_close(sums[~empty], torch.ones_like(sums[~empty]))


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_and_returned_in_float32(name, dtype):
    x = random_scores(seed=11).to(dtype)
    x[0, 0, 0] = NEG_INF
    weights = FUNCTIONS[name](x, 1)
    assert weights.dtype == torch.float32
    assert torch.equal(weights, FUNCTIONS[name](x.float(), 1))


def test_half_precision_equals_the_modules():
    x = random_scores(seed=12).half()
    for name, (fn, module) in UNBOUNDED.items():
        assert torch.equal(fn(x, -1, "torch"), module("torch")(x)), name
    torch.manual_seed(1)
    module = EntmaxAlpha(HEADS, alpha_init="random", impl="torch").half()
    assert torch.equal(F.entmax_alpha(x, module.alpha().view(1, -1, 1, 1)), module(x))


def test_sparsity_exact_zeros_and_support_size():
    x = torch.tensor([3.0, 1.0, 0.2, -1.0])
    assert torch.equal(F.sparsemax(x), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    # 1.5-entmax of [1, 0.8, 0.1, -1]: tau = -0.2275 on the first three of x / 2
    assert torch.equal(F.entmax15(torch.tensor([1.0, 0.8, 0.1, -1.0])) > 0,
                       torch.tensor([True, True, True, False]))
    assert (F.sparsemax(x - x) == 0.25).all()
    assert ((F.topk_softmax(torch.randn(5, 9), 4) > 0).sum(-1) == 4).all()


# --- bad arguments -----------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda x: F.sparsemax(x, impl="cuda"), lambda x: F.entmax15(x, impl="fast"),
    lambda x: F.entmax_alpha(x, 1.5, impl="Torch"), lambda x: F.topk_softmax(x, 2, impl="")])
def test_unknown_impl_is_one_clear_line(call):
    with pytest.raises(ValueError, match=r"^unknown attention implementation .*; choose from "
                                         r"auto, torch, compiled, triton$"):
        call(torch.randn(2, 5))


@pytest.mark.parametrize("call,message", [
    (lambda x: F.entmax_alpha(x, -1.0), r"alpha in \(0, inf\), got -1.0"),
    (lambda x: F.entmax_alpha(x, 0.0), r"alpha in \(0, inf\), got 0.0"),
    (lambda x: F.entmax_alpha(x, "1.5x"), r"alpha in \(0, inf\), got '1.5x'"),
    (lambda x: F.entmax_alpha(x, torch.full((2, 5), 1.5)), "size 1 along dim 1"),
    (lambda x: F.entmax_alpha(x, torch.full((3, 1), 1.5)), "must broadcast"),
    (lambda x: F.entmax_alpha(x, torch.full((1, 2, 1), 1.5)), "more dimensions"),
    (lambda x: F.entmax_alpha(x, 1.5, n_iter=0), "needs an integer n_iter >= 1"),
    (lambda x: F.topk_softmax(x, 0), "k >= 1, got k=0"),
    (lambda x: F.topk_softmax(x, 2.5), "k >= 1, got k=2.5"),
])
def test_bad_arguments_are_one_clear_line(call, message):
    with pytest.raises(ValueError, match=message) as error:
        call(torch.randn(2, 5))
    assert "\n" not in str(error.value)


def test_constrained_functions_take_no_impl():
    with pytest.raises(TypeError):
        F.csoftmax(torch.randn(5), torch.ones(5), impl="torch")


# --- no fairseq --------------------------------------------------------------------

def test_importing_the_functional_api_does_not_import_fairseq():
    code = ("import sys, torch, sparse_attn_plugin.functional as F; "
            "F.sparsemax(torch.randn(3)); assert 'fairseq' not in sys.modules, 'fairseq'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.parametrize("call", [
    F.softmax, F.sparsemax, F.entmax15, lambda x, dim=-1: F.entmax_alpha(x, 1.3, dim),
    lambda x, dim=-1: F.entmax_alpha(x, 3.0, dim), lambda x, dim=-1: F.topk_softmax(x, 2, dim),
    lambda x, dim=-1: F.normmax(x, dim=dim), lambda x, dim=-1: F.budget_sparsemax(x, 1, dim),
], ids=["softmax", "sparsemax", "entmax15", "alpha 1.3", "alpha 3", "topk", "normmax",
        "budget"])
def test_a_0_d_tensor_is_one_entry_as_torch_softmax_takes_it(call):
    """Weight 1 (0 if it is -inf, NaN if NaN) with a zero gradient, along dim -1 or 0; any
    other dim is torch's IndexError (issue 55: it was an IndexError traceback at once)."""
    for dim in (-1, 0):
        score = torch.tensor(2.0, requires_grad=True)
        weight = call(score, dim=dim)
        assert weight.shape == () and weight.item() == torch.softmax(score, dim).item() == 1
        weight.backward()
        assert score.grad.item() == 0
    assert call(torch.tensor(NEG_INF)).item() == 0
    assert call(torch.tensor(float("nan"))).isnan()
    with pytest.raises(IndexError, match="out of range for a 0-d tensor"):
        call(torch.tensor(2.0), dim=1)
