"""Sparsemax and 1.5-entmax by our sort, and threshold_and_support: agreement with the
entmax package's sorts and threshold functions (and its bisection for other alphas) over
shapes, dims, dtypes, offsets, ties and masks; special rows under the contract; ``k``;
float64 gradcheck through ``by_sort``."""

import math
from functools import partial

import pytest
import torch
from entmax import entmax15, entmax_bisect, sparsemax
from entmax.activations import _entmax_threshold_and_support, _sparsemax_threshold_and_support
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_attn_plugin.normalizers.entmax_family import by_sort
from sparse_attn_plugin.normalizers.entmax_sort import (
    entmax15_sort,
    sparsemax_sort,
    threshold_and_support,
)

from helpers.scores import random_scores, with_ties

NEG_INF = float("-inf")
SOLVERS = {2.0: (sparsemax_sort, sparsemax), 1.5: (entmax15_sort, entmax15)}
#: The entmax package's threshold of the scores ``x`` at alpha 2 and 1.5, in its own
#: convention: ``p = [x - tau]_+`` and ``p = [x / 2 - tau]_+^2``.
REFERENCE_THRESHOLD = {2.0: _sparsemax_threshold_and_support,
                       1.5: lambda x, dim: _entmax_threshold_and_support(x / 2, dim)}
#: Weights of float32 (from float32 scores) against the float64 reference.
ATOL = {torch.float64: 1e-12, torch.float32: 1e-6}
SETTINGS = settings(derandomize=True, database=None, deadline=None, max_examples=150)


@st.composite
def problems(draw, masks=True):
    """``(scores, dim)``: up to 3 dims of 1-9 entries, float32 or float64, from a few
    values (ties) or spread ones, shifted by an offset up to 1e6, ``-inf`` on some
    entries (never a whole slice along ``dim``)."""
    shape = draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 31)))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0]))
    if draw(st.booleans()):   # ties: a few values
        scores = torch.randint(-3, 3, shape, generator=gen).double() * scale / 2
    else:
        scores = torch.randn(shape, generator=gen, dtype=torch.float64) * scale
    scores = scores + draw(st.sampled_from([0.0, 1e3, -1e6, 1e6]))
    if masks:
        hidden = torch.rand(shape, generator=gen) < draw(st.sampled_from([0.0, 0.3, 0.7]))
        hidden.select(dim, 0).fill_(False)
        scores = scores.masked_fill(hidden, NEG_INF)
    return scores.to(dtype), dim


@pytest.mark.parametrize("alpha", SOLVERS)
@SETTINGS
@given(problems(), st.integers(1, 10))
def test_weights_match_the_entmax_package(alpha, problem, k):
    scores, dim = problem
    ours, reference = SOLVERS[alpha]
    expected = reference(scores.double(), dim)
    for kk in (None, k):   # the full sort, and k, also below the support
        weights = ours(scores, dim, kk)
        assert weights.dtype == scores.dtype and weights.shape == scores.shape
        torch.testing.assert_close(weights.double(), expected, rtol=0, atol=ATOL[scores.dtype])
        assert (weights[torch.isneginf(scores)] == 0).all()
    if scores.dtype == torch.float32:   # as the package computes float32 itself
        torch.testing.assert_close(ours(scores, dim), reference(scores, dim), rtol=0, atol=1e-6)


@pytest.mark.parametrize("alpha", SOLVERS)
@SETTINGS
@given(problems())
def test_threshold_and_support_match_the_entmax_package(alpha, problem):
    """The same ``tau`` as the package's functions give the scores less their maximum,
    plus ``(alpha - 1)`` times it (the package shifts before its threshold too), and on
    unshifted float64 scores the package's own; the same support sizes."""
    scores, dim = problem
    tau, support = threshold_and_support(scores, alpha, dim)
    top = scores.amax(dim, keepdim=True)
    ref_tau, ref_support = REFERENCE_THRESHOLD[alpha](scores - top, dim=dim)
    assert support.dtype == torch.long and support.shape == top.shape == tau.shape
    assert torch.equal(support, ref_support)
    # to the rounding of the shifted scores and of adding the maximum back
    slack = ATOL[scores.dtype] * 10 + 2 * torch.finfo(scores.dtype).eps * top.abs()
    assert ((tau - (ref_tau + (alpha - 1) * top)).abs() <= slack).all()
    if scores.dtype == torch.float64 and top.abs().max() < 1e4:
        raw_tau, raw_support = REFERENCE_THRESHOLD[alpha](scores, dim=dim)
        assert torch.equal(support, raw_support)
        torch.testing.assert_close(tau, raw_tau, rtol=0, atol=1e-9)


