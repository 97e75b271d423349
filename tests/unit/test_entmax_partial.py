"""The partial sort of long rows (entmax_partial): the weights of the whole row whatever
the first k (below the support too), at alpha 2, 1.5, 1.3 and 3, over shapes, dtypes,
ties, masks and offsets; closed-form gradients in float64; ``k`` in the functional API and
entmax_compat; and the losses computed from the supports equal to the dense ones."""

import math

import entmax
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_attn_plugin import entmax_compat
from sparse_attn_plugin import functional as F
from sparse_attn_plugin import losses as L
from sparse_attn_plugin.normalizers.entmax_general import entmax_general
from sparse_attn_plugin.normalizers.entmax_partial import (
    GROUP,
    largest,
    partial_sort_entmax,
    partial_sort_solve,
    top_supports,
)

ALPHAS = (2.0, 1.5, 1.3, 3.0)
ATOL = {torch.float64: 1e-12, torch.float32: 1e-6}
SETTINGS = settings(derandomize=True, database=None, deadline=None, max_examples=60)
NEG_INF = float("-inf")


def dense(scores: torch.Tensor, alpha: float) -> torch.Tensor:
    """The weights by the full solvers over whole rows: the Newton solver or the sort in
    (1, 2] (short rows never take the partial sort), the bracketed solver above 2 (where
    the eager rule itself takes the partial sort, so it would be no reference)."""
    if alpha > 2:
        return entmax_general(scores, alpha)[0]
    return F.entmax_alpha(scores, alpha, impl="torch")


@st.composite
def rows(draw, widest: int = 300):
    """``(N, V)`` scores: 1 to ``widest`` entries, float32 or float64, spread or tied,
    offset, with ``-inf`` on some entries (never a whole row)."""
    n, v = draw(st.integers(1, 5)), draw(st.integers(1, widest))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 31)))
    scale = draw(st.sampled_from([0.01, 1.0, 4.0]))
    if draw(st.booleans()):
        scores = torch.randint(-3, 3, (n, v), generator=gen).double() * scale
    else:
        scores = torch.randn(n, v, generator=gen, dtype=torch.float64) * scale
    scores = scores + draw(st.sampled_from([0.0, 1e3, -1e5]))
    hidden = torch.rand(n, v, generator=gen) < draw(st.sampled_from([0.0, 0.5]))
    hidden[:, 0] = False
    return scores.masked_fill(hidden, NEG_INF).to(draw(st.sampled_from([torch.float32,
                                                                         torch.float64])))


@pytest.mark.parametrize("alpha", ALPHAS)
@SETTINGS
@given(rows(), st.integers(1, 20))
def test_the_partial_sort_gives_the_whole_rows_weights(alpha, scores, k):
    expected = dense(scores.double(), alpha)
    weights = partial_sort_solve(scores, alpha, k)
    assert weights.dtype == scores.dtype
    torch.testing.assert_close(weights.double(), expected, rtol=0, atol=ATOL[scores.dtype])
    assert (weights[torch.isneginf(scores)] == 0).all()


@SETTINGS
@given(rows(widest=3000), st.integers(1, 40))
def test_the_largest_entries_by_groups_are_topks(scores, k):
    """Rows long enough for groups (most drawn with k small) and not: topk's values, each
    with a column of its own that holds it (ties: any of the tied columns)."""
    k = min(k, scores.size(-1))
    values, columns = largest(scores, k)
    assert torch.equal(values, scores.topk(k, -1).values)
    assert torch.equal(scores.gather(-1, columns), values)
    assert (columns.sort(-1).values.diff(dim=-1) > 0).all()


def test_the_groups_hold_the_largest_entries_when_one_group_holds_them_all():
    """The k largest in one group (columns j, j + n, ...) and in the last columns, which
    join every row's candidates: the groups' argument holds at its edges."""
    width = 100 * GROUP + 7
    scores = torch.zeros(2, width)
    scores[0, 3:100 * GROUP:100] = torch.arange(1.0, GROUP + 1)      # one group
    scores[1, -7:] = torch.arange(1.0, 8)
    for k in (1, 5):
        values, columns = largest(scores, k)
        assert torch.equal(values, scores.topk(k, -1).values)
        assert torch.equal(scores.gather(-1, columns), values)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_a_k_below_the_support_takes_the_entries_above_a_bound_once(alpha):
    """Dense rows (every entry in the support) from k = 2: the rows whose support reaches
    their k largest are solved once more, over their entries above the threshold of those
    (each entry a row of one); a row whose support is one entry stops at the first try."""
    scores = torch.linspace(0, 0.01, 50, dtype=torch.float64).repeat(3, 1)
    scores[2] = torch.arange(50.0) * 10
    supports = top_supports(scores, alpha, 2)
    assert [s.index.size(-1) for s in supports] == [2, 1]
    assert supports[0].rows.tolist() == [2]
    assert supports[1].rows.tolist() == [0] * 50 + [1] * 50
    for k in (1, 2):
        torch.testing.assert_close(partial_sort_solve(scores, alpha, k), dense(scores, alpha),
                                   rtol=0, atol=1e-12)


