"""The normalisers' contract (issue 44, docs/library.md), property by property, for every
function of :mod:`sparse_attn_plugin.functional` and every implementation it has (eager
``torch``, ``compiled``, ``triton`` under Triton's interpreter), over scores of 1-4 dims, any
``dim``, float16/bfloat16/float32/float64, transposed and strided layouts, masks (rows with
every key masked too), ties, offsets up to 1e6 (float32) and 1e30 (float64), NaN and +inf:

* rows on the simplex (sum 1 to 1e-6 in float32; constrained: 0 <= p <= u, and p = u where
  the bounds sum to less than 1), exactly 0 on masked keys and on rows with every key masked;
* shift invariance: the weights of ``s + c`` are those of ``s`` up to the rounding of ``s + c``;
* a NaN or +inf score (constrained: a NaN or negative bound) makes its row NaN, weights and
  gradient, and leaves every other row as it was, bit for bit;
* every implementation gives the eager one's weights and gradients;
* agreement with float64 references written here from the definitions (the entmax
  package's bisection for alpha-entmax);
* float64 gradcheck and gradgradcheck away from ties and kinks (Triton may refuse
  ``create_graph`` with one line instead);
* dtypes, empty rows and parameters: one-line TypeError/ValueError, as the contract words them.

Seeded (``derandomize``) and bounded for the unit tier; compiling costs seconds per kernel, so
the compiled implementation gets few examples and shares test_compiled.py's worker."""

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import numpy as np
import pytest
import torch
from entmax import entmax_bisect
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from torch import Tensor

from sparse_attn_plugin import functional as F
from sparse_attn_plugin.normalizers import InfeasibleBounds

pytestmark = [pytest.mark.xdist_group("compiled"), pytest.mark.slow]

NEG_INF, POS_INF, NAN = float("-inf"), float("inf"), float("nan")
HALVES = (torch.float16, torch.bfloat16)
DTYPES = (*HALVES, torch.float32, torch.float64)
LAYOUTS = ("contiguous", "transposed", "strided")
#: The largest offset added to scores of each dtype is 10 ** this (float16 ends at 65504).
OFFSET_EXPONENT = {torch.float16: 4, torch.bfloat16: 6, torch.float32: 6, torch.float64: 30}
#: |sum of a row - 1| allowed: the contract's 1e-6 in float32, a few rounding errors of a
#: sum of at most 40 terms in float64.
SUM_TOL = {torch.float32: 1e-6, torch.float64: 1e-14}
#: Rounding errors allowed per unit of a row's score spread (weights are Lipschitz in the
#: scores, and every algorithm subtracts scores of that size): ``budget``.
ROUNDING = 16
#: Gradients are checked only where no score is this close to a kink (support, bound, top-k
#: threshold) or tie: gradcheck's steps are 1e-6.
KINK = 1e-3
#: Examples per test and implementation: compiling costs seconds per kernel, the
#: interpreter ~0.1 s per call.
EXAMPLES = {"torch": 30, "compiled": 3, "triton": 10}
GRAD_EXAMPLES = {"torch": 12, "compiled": 2, "triton": 3}
#: The fewest slices and keys drawn: the compiled kernels leave a single row or key to the
#: eager code.
LEAST = {"torch": 1, "compiled": 2, "triton": 1}
#: gradcheck's scores (each entry costs two calls, gradgradcheck's four): smaller under the
#: interpreter.
GRAD_SIZES = {"torch": dict(max_len=6, max_batch=2, max_dims=3),
              "compiled": dict(max_len=6, max_batch=2, max_dims=3, least=2),
              "triton": dict(max_len=4, max_batch=2, max_dims=2)}


# --- the normalisers and their references -------------------------------------------

@dataclass(frozen=True)
class Normaliser:
    """A function of the functional API: ``call(x, dim, impl, params)``; ``function``, its
    name; ``impls``, its implementations; ``params(draw, x, dim, smooth)``, its parameters
    for scores ``x`` (``smooth``: away from the domain's edges, for gradcheck);
    ``reference(x, params)``, float64 weights over the last dim and the smallest distance
    from an unmasked score to a kink."""

    name: str
    function: str
    impls: Tuple[str, ...]
    call: Callable[..., Tensor]
    params: Callable[..., Dict]
    reference: Callable[..., Tuple[Tensor, float]]


def generator(draw) -> torch.Generator:
    return torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))


