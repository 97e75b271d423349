"""Top-k attention (Zhao et al. 2019) under the normalisers' contract (issue 44), through
``sparse_attn_plugin.functional.topk_softmax`` and ``sparse_attn_plugin.normalizers.TopK``,
eager (``torch``) and ``compiled``:

* a NaN or +inf score makes its row NaN, weights and gradient, and leaves every other row
  as it was, bit for bit; a row with every key masked is all zero with zero gradient;
* double backward is softmax's on the kept entries (float64 gradgradcheck);
* k is an integer >= 1: ``True`` is refused in one line, numpy and tensor integers run as
  the same int;
* one compiled graph serves every k (k = 4 then k = 128 compiles nothing more);
* properties over shapes, k, dtypes, masks, ties and non-finite entries: rows on the
  simplex, exactly the entries >= the k-th largest kept, compiled = eager.

Seeded (``derandomize``) and bounded: compiling costs seconds per kernel, so the compiled
implementation gets few examples and shares test_compiled.py's worker."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_attn_plugin import functional as F
from sparse_attn_plugin.normalizers import TopK

pytestmark = [pytest.mark.xdist_group("compiled"), pytest.mark.slow]

NEG_INF, POS_INF, NAN = float("-inf"), float("inf"), float("nan")
IMPLS = ("torch", "compiled")
EXAMPLES = {"torch": 40, "compiled": 4}


def scores_with_bad_rows(dtype=torch.float64):
    """Scores (5, 3, 9) whose rows [0, 1] hold a NaN, [1, 2] a +inf, [2, 0] a NaN among masked
    keys, [3, 1] +inf twice, [4, 2] every key masked; the rest ordinary (with -inf)."""
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(5, 3, 9, generator=gen, dtype=torch.float64).to(dtype)
    scores[..., 7] = NEG_INF
    scores[0, 1, 4] = NAN
    scores[1, 2, 0] = POS_INF
    scores[2, 0, :] = NEG_INF
    scores[2, 0, 3] = NAN
    scores[3, 1, 2:4] = POS_INF
    scores[4, 2] = NEG_INF
    return scores


BAD = [(0, 1), (1, 2), (2, 0), (3, 1)]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("k", [1, 3, 9])  # 9 keys: k >= the row length is softmax
def test_a_nan_or_inf_score_makes_its_row_nan_and_leaves_the_others_bit_for_bit(impl, k):
    scores = scores_with_bad_rows().requires_grad_()
    probs = F.topk_softmax(scores, k, impl=impl)
    (grad,) = torch.autograd.grad(probs, scores, torch.linspace(-1, 1, 9).expand(5, 3, 9).double())
    bad = torch.zeros(5, 3, dtype=torch.bool)
    bad[tuple(zip(*BAD))] = True
    assert probs[bad].isnan().all() and grad[bad].isnan().all()
    assert (probs[4, 2] == 0).all() and (grad[4, 2] == 0).all()
    good = scores.detach()[~bad].view(-1, 1, 9)
    assert torch.equal(probs[~bad], F.topk_softmax(good, k, impl=impl).view(-1, 9))
    assert torch.isfinite(grad[~bad]).all()


@pytest.mark.parametrize("impl", IMPLS)
def test_half_precision_overflow_to_inf_gives_nan_rows(impl):
    scores = torch.tensor([[7e4, 1.0, 2.0, 0.0], [1.0, 2.0, 3.0, 4.0]]).half()
    probs = TopK(k=2, impl=impl)(scores)
    assert probs.dtype == torch.float32 and probs[0].isnan().all()
    torch.testing.assert_close(probs[1], torch.softmax(torch.tensor([0, 0, 3.0, 4.0]).masked_fill(
        torch.tensor([True, True, False, False]), NEG_INF), -1))


def separated_scores(seed, shape=(2, 3, 7)):
    """float64 scores at least 0.1 apart in each row (no ties: a gradient step of 1e-6
    moves no score across the k-th largest), some keys masked."""
    gen = torch.Generator().manual_seed(seed)
    order = torch.rand(shape, generator=gen).argsort(-1).double()
    scores = order * 0.3 + 0.1 * torch.rand(shape, generator=gen, dtype=torch.float64)
    scores[0, 0, :2] = NEG_INF
    return scores.requires_grad_()


@pytest.mark.parametrize("impl", IMPLS)
def test_double_backward_is_softmaxs_on_the_kept_entries(impl):
    scores = separated_scores(seed=1)
    assert torch.autograd.gradgradcheck(lambda s: F.topk_softmax(s, 3, impl=impl), (scores,))
    module = TopK(k=3, impl=impl)
    assert torch.autograd.gradgradcheck(module, (scores,))


@pytest.mark.parametrize("impl", IMPLS)
def test_hessian_vector_product_equals_softmaxs_on_the_kept_keys(impl):
    scores = separated_scores(seed=2).detach()
    weights = torch.linspace(-1, 2, 7, dtype=torch.float64)
    vector = torch.randn(scores.shape, generator=torch.Generator().manual_seed(3),
                         dtype=torch.float64)
    kept = scores >= scores.topk(3, -1).values[..., -1:]

    def loss(fn):
        return lambda s: (fn(s) * weights).sum()

    _, ours = torch.autograd.functional.hvp(loss(lambda s: F.topk_softmax(s, 3, impl=impl)),
                                            scores, vector)
    _, softmax = torch.autograd.functional.hvp(
        loss(lambda s: torch.softmax(s.masked_fill(~kept, NEG_INF), -1)), scores, vector)
    torch.testing.assert_close(ours, softmax, atol=1e-12, rtol=0)


@pytest.mark.parametrize("k", [True, np.True_, torch.tensor(True), 2.5, torch.tensor(2.0), 0])
def test_k_must_be_an_integer_not_a_bool(k):
    message = "top-k attention needs an integer k >= 1, got k="
    with pytest.raises(ValueError, match=message) as error:
        F.topk_softmax(torch.randn(2, 5), k)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=message):
        TopK(k=k)


@pytest.mark.parametrize("impl", ["torch", "compiled",
                                  pytest.param("triton", marks=pytest.mark.requires("triton"))])
@pytest.mark.parametrize("k", [np.int64(3), np.array(3), torch.tensor(3)],
                         ids=["numpy int", "numpy 0-d array", "0-d tensor"])
def test_numpy_and_tensor_k_run_as_the_int(impl, k):
    scores = torch.randn(2, 3, 4, 6, generator=torch.Generator().manual_seed(5))
    expected = F.topk_softmax(scores, 3, impl=impl)
    module = TopK(k=k, impl=impl)
    assert type(module.k) is int and "k=3," in repr(module)
    assert torch.equal(module(scores), expected)
    assert torch.equal(F.topk_softmax(scores, k, impl=impl), expected)


def test_one_compiled_graph_serves_every_k():
    scores = torch.randn(4, 2, 3, 130, generator=torch.Generator().manual_seed(6))
    F.topk_softmax(scores, 4, impl="compiled")
    with torch._dynamo.config.patch(error_on_recompile=True):
        probs = F.topk_softmax(scores, 128, impl="compiled")
    torch.testing.assert_close(probs, F.topk_softmax(scores, 128, impl="torch"))


DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@st.composite
def masked_scores(draw):
    """Scores of 1-3 dims (last 1-12 keys) on a coarse grid (ties), some keys -inf (whole
    rows too), and a k from 1 to past the row length."""
    shape = draw(st.lists(st.integers(1, 4), min_size=0, max_size=2)) + [draw(st.integers(1, 12))]
    size = int(np.prod(shape))
    grid = draw(st.lists(st.integers(-16, 16), min_size=size, max_size=size))
    masked = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    values = np.where(masked, -np.inf, np.array(grid) / 4.0).reshape(shape)
    dtype = draw(st.sampled_from(DTYPES))
    return torch.tensor(values, dtype=dtype), draw(st.integers(1, shape[-1] + 2))


def kth_largest(row, k):
    """The k-th largest of a float64 numpy row, counted with repeats; -inf past its length."""
    return np.sort(row)[-k] if k <= row.size else -np.inf


def check_weights(scores, k, probs):
    """Weights on the simplex over exactly the unmasked entries >= the k-th largest; float32
    for half inputs."""
    assert probs.dtype == (torch.float64 if scores.dtype == torch.float64 else torch.float32)
    rows = scores.double().numpy().reshape(-1, scores.size(-1))
    for row, weights in zip(rows, probs.double().numpy().reshape(rows.shape)):
        kept = (row >= kth_largest(row, k)) & (row > -np.inf)
        np.testing.assert_array_equal(weights > 0, kept)
        np.testing.assert_allclose(weights.sum(), 1.0 if kept.any() else 0.0, rtol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_weights_on_the_simplex_over_the_entries_at_least_the_kth_largest(impl):
    @settings(max_examples=EXAMPLES[impl], deadline=None, derandomize=True)
    @given(masked_scores())
    def run(case):
        scores, k = case
        probs = F.topk_softmax(scores, k, impl=impl)
        check_weights(scores, k, probs)
        if impl == "compiled":
            eager = F.topk_softmax(scores, k, impl="torch")
            torch.testing.assert_close(probs, eager, atol=1e-6, rtol=1e-6)

    run()


@pytest.mark.parametrize("impl", IMPLS)
def test_non_finite_entries_make_their_rows_nan_and_no_other(impl):
    @settings(max_examples=EXAMPLES[impl], deadline=None, derandomize=True)
    @given(masked_scores(), st.data())
    def run(case, data):
        scores, k = case
        rows = scores.view(-1, scores.size(-1)).clone()
        bad = torch.tensor(data.draw(st.lists(st.booleans(), min_size=rows.size(0),
                                              max_size=rows.size(0))))
        column = data.draw(st.integers(0, rows.size(-1) - 1))
        rows[bad, column] = data.draw(st.sampled_from([NAN, POS_INF]))
        probs = F.topk_softmax(rows, k, impl=impl)
        assert probs[bad].isnan().all() and not probs[~bad].isnan().any()
        if (~bad).any():
            assert torch.equal(probs[~bad], F.topk_softmax(rows[~bad], k, impl=impl))

    run()


@pytest.mark.parametrize("impl", IMPLS)
def test_float64_gradcheck_and_gradgradcheck_away_from_ties(impl):
    @settings(max_examples=EXAMPLES[impl] // 4, deadline=None, derandomize=True)
    @given(st.integers(0, 2 ** 16), st.integers(1, 6))
    def run(seed, k):
        scores = separated_scores(seed)
        fn = lambda s: F.topk_softmax(s, k, impl=impl)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (scores,))
        assert torch.autograd.gradgradcheck(fn, (scores,))

    run()