@pytest.mark.parametrize("alpha", (1.3, 3.0))
def test_gradcheck_through_the_partial_sort(alpha):
    scores = torch.randn(3, 40, dtype=torch.float64)
    scores[1, :5] = NEG_INF
    scores.requires_grad_()
    fn = lambda s: partial_sort_entmax(s, alpha, k=2)    # noqa: E731
    assert torch.autograd.gradcheck(fn, (scores,))
    assert torch.autograd.gradgradcheck(fn, (scores,))


def test_special_rows_follow_the_contract():
    scores = torch.randn(4, 30, dtype=torch.float64)
    clean = partial_sort_entmax(scores, 1.3, k=2)
    scores[1] = NEG_INF
    scores[2, 3] = math.nan
    scores[3, 0] = math.inf
    weights = partial_sort_entmax(scores, 1.3, k=2)
    assert (weights[1] == 0).all() and weights[2:].isnan().all()
    assert torch.equal(weights[0], clean[0])


@pytest.mark.parametrize("k", [1, 3, 1000])
def test_k_in_the_functional_api_and_entmax_compat_is_a_first_guess(k):
    """Exact whatever k, below the support too, against the entmax package's full sort."""
    scores = torch.randn(6, 200, dtype=torch.float64) / 10     # supports of tens
    assert ((entmax.sparsemax(scores, -1) > 0).sum(-1) > 3).all()
    for ours, theirs in ((F.sparsemax, entmax.sparsemax), (F.entmax15, entmax.entmax15),
                         (entmax_compat.sparsemax, entmax.sparsemax),
                         (entmax_compat.entmax15, entmax.entmax15)):
        torch.testing.assert_close(ours(scores, -1, k=k), theirs(scores, -1), rtol=0,
                                   atol=1e-12)
    torch.testing.assert_close(F.entmax_alpha(scores, 1.3, k=k), dense(scores, 1.3), rtol=0,
                               atol=1e-12)
    torch.testing.assert_close(F.sparsemax(scores.T, 0, k=k), entmax.sparsemax(scores.T, 0),
                               rtol=0, atol=1e-12)


def test_k_needs_an_integer_and_one_alpha_above_one():
    scores = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"^sparsemax needs an integer k >= 1, got k=0$"):
        F.sparsemax(scores, k=0)
    with pytest.raises(ValueError, match="needs one alpha above 1"):
        F.entmax_alpha(scores, torch.tensor([[1.5], [1.2]]), k=3)
    with pytest.raises(ValueError, match="needs one alpha above 1"):
        F.entmax_alpha(scores, 0.5, k=3)
    with pytest.raises(ValueError, match="k >= 1"):
        entmax_compat.Entmax15Loss(k=0)
    target = torch.tensor([1, 2])
    for alpha in (torch.tensor([[1.5], [1.2]]), 1.0, 0.5):    # k is never silently dropped
        with pytest.raises(ValueError, match=r"^entmax_bisect_loss: k .* needs one alpha above 1$"):
            L.entmax_bisect_loss(scores, target, alpha, k=3)


LOSSES = {2.0: lambda x, y, **kw: L.sparsemax_loss(x, y, **kw),
          1.5: lambda x, y, **kw: L.entmax15_loss(x, y, **kw),
          1.3: lambda x, y, **kw: L.entmax_bisect_loss(x, y, 1.3, **kw),
          3.0: lambda x, y, **kw: L.entmax_bisect_loss(x, y, 3.0, **kw)}


def reference_loss(scores, target, alpha):
    """The loss ``(1 - sum p^alpha) / (alpha (alpha - 1)) + <p - e_y, z>`` and the gradient
    :func:`loss_and_grad` takes, ``(p - e_y)`` times each row's weight, from the full
    solvers' weights (:func:`dense`) in float64; 0 on ignored rows."""
    z = scores.double()
    p = dense(z, alpha)
    counted = target != -100
    residual = p - torch.nn.functional.one_hot(target.clamp_min(0), z.size(-1)).double()
    shifted = z - z.amax(-1, keepdim=True)
    inner = torch.where(residual == 0, 0.0, residual * shifted).sum(-1)
    value = torch.where(counted, (1 - (p ** alpha).sum(-1)) / (alpha * (alpha - 1)) + inner,
                        0.0)
    row_weights = torch.linspace(0.5, 2, value.numel()).double().unsqueeze(-1)
    return value, torch.where(counted.unsqueeze(-1), residual * row_weights, 0.0)