def weights_dtype(dtype: torch.dtype) -> torch.dtype:
    """Contract 1: half precision computed and returned in float32."""
    return torch.float32 if dtype in HALVES else dtype


def no_params(draw, x, dim, smooth):
    return {}


def number_alpha(draw, x, dim, smooth):
    """Any alpha in [1.01, 2]; 1.5 and 2 (sparsemax's and 1.5-entmax's cases) among them."""
    return {"alpha": draw(st.floats(1.01, 2.0) | st.sampled_from((1.3, 1.5, 2.0)))}


def tensor_alpha(draw, x, dim, smooth):
    """One alpha per row, or per head (size 1 along some other dims too), in the weights'
    dtype; 1.5 and 2 among them."""
    shape = [size if draw(st.booleans()) else 1 for size in x.shape]
    shape[dim] = 1
    gen = generator(draw)
    low, high = (1.1, 1.9) if smooth else (1.01, 2.0)
    alpha = low + (high - low) * torch.rand(shape, generator=gen, dtype=torch.float64)
    if not smooth:
        special = torch.tensor([1.5, 2.0], dtype=torch.float64)[torch.randint(2, shape,
                                                                              generator=gen)]
        alpha = torch.where(torch.rand(shape, generator=gen) < 0.3, special, alpha)
    return {"alpha": alpha.to(weights_dtype(x.dtype))}


def top_k(draw, x, dim, smooth):
    """k up to one past the row's length (smooth: below it where it can, so that the
    kernels, not plain softmax, are differentiated)."""
    length = x.shape[dim]
    return {"k": draw(st.integers(1, max(1, length - 1) if smooth else length + 1))}


def bounds(draw, x, dim, smooth):
    """Upper bounds in the scores' dtype, some 0 and some +inf, scaled so that each row's
    finite bounds over its unmasked keys sum to 0.5 (infeasible), 1.2 or 3 (smooth: no 0 and
    no infeasible row)."""
    gen = generator(draw)
    rows = x.detach().movedim(dim, -1).double()
    raw = torch.rand(rows.shape, generator=gen, dtype=torch.float64)
    special = torch.rand(rows.shape, generator=gen)
    if smooth:
        raw = 0.1 + raw
    else:
        raw = raw.masked_fill(special < 0.1, 0.0)
    raw = raw.masked_fill(special > 0.9, POS_INF)
    targets = torch.tensor([1.2, 3.0] if smooth else [0.5, 1.2, 3.0], dtype=torch.float64)
    target = targets[torch.randint(len(targets), rows.shape[:-1] + (1,), generator=gen)]
    finite = torch.where((rows > NEG_INF) & torch.isfinite(raw), raw, 0.0).sum(-1, keepdim=True)
    upper = raw * torch.where(finite > 0, target / finite, 1.0)
    return {"upper": upper.movedim(-1, dim).to(x.dtype)}


def empty_rows(x: Tensor) -> Tensor:
    return torch.isneginf(x).all(-1, keepdim=True)


def nearest(distance: Tensor, valid: Tensor) -> float:
    """The smallest ``distance`` over the ``valid`` entries (inf if none)."""
    return float(torch.where(valid, distance, POS_INF).amin()) if distance.numel() else POS_INF


def softmax_reference(x, params):
    empty = empty_rows(x)
    return torch.softmax(x.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0), POS_INF


def sparsemax_reference(x, params):
    """Martins & Astudillo (2016), Algorithm 1: with z sorted descending, the support is the
    k largest for the largest k with ``1 + k z_(k) > sum_{j<=k} z_(j)``, and
    ``tau = (sum_{j<=k} z_(j) - 1) / k``; ``p = [x - tau]_+``."""
    empty = empty_rows(x)
    z = x.masked_fill(empty, 0.0).sort(-1, descending=True).values
    top_sums = z.cumsum(-1)
    k = torch.arange(1, x.size(-1) + 1, dtype=x.dtype)
    support = (1 + k * z > top_sums).sum(-1, keepdim=True).clamp_min(1)
    tau = (top_sums.gather(-1, support - 1) - 1) / support
    weights = (x - tau).clamp_min(0).masked_fill(empty, 0.0)
    return weights, nearest((x - tau).abs(), x > NEG_INF)