@pytest.mark.parametrize("alpha", [1.01, 1.2, 1.5, 1.5 + 1e-9, 1.7, 2 - 1e-9, 2.0, 2 + 1e-9,
                                   2.5, 4.0])
def test_threshold_gives_the_weights_at_every_alpha(alpha):
    """``[(alpha - 1) s - tau]_+^(1 / (alpha - 1))`` is the bisection's alpha-entmax, its
    nonzeros number ``support_size``; alphas next to 1.5 and 2 (read from the weights, by
    the Newton or the general solver) give those (sorted) thresholds."""
    scores = with_ties(random_scores(seed=7))
    tau, support = threshold_and_support(scores, alpha)
    weights = entmax_bisect(scores, alpha, n_iter=200)
    formula = ((alpha - 1) * scores - tau).clamp_min(0) ** (1 / (alpha - 1))
    torch.testing.assert_close(formula, weights, rtol=0, atol=1e-9)
    assert torch.equal(support, (weights > 0).sum(-1, keepdim=True))
    near = min((1.5, 2.0), key=lambda a: abs(a - alpha))
    if abs(near - alpha) < 1e-6:
        torch.testing.assert_close(tau, threshold_and_support(scores, near)[0], rtol=0,
                                   atol=1e-7)


@pytest.mark.parametrize("alpha", [1.3, 1.5, 2.0, 3.0])
def test_threshold_along_any_dim_and_of_half_precision(alpha):
    scores = random_scores(seed=8)
    tau, support = threshold_and_support(scores.transpose(1, 3), alpha, dim=1)
    expected = threshold_and_support(scores, alpha)
    assert torch.equal(tau.transpose(1, 3), expected[0])
    assert torch.equal(support.transpose(1, 3), expected[1])
    assert threshold_and_support(scores.half(), alpha)[0].dtype == torch.float32


@pytest.mark.parametrize("alpha", [1.3, 1.5, 2.0, 3.0])
def test_threshold_of_masked_and_empty_slices(alpha):
    """A slice with every entry ``-inf`` (or none) has support 0 and ``tau = +inf``: no
    entry passes it; the others are as alone."""
    scores = random_scores(shape=(4, 6), seed=9)
    scores[1] = NEG_INF
    tau, support = threshold_and_support(scores, alpha)
    assert support[1].item() == 0 and tau[1].item() == math.inf
    alone = threshold_and_support(scores[[0, 2, 3]], alpha)
    assert torch.equal(tau[[0, 2, 3]], alone[0]) and torch.equal(support[[0, 2, 3]], alone[1])
    tau, support = threshold_and_support(torch.zeros(3, 0), alpha)
    assert tau.shape == support.shape == (3, 1)
    assert (support == 0).all() and (tau == math.inf).all()


@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("alpha", [1.3, 1.5, 2.0, 3.0])
def test_threshold_of_a_nan_or_inf_score_is_a_value_error(alpha, bad):
    scores = random_scores(shape=(4, 6), seed=10)
    scores[2, 3] = bad
    with pytest.raises(ValueError, match=r"^threshold_and_support: 1 of 4 slices have a "
                                         r"NaN or \+inf score, and no threshold$"):
        threshold_and_support(scores, alpha)


@pytest.mark.parametrize("alpha", [1.0, 0.5, -1, math.nan, math.inf, "1.5x", None, True,
                                   torch.tensor(1.5)])
def test_threshold_needs_a_finite_number_alpha_above_one(alpha):
    with pytest.raises(ValueError, match=r"^threshold_and_support needs a finite number "
                                         r"alpha > 1, got .*$"):
        threshold_and_support(torch.randn(2, 5), alpha)


def test_threshold_needs_floating_point_scores():
    with pytest.raises(TypeError, match="^threshold_and_support needs floating-point"):
        threshold_and_support(torch.ones(2, 5, dtype=torch.long), 1.5)