def loss_and_grad(loss, scores, target, **kwargs):
    leaf = scores.detach().requires_grad_()
    value = loss(leaf, target, **kwargs)
    (value * torch.linspace(0.5, 2, value.numel()).view_as(value).to(value.dtype)
     ).sum().backward()
    return value, leaf.grad


@pytest.mark.parametrize("alpha", LOSSES)
@SETTINGS
@given(rows(), st.integers(1, 20), st.data())
def test_a_loss_from_the_supports_equals_the_dense_loss(alpha, scores, k, data):
    """Values and gradients, ignored rows included, from the supports whether k starts
    below the support or not, and by the dense path (no k, rows this short), against the
    loss of the full solvers' weights in float64."""
    target = torch.tensor(data.draw(st.lists(st.integers(0, scores.size(1) - 1),
                                             min_size=scores.size(0), max_size=scores.size(0))))
    target[0] = -100 if data.draw(st.booleans()) else target[0]
    # a masked target would make the loss infinite: class 0 (never masked) instead
    target = torch.where(torch.isneginf(scores.gather(1, target.clamp_min(0)[:, None]))[:, 0],
                         0, target)
    expected, expected_grad = reference_loss(scores, target, alpha)
    atol = 1e-10 if scores.dtype == torch.float64 else 1e-4
    for kwargs in ({"k": k}, {}):            # from the supports, and the dense path
        value, grad = loss_and_grad(LOSSES[alpha], scores, target, **kwargs)
        torch.testing.assert_close(value.double(), expected, rtol=1e-12, atol=atol)
        torch.testing.assert_close(grad.double(), expected_grad, rtol=0,
                                   atol=ATOL[scores.dtype])


@pytest.mark.parametrize("alpha", LOSSES)
def test_long_rows_take_the_support_path_by_default_and_special_rows_the_dense(alpha,
                                                                               monkeypatch):
    from sparse_attn_plugin import losses

    calls = []
    real = losses._SupportFenchelYoung.apply
    monkeypatch.setattr(losses._SupportFenchelYoung, "apply",
                        lambda *a: calls.append(1) or real(*a))
    scores = torch.randn(128, 8192) * 3
    target = torch.randint(0, 8192, (128,))
    value = LOSSES[alpha](scores, target, reduction="sum")
    assert calls == [1] and torch.isfinite(value)
    scores[5, 7] = math.nan
    assert LOSSES[alpha](scores, target).isnan().tolist() == [i == 5 for i in range(128)]
    assert calls == [1]                              # the NaN row sent them dense


def test_half_precision_scores_get_a_float32_loss_and_their_own_gradient_dtype():
    scores = torch.randn(4, 50).half()
    value, grad = loss_and_grad(LOSSES[1.5], scores, torch.tensor([1, 2, 3, 4]), k=2)
    expected, expected_grad = loss_and_grad(LOSSES[1.5], scores.float(),
                                            torch.tensor([1, 2, 3, 4]))
    assert value.dtype == torch.float32 and grad.dtype == torch.float16
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(grad.float(), expected_grad, atol=1e-3, rtol=0)


def test_a_loss_over_long_rows_sorts_no_row_and_makes_its_dense_gradient_once():
    """What runs (not a time): the default loss over a vocabulary reads each row whole only
    for its groups' maxima (its topk and sort take a few hundred candidates), its forward
    fills no row-sized buffer, and its backward one."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops, self.big, self.ranked = Counter(), 0, []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.ops[str(func.overloadpacket)] += 1
            if str(func.overloadpacket) in ("aten.topk", "aten.sort"):
                self.ranked.append(args[0].size(-1))
            if isinstance(out, torch.Tensor) and out.numel() >= scores.numel() and \
                    out.data_ptr() != scores.data_ptr():      # a new buffer, not a view
                self.big += 1
            return out

    scores = torch.randn(64, 8192) * 3
    leaf = scores.requires_grad_()
    with Count() as forward:
        loss = L.entmax15_loss(leaf, torch.randint(0, 8192, (64,)), reduction="sum")
    with Count() as backward:
        loss.backward()
    assert forward.ops["aten.topk"] == 2 and forward.ops["aten.sort"] == 1
    assert max(forward.ranked) <= 8192 // 4 and not backward.ranked
    assert forward.big == 0 and backward.big >= 1
    assert backward.ops["aten.new_full"] == 1 and backward.ops["aten.sort"] == 0
