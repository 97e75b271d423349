"""Hard retrieval attention: straight-through gradients against the explicit
formulas and a dense one-hot implementation (float64), sampling frequencies against
the softmax, argmax retrieval against the one-hot product, and masks."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from sparse_attn_plugin.normalizers import HardRetrieval, Normalizer
from sparse_attn_plugin.normalizers.hard import RetrieveRows, one_hot, sample_keys

from helpers.scores import NEG_INF, random_scores


def dense_attend(normalizer: HardRetrieval, scores, values):
    """The dense reference: the one-hot weights of ``normalizer(scores)`` times V, as
    the base class computes any normaliser's attention."""
    return Normalizer.attend(normalizer, scores, values)


def identity_values(shape):
    """Values whose row ``j`` is the unit vector ``e_j``: the output names the key."""
    batch, heads, _, src_len = shape
    return torch.eye(src_len, dtype=torch.float64).expand(batch, heads, src_len, src_len)


# --- gradients ---------------------------------------------------------------------

def test_retrieval_gradients_equal_the_explicit_formulas():
    torch.manual_seed(0)
    batch, heads, tgt_len, src_len, dim = 2, 3, 5, 7, 4
    scores = random_scores((batch, heads, tgt_len, src_len), seed=1)
    probs = torch.softmax(scores, -1).requires_grad_()
    values = torch.randn(batch, heads, src_len, dim, dtype=torch.float64, requires_grad=True)
    index = sample_keys(probs.detach())
    grad_out = torch.randn(batch, heads, tgt_len, dim, dtype=torch.float64)

    out = RetrieveRows.apply(probs, values, index)
    out.backward(grad_out)

    v, g, idx = values.detach().numpy(), grad_out.numpy(), index.numpy()
    expected_out = np.zeros_like(g)
    expected_dvalues = np.zeros_like(v)  # dV[k] = sum of dOut[j] over queries j picking k
    for b, h, t in np.ndindex(batch, heads, tgt_len):
        expected_out[b, h, t] = v[b, h, idx[b, h, t]]
        expected_dvalues[b, h, idx[b, h, t]] += g[b, h, t]
    expected_dprobs = np.einsum("bhtd,bhsd->bhts", g, v)  # dP = dOut . V^T
    np.testing.assert_allclose(out.detach(), expected_out, atol=1e-12)
    np.testing.assert_allclose(probs.grad, expected_dprobs, atol=1e-12)
    np.testing.assert_allclose(values.grad, expected_dvalues, atol=1e-12)


def test_retrieval_gradcheck_with_respect_to_values():
    """The forward pass is linear in the values, so there the gradient is exact."""
    probs = torch.softmax(random_scores((2, 2, 4, 5), seed=2), -1)
    values = torch.randn(2, 2, 5, 3, dtype=torch.float64, requires_grad=True)
    index = sample_keys(probs)
    assert torch.autograd.gradcheck(lambda v: RetrieveRows.apply(probs, v, index), (values,))


@pytest.mark.parametrize("masked_fraction", [0.0, 0.4])
def test_training_attention_equals_dense_one_hot_with_straight_through(masked_fraction):
    """attend() (gather, index-add backward) against one-hot weights times V, whose
    autograd gives the same straight-through gradients, with the same sampled keys."""
    scores = random_scores((2, 3, 4, 6), masked_fraction, seed=3).requires_grad_()
    values = torch.randn(2, 3, 6, 5, dtype=torch.float64, requires_grad=True)
    norm = HardRetrieval().train()
    grad_out = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    results = []
    for attend in (norm.attend, lambda s, v: dense_attend(norm, s, v)):
        torch.manual_seed(7)  # the same uniform draws, so the same keys
        out, weights = attend(scores, values)
        out.backward(grad_out)
        results.append((out.detach(), weights.detach(), scores.grad.clone(), values.grad.clone()))
        scores.grad, values.grad = None, None
    for fast, dense in zip(*results):
        torch.testing.assert_close(fast, dense, atol=1e-12, rtol=1e-12)
    assert (results[0][2] != 0).any() and (results[0][3] != 0).any()


# --- sampling ----------------------------------------------------------------------