def entmax_reference(x, params):
    """The entmax package's bisection (60 halvings, float64) on the scores less their row
    maximum; the kink distance from ``tau = -p_max^(alpha - 1)`` in
    ``p_j = [(alpha - 1)(x_j - max) - tau]_+^(1 / (alpha - 1))``."""
    alpha = params["alpha"]
    empty = empty_rows(x)
    top = x.amax(-1, keepdim=True).masked_fill(empty, 0.0)
    weights = entmax_bisect(x - top, alpha, -1, 60).masked_fill(empty, 0.0)
    tau = -weights.amax(-1, keepdim=True) ** (alpha - 1)
    distance = ((x - top) * (alpha - 1) - tau).abs() / (alpha - 1)
    return weights, nearest(distance, x > NEG_INF)


def topk_reference(x, params):
    """Softmax over the scores at least the k-th largest (``torch.topk``, counted with
    repeats: every unmasked score when a row has fewer than k). Kinks: the gap from the
    k-th largest to the next below, 0 where a tie at it keeps more than k."""
    k = min(params["k"], x.size(-1))
    kth = x.topk(k, -1).values[..., -1:]
    kept = x >= kth
    weights, _ = softmax_reference(x.masked_fill(~kept, NEG_INF), {})
    below = x.masked_fill(kept, NEG_INF).amax(-1, keepdim=True)
    gap = torch.where(kept.sum(-1, keepdim=True) > k, 0.0, kth - below)
    return weights, nearest(gap.masked_fill(torch.isneginf(kth), POS_INF), kth == kth)


def bisect(mass: Callable[[Tensor], Tensor], low: Tensor, high: Tensor) -> Tensor:
    """Per row, the smallest ``b`` in ``[low, high]`` with ``mass(b) >= 1`` for a
    non-decreasing ``mass`` (``high`` if none), to the last bit."""
    for _ in range(200):
        middle = (low + high) / 2
        short = mass(middle) < 1
        low, high = torch.where(short, middle, low), torch.where(short, high, middle)
    return high


def bound_sum_kink(valid: Tensor, upper: Tensor) -> Tensor:
    """Distance of the row's bound sum from 1, where the row turns infeasible (p = u)."""
    return (torch.where(valid, upper, 0.0).sum(-1, keepdim=True) - 1).abs()


def csparsemax_reference(x, params):
    """``p = clip(x + b, 0, u)`` with ``b`` (= -tau) found by bisection so that p sums
    to 1; ``p = u`` where the bounds sum to less than 1."""
    upper, valid, empty = params["upper"], x > NEG_INF, empty_rows(x)
    z = x.masked_fill(empty, 0.0)
    finite_upper = torch.where(torch.isfinite(upper), upper, 0.0).amax(-1, keepdim=True)
    low = -z.amax(-1, keepdim=True)
    high = -torch.where(valid, z, POS_INF).amin(-1, keepdim=True).masked_fill(empty, 0.0) \
        + finite_upper.clamp_min(1)

    def weights(b):
        return torch.minimum((z + b).clamp_min(0), upper).masked_fill(~valid, 0.0)

    b = bisect(lambda b: weights(b).sum(-1, keepdim=True), low, high)
    distance = torch.minimum((z + b).abs(), (z + b - upper).abs())
    kink = min(nearest(distance, valid), nearest(bound_sum_kink(valid, upper), ~empty))
    return weights(b), kink


def csoftmax_reference(x, params):
    """``p = min(u, exp(x - max + b))`` with ``b`` found by bisection so that p sums to 1;
    ``p = u`` where the bounds sum to less than 1."""
    upper, valid, empty = params["upper"], x > NEG_INF, empty_rows(x)
    z = x.masked_fill(empty, 0.0)
    z = z - z.amax(-1, keepdim=True)
    log_upper = torch.log(torch.where(torch.isfinite(upper), upper, 1.0)).amax(-1, keepdim=True)
    low = torch.full_like(z[..., :1], -math.log(x.size(-1)) - 1)
    high = -torch.where(valid, z, 0.0).amin(-1, keepdim=True) + log_upper.clamp_min(0) + 1

    def weights(b):
        return torch.minimum(upper, torch.exp(z + b)).masked_fill(~valid, 0.0)

    b = bisect(lambda b: weights(b).sum(-1, keepdim=True), low, high)
    distance = (z + b - torch.log(upper)).abs()
    kink = min(nearest(distance, valid & (upper > 0) & torch.isfinite(upper)),
               nearest(bound_sum_kink(valid, upper), ~empty))
    return weights(b), kink