@pytest.mark.parametrize("alpha", SOLVERS)
@pytest.mark.parametrize("k", [None, 1, 2, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_special_rows_follow_the_contract_without_an_exception(alpha, k, dtype):
    """Every entry ``-inf``: zero weights; a NaN or ``+inf`` anywhere: NaN weights; the
    other rows bit for bit as without them."""
    ours = SOLVERS[alpha][0]
    scores = random_scores(shape=(6, 7), seed=11, dtype=dtype)
    clean = ours(scores, -1, k)
    scores[1] = NEG_INF
    scores[2, 4] = math.nan
    scores[3, 0] = math.inf
    scores[4] = math.nan
    weights = ours(scores, -1, k)
    assert (weights[1] == 0).all() and weights[2:5].isnan().all()
    assert torch.equal(weights[[0, 5]], clean[[0, 5]])


@pytest.mark.parametrize("alpha", SOLVERS)
@SETTINGS
@given(problems(), st.data())
def test_special_slices_of_any_problem(alpha, problem, data):
    """Slices along ``dim`` made all ``-inf``, or given a NaN or ``+inf`` entry: zero and
    NaN weights there (with or without ``k``), the rest bit for bit unchanged."""
    scores, dim = problem
    ours = SOLVERS[alpha][0]
    k = data.draw(st.sampled_from([None, 1, 3]))
    clean = ours(scores, dim, k)
    rows = scores.movedim(dim, -1)   # a view: writing to it writes to the scores
    kinds = data.draw(st.lists(st.sampled_from(["ok", "-inf", "nan", "+inf"]),
                               min_size=rows[..., 0].numel(), max_size=rows[..., 0].numel()))
    kinds = torch.tensor([["ok", "-inf", "nan", "+inf"].index(kind) for kind in kinds])
    kinds = kinds.view(rows.shape[:-1])
    entry = data.draw(st.integers(0, rows.size(-1) - 1))
    rows[kinds == 1] = NEG_INF
    rows[..., entry][kinds == 2] = math.nan
    rows[..., entry][kinds == 3] = math.inf
    weights = ours(scores, dim, k).movedim(dim, -1)
    assert (weights[kinds == 1] == 0).all() and weights[kinds >= 2].isnan().all()
    assert torch.equal(weights[kinds == 0], clean.movedim(dim, -1)[kinds == 0])


@pytest.mark.parametrize("alpha", SOLVERS)
def test_k_below_the_support_falls_back_to_the_full_sort(alpha):
    ours, reference = SOLVERS[alpha]
    scores = torch.linspace(0, 0.1, 12, dtype=torch.float64).repeat(3, 1)   # dense
    scores[2] = torch.arange(12.0) * 3                                       # one key
    full = ours(scores)
    assert ((full > 0).sum(-1) == torch.tensor([12, 12, 1])).all()
    for k in (1, 2, 11, 12, 40):
        torch.testing.assert_close(ours(scores, k=k), full, rtol=0, atol=1e-15)
        torch.testing.assert_close(ours(scores, k=k), reference(scores, -1, k), rtol=0,
                                   atol=1e-12)


@pytest.mark.parametrize("k", [0, -2, True, 1.5, "3"])
def test_k_must_be_an_integer_of_at_least_one(k):
    with pytest.raises(ValueError, match=r"^the partial sort needs an integer k >= 1, got k="):
        sparsemax_sort(torch.randn(2, 5), k=k)


@pytest.mark.parametrize("alpha", SOLVERS)
def test_half_precision_empty_dims_and_no_graph(alpha):
    ours = SOLVERS[alpha][0]
    scores = random_scores(seed=12)
    half = ours(scores.half())
    assert half.dtype == torch.float32
    assert torch.equal(half, ours(scores.half().float()))
    assert ours(torch.zeros(3, 0)).shape == (3, 0)
    assert not ours(scores.requires_grad_()).requires_grad   # by_sort differentiates


@pytest.mark.parametrize("alpha", SOLVERS)
@pytest.mark.parametrize("k", [None, 2])
def test_gradcheck_through_by_sort(alpha, k):
    """First and second derivatives in float64 through ``by_sort`` (its closed form),
    with masked keys, a masked row and ``k`` below some supports."""
    fn = by_sort(partial(SOLVERS[alpha][0], k=k), alpha)
    scores = random_scores(shape=(2, 3, 6), seed=13, masked_fraction=0.2)
    scores[0, 1] = NEG_INF
    scores.requires_grad_()
    assert torch.autograd.gradcheck(fn, (scores,))
    assert torch.autograd.gradgradcheck(fn, (scores,))
    torch.testing.assert_close(fn(scores)[1], SOLVERS[alpha][1](scores.detach()[1], -1),
                               rtol=0, atol=1e-12)