def test_sampled_keys_follow_the_softmax():
    """Chi-square goodness of fit of 60,000 draws per row; masked keys never drawn."""
    torch.manual_seed(0)
    scores = torch.tensor([[0.5, NEG_INF, 2.0, -1.0, 1.0, NEG_INF, 0.0]], dtype=torch.float64)
    probs = torch.softmax(scores, -1)
    draws = 60_000
    values = identity_values((1, 1, draws, 7))
    out, _ = HardRetrieval().train().attend(scores.expand(1, 1, draws, 7), values)
    counts = out.sum(dim=(0, 1, 2)).numpy()
    allowed = probs[0].numpy() > 0
    assert (counts[~allowed] == 0).all()
    chi2, p_value = stats.chisquare(counts[allowed], draws * probs[0].numpy()[allowed])
    assert p_value > 1e-3, (counts, chi2)


def test_sampler_never_draws_zero_weight_keys_at_the_edges():
    """Leading and trailing zero-weight keys (left-padded sources, future positions)."""
    torch.manual_seed(1)
    weights = torch.tensor([0.0, 0.0, 0.3, 0.0, 0.7, 0.0, 0.0]).expand(100_000, 7)
    assert set(sample_keys(weights).unique().tolist()) == {2, 4}


@pytest.mark.parametrize("uniform", [0.0, 1.0 - 2.0**-24])
def test_sampler_extreme_uniform_draws_pick_weighted_keys(monkeypatch, uniform):
    """The two ends of torch.rand's range [0, 1) must still land on a key of
    positive weight."""
    monkeypatch.setattr(torch, "rand_like", lambda t: torch.full_like(t, uniform))
    weights = torch.tensor([[0.0, 0.25, 0.0, 0.75, 0.0]])
    assert sample_keys(weights).item() in {1, 3}


def test_a_row_emptied_by_dropout_is_sampled_uniformly_over_unmasked_keys():
    torch.manual_seed(2)
    row = torch.tensor([1.0, NEG_INF, 0.0, 3.0], dtype=torch.float64)
    scores = row.expand(1, 1, 40_000, 4)
    out, _ = HardRetrieval().train().attend(scores, identity_values(scores.shape),
                                            dropout=torch.zeros_like)
    counts = out.sum(dim=(0, 1, 2)).numpy()
    assert counts[1] == 0
    assert stats.chisquare(counts[[0, 2, 3]]).pvalue > 1e-3, counts


# --- inference ---------------------------------------------------------------------

def test_argmax_retrieval_equals_the_one_hot_product():
    scores = random_scores((3, 2, 5, 8), 0.3, seed=4)
    values = torch.randn(3, 2, 8, 4, dtype=torch.float64)
    norm = HardRetrieval().eval()
    out, weights = norm.attend(scores, values)
    expected = one_hot(scores.argmax(-1), 8, torch.float64)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ values)
    torch.testing.assert_close(out, dense_attend(norm, scores, values)[0])