ALL_IMPLS = ("torch", "compiled", "triton")
NORMALISERS = [
    Normaliser("softmax", "softmax", ("torch",), lambda x, dim, impl, p: F.softmax(x, dim),
               no_params, softmax_reference),
    Normaliser("sparsemax", "sparsemax", ALL_IMPLS,
               lambda x, dim, impl, p: F.sparsemax(x, dim, impl), no_params,
               sparsemax_reference),
    Normaliser("entmax15", "entmax15", ALL_IMPLS,
               lambda x, dim, impl, p: F.entmax15(x, dim, impl), no_params,
               lambda x, p: entmax_reference(x, {"alpha": 1.5})),
    Normaliser("entmax_alpha-number", "entmax_alpha", ALL_IMPLS,
               lambda x, dim, impl, p: F.entmax_alpha(x, p["alpha"], dim, impl), number_alpha,
               entmax_reference),
    Normaliser("entmax_alpha-tensor", "entmax_alpha", ALL_IMPLS,
               lambda x, dim, impl, p: F.entmax_alpha(x, p["alpha"], dim, impl), tensor_alpha,
               entmax_reference),
    Normaliser("topk_softmax", "topk_softmax", ALL_IMPLS,
               lambda x, dim, impl, p: F.topk_softmax(x, p["k"], dim, impl), top_k,
               topk_reference),
    Normaliser("csoftmax", "csoftmax", ("torch",),
               lambda x, dim, impl, p: F.csoftmax(x, p["upper"], dim), bounds,
               csoftmax_reference),
    Normaliser("csparsemax", "csparsemax", ("torch",),
               lambda x, dim, impl, p: F.csparsemax(x, p["upper"], dim), bounds,
               csparsemax_reference),
]


def cases(impls=ALL_IMPLS):
    """``pytest.param(normaliser, impl)`` for every implementation of every normaliser."""
    return [pytest.param(case, impl, id=f"{case.name}-{impl}",
                         marks=[pytest.mark.requires("triton")] if impl == "triton" else [])
            for case in NORMALISERS for impl in case.impls if impl in impls]


# --- scores ---------------------------------------------------------------------------

def lay_out(x: Tensor, layout: str) -> Tensor:
    """``x``'s values with its strides reversed (``transposed``), or as every other entry
    of a tensor twice its size along each dim (``strided``)."""
    if layout == "transposed":
        reverse = tuple(reversed(range(x.dim())))
        return x.permute(reverse).contiguous().permute(reverse)
    if layout == "strided":
        view = x.new_zeros([2 * size for size in x.shape])[(slice(None, None, 2),) * x.dim()]
        return view.copy_(x)
    return x


@st.composite
def problems(draw, case, dtypes=DTYPES, max_len=40, max_batch=3, max_dims=4, smooth=False,
             least=1):
    """``(x, dim, params)``: scores with masked keys (and, unless ``smooth``, ties and
    slices with every key masked) in some dtype and layout, the dim to normalise, and the
    normaliser's parameters; at least ``least`` slices of ``least`` keys (2 for the
    compiled kernels, which leave a single row or key to the eager code)."""
    dims = draw(st.integers(least, max_dims))
    dim = draw(st.integers(-dims, dims - 1))
    shape = [draw(st.integers(least, max_batch)) for _ in range(dims)]
    shape[dim] = draw(st.integers(least, max_len))
    gen = generator(draw)
    scale = draw(st.sampled_from((1.0, 4.0) if smooth else (0.01, 1.0, 4.0, 20.0)))
    x = torch.randn(shape, generator=gen, dtype=torch.float64) * scale
    masked = torch.rand(shape, generator=gen) < draw(st.sampled_from((0.0, 0.3, 0.9)))
    if not smooth:
        if draw(st.booleans()):
            x = x.round()
        sliced = [1 if d == dim % dims else size for d, size in enumerate(shape)]
        masked |= torch.rand(sliced, generator=gen) < draw(st.sampled_from((0.0, 0.3)))
    x = lay_out(x.masked_fill(masked, NEG_INF).to(draw(st.sampled_from(dtypes))),
                draw(st.sampled_from(LAYOUTS)))
    return x, dim, case.params(draw, x, dim, smooth)