LAYOUTS = {
    "contiguous": lambda v: v.contiguous(),
    "fairseq (S, B*H, d) transposed": lambda v: v.permute(2, 0, 1, 3).reshape(
        v.size(2), -1, v.size(3)).transpose(0, 1).view(v.shape),
    "rows padded to 5 numbers": lambda v: torch.cat([v, v[..., :1]], -1)[..., :-1],
    "features strided": lambda v: v.transpose(-1, -2).contiguous().transpose(-1, -2),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("training", [True, False])
def test_retrieval_reads_any_memory_layout_of_the_values(layout, training):
    """Values are read from their own storage (no copy) where rows are runs of d
    numbers; any other layout is copied; the result and gradients never change."""
    scores = random_scores((2, 3, 4, 6), 0.3, seed=10)
    base = torch.randn(2, 3, 6, 4, dtype=torch.float64)
    values = LAYOUTS[layout](base).requires_grad_()
    assert torch.equal(values, base)
    norm = HardRetrieval().train(training)
    torch.manual_seed(3)
    out, weights = norm.attend(scores, values)
    torch.testing.assert_close(out, weights @ base, atol=0, rtol=0)
    if training:
        grad_out = torch.randn_like(out)
        out.backward(grad_out)
        torch.testing.assert_close(values.grad, weights.transpose(-1, -2) @ grad_out)


def test_argmax_retrieval_with_values_shared_by_beam_hypotheses():
    scores = random_scores((6, 2, 3, 5), 0.2, seed=5)  # 2 sentences x 3 hypotheses
    values = torch.randn(2, 2, 5, 4, dtype=torch.float64)
    norm = HardRetrieval().eval()
    shared, _ = norm.attend(scores, values)
    repeated, _ = norm.attend(scores, values.repeat_interleave(3, dim=0))
    torch.testing.assert_close(shared, repeated)


def test_argmax_ignores_the_softmax_scale():
    """Inference picks argmax of the raw scores: scaling changes nothing."""
    scores = random_scores((2, 2, 4, 6), 0.3, seed=6)
    values = torch.randn(2, 2, 6, 3, dtype=torch.float64)
    norm = HardRetrieval().eval()
    torch.testing.assert_close(norm.attend(scores, values)[0], norm.attend(scores * 8, values)[0])


def test_half_precision_training_never_samples_a_masked_key_of_an_emptied_row():
    """The epsilon that rescues rows emptied by dropout must survive half precision."""
    torch.manual_seed(4)
    row = torch.tensor([NEG_INF, 1.0, 0.0, NEG_INF], dtype=torch.float16)
    scores = row.expand(1, 1, 2000, 4)
    values = identity_values(scores.shape).half()
    out, _ = HardRetrieval().train().attend(scores, values, dropout=torch.zeros_like)
    counts = out.float().sum(dim=(0, 1, 2))
    assert counts[0] == 0 and counts[3] == 0 and counts.sum() == 2000


def test_half_precision_attention_keeps_the_values_dtype():
    scores = random_scores((2, 2, 3, 5), 0.3, seed=7, dtype=torch.float32).half()
    values = torch.randn(2, 2, 5, 4).half()
    for mode in (True, False):
        out, weights = HardRetrieval().train(mode).attend(scores, values)
        assert out.dtype == torch.float16 and weights.dtype == torch.float32


# --- masks -------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(scores=hnp.arrays(np.float64, hnp.array_shapes(min_dims=4, max_dims=4, max_side=5),
                         elements=st.one_of(st.floats(-30, 30), st.just(-np.inf))),
       training=st.booleans(), dropout=st.booleans())
def test_masked_keys_are_never_selected(scores, training, dropout):
    torch.manual_seed(0)
    scores = torch.from_numpy(scores)
    drop = torch.nn.Dropout(0.5) if dropout else None
    out, weights = HardRetrieval().train(training).attend(
        scores, identity_values(scores.shape), dropout=drop)
    masked = torch.isneginf(scores)
    empty = masked.all(-1)
    assert (out[masked] == 0).all(), "a masked key was retrieved"
    assert (weights[masked] == 0).all()
    assert (out.sum(-1)[~empty] == 1).all() and (out[empty] == 0).all()


def test_fully_masked_rows_give_zero_output_and_gradient():
    scores = random_scores((2, 2, 3, 4), 0.3, seed=8)
    scores[1, 0, 2] = NEG_INF
    scores.requires_grad_()
    values = torch.randn(2, 2, 4, 3, dtype=torch.float64, requires_grad=True)
    out, _ = HardRetrieval().train().attend(scores, values)
    out.sum().backward()
    assert (out[1, 0, 2] == 0).all()
    assert torch.isfinite(scores.grad).all() and (scores.grad[1, 0, 2] == 0).all()


def test_observers_of_the_normaliser_see_the_one_hot_weights():
    """Analysis hooks the normaliser's forward; hard retrieval must still call it."""
    scores = random_scores((1, 2, 3, 4), 0.3, seed=9)
    seen = []
    norm = HardRetrieval().eval()
    norm.register_forward_hook(lambda mod, inp, out: seen.append(out))
    _, weights = norm.attend(scores, torch.randn(1, 2, 4, 2, dtype=torch.float64))
    torch.testing.assert_close(seen[0], weights)