def examples(impl, count=None):
    """Seeded settings for ``impl``; a failure shrinks to a small example in the eager
    implementation only (shrinking calls the compiled kernels and the interpreter for
    minutes), elsewhere it is reported as first found."""
    phases = [Phase.explicit, Phase.reuse, Phase.generate]
    return settings(derandomize=True, database=None, deadline=None,
                    max_examples=count or EXAMPLES[impl],
                    phases=phases + [Phase.shrink] if impl == "torch" else phases,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def no_silent_eager_fallback():
    """A compiled kernel past dynamo's recompile limit would run eagerly with a warning and
    the compiled tests would test the eager code: fail instead (as test_compiled.py)."""
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        yield


# --- checks ---------------------------------------------------------------------------

def tensors_of(params):
    return {name: value for name, value in params.items() if isinstance(value, Tensor)}


def float64(params):
    return {name: value.double() if isinstance(value, Tensor) else value
            for name, value in params.items()}


def reference(case, x, dim, params):
    """The float64 reference weights of ``x`` along ``dim``, and the kink distance."""
    moved = {name: value.movedim(dim, -1) if isinstance(value, Tensor) else value
             for name, value in float64(params).items()}
    with torch.no_grad():
        weights, kink = case.reference(x.detach().double().movedim(dim, -1), moved)
    return weights.movedim(-1, dim), kink


def spread(x: Tensor, dim: int) -> float:
    """The largest range of finite scores in a slice along ``dim``."""
    rows = x.detach().double().movedim(dim, -1)
    finite = torch.isfinite(rows)
    high = torch.where(finite, rows, NEG_INF).amax(-1)
    low = torch.where(finite, rows, POS_INF).amin(-1)
    ranges = (high - low)[finite.any(-1)]
    return float(ranges.max()) if ranges.numel() else 0.0


def budget(dtype: torch.dtype, score_spread: float) -> float:
    return ROUNDING * torch.finfo(dtype).eps * (1 + score_spread)


def assert_close(ours: Tensor, expected: Tensor, tol: float, what: str):
    error = (ours.detach().double() - expected.detach().double()).abs()
    worst = float(error.max()) if error.numel() else 0.0
    assert worst <= tol, f"{what}: off by {worst:.3g} (allowed {tol:.3g})"


def assert_on_simplex(x: Tensor, dim: int, params, weights: Tensor):
    """Contract 1 and 3 (and 7 for bounds): the weights' dtype and shape, 0 <= p (<= u),
    exact zeros on masked keys and on slices with every key masked, sums of 1 (p = u where
    the bounds sum to less than 1)."""
    assert weights.dtype == weights_dtype(x.dtype) and weights.shape == x.shape
    p = weights.detach().double().movedim(dim, -1)
    masked = torch.isneginf(x.detach().movedim(dim, -1))
    empty = masked.all(-1)
    assert (p[masked] == 0).all(), "a masked key got weight"
    assert (p >= 0).all(), f"negative weight {float(p.min()):.3g}"
    on_simplex = ~empty
    if "upper" in params:
        upper = torch.where(masked, 0.0, params["upper"].double().movedim(dim, -1))
        assert (p <= upper).all(), f"a weight above its bound by {float((p - upper).max()):.3g}"
        infeasible = upper.sum(-1) < 1
        assert torch.equal(p[infeasible], upper[infeasible]), "infeasible row: p != u"
        on_simplex &= ~infeasible
    assert_close(p.sum(-1)[on_simplex], torch.ones(()), SUM_TOL[weights.dtype], "row sums")


def upstream(like: Tensor) -> Tensor:
    gen = torch.Generator().manual_seed(123)
    return torch.randn(like.shape, generator=gen, dtype=torch.float64).to(like.dtype)


def conditioning(name, params) -> float:
    """How many times a parameter's gradient amplifies rounding: ``r^2``, ``r = 1 / (alpha -
    1)``, for alpha (its gradient is ``r^2`` times a difference of sums of size 1), else 1."""
    return float((params["alpha"].min() - 1) ** -2) if name == "alpha" else 1.0


def weights_and_grads(case, x, dim, impl, params):
    """The weights, and the gradients of ``<weights, upstream>`` for ``x`` and the tensor
    parameters."""
    x = x.detach().requires_grad_()
    tensors = {name: value.detach().requires_grad_() for name, value in tensors_of(params).items()}
    weights = case.call(x, dim, impl, {**params, **tensors})
    grads = torch.autograd.grad(weights, [x, *tensors.values()], upstream(weights))
    return (weights.detach(), *grads)


def slices(t: Tensor, dim: int) -> Tensor:
    return t.movedim(dim, -1)


def corrupt(x, dim, params, gen):
    """``x`` laid out as the result is, that copy (and the bounds) with, in some slices
    along ``dim``, a NaN or +inf score (constrained: or a NaN, negative or -inf bound on an
    unmasked key), and which slices."""
    rows = slices(x.detach(), dim).clone(memory_format=torch.contiguous_format)
    clean = rows.clone().movedim(-1, dim)
    flat = rows.view(-1, rows.size(-1))
    upper = (slices(params["upper"], dim).clone(memory_format=torch.contiguous_format)
             if "upper" in params else None)
    kinds = ["nan", "inf"] + (["bound nan", "bound -0.5", "bound -inf"] if upper is not None
                              else [])
    broken = torch.rand(flat.size(0), generator=gen) < 0.5
    broken[torch.randint(flat.size(0), (), generator=gen)] = True
    for row in broken.nonzero().flatten().tolist():
        kind = kinds[int(torch.randint(len(kinds), (), generator=gen))]
        unmasked = (flat[row] > NEG_INF).nonzero().flatten()
        if kind.startswith("bound") and unmasked.numel():
            key = unmasked[torch.randint(unmasked.numel(), (), generator=gen)]
            upper.view(-1, rows.size(-1))[row, key] = float(kind.split()[1])
        else:
            key = torch.randint(flat.size(1), (), generator=gen)
            flat[row, key] = NAN if kind == "nan" else POS_INF
    bad_params = dict(params, upper=upper.movedim(-1, dim)) if upper is not None else params
    return clean, rows.movedim(-1, dim), bad_params, broken.view(rows.shape[:-1])


def assert_second_order(fn, inputs, impl):
    """Contract 8: double backward exactly right (gradgradcheck), never a gradient without a
    graph under ``create_graph=True``; the Triton backward may instead refuse it with one
    clear line."""
    out = fn(*inputs)
    try:  # an upstream that needs a gradient: piecewise-linear maps' have no other graph
        grads = torch.autograd.grad(out, inputs, upstream(out).requires_grad_(),
                                    create_graph=True)
    except Exception as error:  # noqa: BLE001 - only Triton may refuse, in one line
        assert impl == "triton", f"{type(error).__name__}: {error}"
        assert str(error) and "\n" not in str(error).strip(), str(error)
        return
    assert all(grad.requires_grad for grad in grads), \
        "a gradient without a graph under create_graph=True"
    assert torch.autograd.gradgradcheck(fn, inputs)


# --- the properties -------------------------------------------------------------------

@pytest.mark.parametrize("case,impl", cases())
def test_rows_lie_on_the_simplex_with_masked_keys_at_zero(case, impl):
    """Contract 1, 3 and 7; slices with every key masked get zero gradient too."""
    @examples(impl)
    @given(problems(case, least=LEAST[impl]))
    def check(problem):
        x, dim, params = problem
        weights, grad, *_ = weights_and_grads(case, x, dim, impl, params)
        assert_on_simplex(x, dim, params, weights)
        empty = torch.isneginf(slices(x, dim)).all(-1)
        assert (slices(grad, dim)[empty] == 0).all(), "a slice with every key masked got gradient"

    check()


@pytest.mark.parametrize("case,impl", cases())
def test_weights_agree_with_a_float64_reference(case, impl):
    """To a few rounding errors per unit of the scores' spread, in the weights' dtype."""
    @examples(impl)
    @given(problems(case, least=LEAST[impl]))
    def check(problem):
        x, dim, params = problem
        weights = case.call(x, dim, impl, params)
        expected, _ = reference(case, x, dim, params)
        assert_close(weights, expected, budget(weights.dtype, spread(x, dim)), "weights")

    check()


@pytest.mark.parametrize("case,impl", cases())
def test_shifted_scores_give_the_same_weights(case, impl):
    """Contract 5: the weights of ``s + c`` (rounded to the scores' dtype), for offsets up
    to 1e6 (float32) and 1e30 (float64), equal the float64 weights of ``(s + c) - c``,
    which is exact, to a few rounding errors; and they lie on the simplex."""
    @examples(impl)
    @given(problems(case, least=LEAST[impl]), st.data())
    def check(problem, data):
        x, dim, params = problem
        exponent = data.draw(st.sampled_from(range(OFFSET_EXPONENT[x.dtype], -1, -1)),
                             label="log10 offset")
        offset = data.draw(st.sampled_from((-1.0, 1.0)), label="sign") * 10.0 ** exponent
        shifted = (x.double() + offset).to(x.dtype)
        unshifted = shifted.double() - offset
        weights = case.call(shifted, dim, impl, params)
        assert_on_simplex(shifted, dim, params, weights)
        expected = case.call(unshifted, dim, impl, float64(params))
        assert_close(weights, expected, budget(weights.dtype, spread(unshifted, dim)),
                     f"weights at offset {offset:.3g}")

    check()


@pytest.mark.parametrize("case,impl", cases())
def test_non_finite_scores_make_their_row_nan_and_leave_the_others(case, impl):
    """Contract 4 (and 7): a NaN or +inf score, or a NaN or negative bound on an unmasked
    key, makes that slice's weights and gradient all NaN; every other slice gets the weights
    and gradient it gets without them, bit for bit."""
    @examples(impl)
    @given(problems(case, least=LEAST[impl]), st.data())
    def check(problem, data):
        x, dim, params = problem
        # the same layout for both: a layout may change the rounding of every slice
        x, bad_x, bad_params, broken = corrupt(x, dim, params, generator(data.draw))
        clean = weights_and_grads(case, x, dim, impl, params)
        dirty = weights_and_grads(case, bad_x, dim, impl, bad_params)
        for what, ours, theirs in zip(("weights", "gradient"), dirty, clean):
            ours, theirs = slices(ours, dim), slices(theirs, dim)
            assert ours[broken].isnan().all(), f"{what}: a broken slice is not all NaN"
            assert torch.equal(ours[~broken], theirs[~broken]), f"{what}: other slices changed"

    check()


@pytest.mark.parametrize("case,impl", cases(("compiled", "triton")))
def test_implementations_agree_with_the_eager_one(case, impl):
    """Weights to a few rounding errors; gradients too, away from kinks (where a weight of
    1e-30 against 0 changes ``p^(2 - alpha)``)."""
    @examples(impl)
    @given(problems(case, least=LEAST[impl]))
    def check(problem):
        x, dim, params = problem
        ours = weights_and_grads(case, x, dim, impl, params)
        eager = weights_and_grads(case, x, dim, "torch", params)
        tol = budget(ours[0].dtype, spread(x, dim))
        assert_close(ours[0], eager[0], tol, "weights")
        if reference(case, x, dim, params)[1] > KINK:
            for name, ours_grad, eager_grad in zip(["x", *tensors_of(params)], ours[1:],
                                                   eager[1:]):
                scale = (1 + float(eager_grad.abs().max())) * conditioning(name, params)
                assert_close(ours_grad, eager_grad, tol * scale, f"gradient for {name}")

    check()


@pytest.mark.parametrize("case,impl", cases())
def test_float64_gradcheck_and_gradgradcheck(case, impl):
    """Contract 8, for the scores and the tensor parameters (alpha, bounds), away from
    ties and kinks."""
    @examples(impl, GRAD_EXAMPLES[impl])
    @given(problems(case, dtypes=(torch.float64,), smooth=True, **GRAD_SIZES[impl]))
    def check(problem):
        x, dim, params = problem
        assume(reference(case, x, dim, params)[1] > KINK)
        names = list(tensors_of(params))

        def fn(x, *tensors):
            return case.call(x, dim, impl, {**params, **dict(zip(names, tensors))})

        inputs = (x.detach().requires_grad_(),
                  *(params[name].detach().requires_grad_() for name in names))
        assert torch.autograd.gradcheck(fn, inputs)
        assert_second_order(fn, inputs, impl)

    check()


# --- dtypes, empty rows, parameters (contract points 1, 2, 6, 7) ------------------------

def default_params(case, x, dim=-1):
    """Parameters in the domain for scores ``x``."""
    if case.params is no_params:
        return {}
    if case.params is number_alpha:
        return {"alpha": 1.3}
    if case.params is tensor_alpha:
        shape = list(x.shape)
        shape[dim] = 1
        return {"alpha": torch.full(shape, 1.3, dtype=torch.float64)}
    if case.params is top_k:
        return {"k": 3}
    dtype = x.dtype if x.is_floating_point() else torch.float32
    return {"upper": torch.full(x.shape, 0.5, dtype=dtype)}


def assert_one_line(error):
    assert str(error) and "\n" not in str(error), str(error)


@pytest.mark.parametrize("case,impl", cases())
def test_scores_that_are_not_floating_point_are_a_type_error(case, impl):
    """Contract 1, in one line naming the function."""
    for dtype in (torch.int64, torch.int32, torch.bool, torch.complex64):
        x = torch.ones(2, 5, dtype=dtype)
        with pytest.raises(TypeError) as raised:
            case.call(x, -1, impl, default_params(case, x))
        assert str(raised.value) == (f"{case.function} needs floating-point scores (float16, "
                                     f"bfloat16, float32 or float64), got {dtype}")


@pytest.mark.parametrize("case,impl", cases())
def test_an_empty_dim_gives_empty_weights_as_softmax_does(case, impl):
    """Contract 2, in every dtype."""
    for (shape, dim), dtype in itertools.product([((2, 0), -1), ((0,), 0), ((3, 0, 2), 1)],
                                                 DTYPES):
        x = torch.zeros(shape, dtype=dtype)
        weights = case.call(x, dim, impl, default_params(case, x, dim))
        assert weights.shape == x.shape and weights.dtype == weights_dtype(dtype), (shape, dtype)


BAD_ALPHAS = [0.0, -0.0, -1.5, NAN, POS_INF, NEG_INF]


@pytest.mark.parametrize("as_tensor", [False, True], ids=["number", "tensor"])
@pytest.mark.parametrize("impl", ["torch", "compiled", pytest.param(
    "triton", marks=pytest.mark.requires("triton"))])
def test_alpha_outside_its_domain_is_a_value_error(impl, as_tensor):
    """Contract 6: a number, or a tensor with one bad value among good ones (read back)."""
    x = torch.randn(2, 3, 5)
    for bad in BAD_ALPHAS:
        alpha = torch.tensor([1.5, bad, 2.0]).view(1, 3, 1) if as_tensor else bad
        with pytest.raises(ValueError) as raised:
            F.entmax_alpha(x, alpha, -1, impl)
        assert_one_line(raised.value)


@pytest.mark.parametrize("impl", ["torch", "compiled", pytest.param(
    "triton", marks=pytest.mark.requires("triton"))])
def test_k_must_be_an_integer_of_at_least_one(impl):
    """Contract 6: bool, float, text, None and k < 1 refused; numpy integers and 0-d integer
    tensors taken as the int they hold."""
    x = torch.randn(2, 3, 7)
    for bad in [0, -1, True, False, 2.5, 3.0, "3", None, torch.tensor(3.0)]:
        with pytest.raises(ValueError) as raised:
            F.topk_softmax(x, bad, -1, impl)
        assert_one_line(raised.value)
    expected = F.topk_softmax(x, 3, -1, impl)
    for k in [np.int64(3), np.int32(3), torch.tensor(3)]:
        assert torch.equal(F.topk_softmax(x, k, -1, impl), expected), type(k)


@pytest.mark.parametrize("impl", ["torch", "compiled", pytest.param(
    "triton", marks=pytest.mark.requires("triton"))])
def test_n_iter_must_be_an_integer_of_at_least_one(impl):
    x = torch.randn(2, 3, 7)
    for bad in [0, -1, True, False, 2.5, 3.0]:
        with pytest.raises(ValueError) as raised:
            F.entmax_alpha(x, 1.3, -1, impl, n_iter=bad)
        assert_one_line(raised.value)


@pytest.mark.parametrize("function", [F.csoftmax, F.csparsemax])
@pytest.mark.parametrize("bound", [NAN, -0.5, NEG_INF, "infeasible"])
def test_bounds_out_of_the_domain_are_refused_under_check(function, bound):
    """Contract 7: with ``check=True`` a NaN or negative bound on an unmasked key, or bounds
    summing to less than 1, raise InfeasibleBounds in one line."""
    x = torch.tensor([[1.0, 0.0, 2.0, NEG_INF], [0.5, 0.5, 0.5, 0.5]])
    upper = torch.full_like(x, 0.6)
    if bound == "infeasible":
        upper[1] = 0.2
    else:
        upper[0, 1] = bound
    with pytest.raises(InfeasibleBounds) as raised:
        function(x, upper, check=True)
    assert_one_line(raised.value)
