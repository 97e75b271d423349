"""The lean path of a decoding step (issue 52): each normaliser's ``step_weights`` and
``attend(..., rows_nonempty=True)`` give the general path's numbers, bit for bit, on rows
with an unmasked key (NaN and ``+inf`` rows included), in fairseq's ``(B*H, T, S)`` layout
as in ``(B, H, T, S)``; and what a step dispatches is held."""

import math

import pytest
import torch

from sparse_attn_plugin.normalizers import (
    Entmax15,
    EntmaxAlpha,
    HardRetrieval,
    Softmax,
    Sparsemax,
    TopK,
)
from sparse_attn_plugin.normalizers.entmax_sort import sparsemax_sort
from sparse_attn_plugin.normalizers.hard import gather_values
from sparse_attn_plugin.normalizers.sorted_threshold import threshold_of_sorted

from helpers.dispatch import Ops

HEADS = 4


def step_scores(dtype=torch.float32, seed=0, rows=HEADS * 6, src_len=11):
    """Decoding-step scores ``(B*H, 1, S)`` with masked keys but no empty row, a NaN row
    and a ``+inf`` row."""
    g = torch.Generator().manual_seed(seed)
    scores = (3 * torch.randn(rows, 1, src_len, generator=g)).to(dtype)
    scores[:, :, -3:] = -math.inf        # padding
    scores[2, 0, 4] = math.nan
    scores[5, 0, 1] = math.inf
    return scores


NORMALISERS = [Softmax, Sparsemax, Entmax15, lambda: TopK(k=3),
               lambda: TopK(k=3, train_only=True), lambda: EntmaxAlpha(HEADS, "random")]


@pytest.mark.parametrize("make", NORMALISERS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_step_weights_equal_the_general_path_bit_for_bit(make, dtype):
    normalizer = make().eval()
    scores = step_scores(dtype)
    general = normalizer(scores)
    step = normalizer.step_weights(scores)
    assert step.dtype == general.dtype == torch.promote_types(dtype, torch.float32)
    torch.testing.assert_close(step, general, rtol=0, atol=0, equal_nan=True)
    assert step[2].isnan().all() and step[5].isnan().all()


@pytest.mark.parametrize("make", NORMALISERS)
def test_fairseq_layout_gives_the_head_layout_numbers(make):
    normalizer = make().eval()
    scores = step_scores(torch.float64)
    values = torch.randn(scores.size(0), scores.size(-1), 5, dtype=torch.float64)
    flat, flat_weights = normalizer.attend(scores, values, rows_nonempty=True)
    by_head, head_weights = normalizer.attend(scores.view(-1, HEADS, 1, scores.size(-1)),
                                              values.view(-1, HEADS, *values.shape[1:]))
    torch.testing.assert_close(flat.view_as(by_head), by_head, rtol=0, atol=0,
                               equal_nan=True)
    torch.testing.assert_close(flat_weights.view_as(head_weights), head_weights, rtol=0,
                               atol=0, equal_nan=True)


def test_sparsemax_tau_as_the_largest_partial_threshold_is_the_supports():
    """``max_k (c_k - 1) / k`` is the threshold at the support (checked against the
    support-finding sort over shapes and long rows: the same number; with ties, where
    ``x_(k+1) = tau_k`` makes two partial thresholds equal but for rounding, within it)."""
    g = torch.Generator().manual_seed(3)
    for src_len in (1, 2, 7, 40, 300):
        for decimals, tolerance in ((None, 0.0), (1, 1e-15)):
            x = torch.randn(64, src_len, generator=g, dtype=torch.float64)
            x = x if decimals is None else x.round(decimals=decimals)
            x = x - x.amax(-1, keepdim=True)
            expected, _ = threshold_of_sorted(x.sort(-1, descending=True).values, 2.0)
            torch.testing.assert_close(sparsemax_sort(x), (x - expected).clamp_min(0),
                                       rtol=0, atol=tolerance)


def test_hard_retrieval_step_gathers_what_the_general_path_gathers():
    hard = HardRetrieval().eval()
    scores = step_scores(torch.float32)
    values = torch.randn(scores.size(0), scores.size(-1), 5)
    lean, lean_weights = hard.attend(scores, values, rows_nonempty=True)
    general, weights = hard.attend(scores, values)
    torch.testing.assert_close(lean, general, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(lean_weights, weights, rtol=0, atol=0, equal_nan=True)


def test_gather_values_shares_a_sources_values_without_copying_them():
    values = torch.randn(2, HEADS, 7, 5)               # (B_kv, H, S, d)
    index = torch.randint(0, 7, (6, HEADS, 3))         # B = 3 hypotheses per source
    out = gather_values(values, index)
    expected = torch.stack([torch.stack([values[b // 3, h, index[b, h]] for h in range(HEADS)])
                            for b in range(6)])
    assert torch.equal(out, expected)


@pytest.mark.parametrize("make, most", [
    (Softmax, 3),                       # softmax, type_as, matmul: fairseq's three
    (HardRetrieval, 7),                 # max, unsqueeze, expand, gather; NaN rows: 3
    (lambda: TopK(k=3), 7),             # topk, amin, lt, masked_fill, softmax, ...
    (Sparsemax, 12),                    # the sort and tau = max_k (c_k - 1) / k
])
def test_what_an_attention_call_of_a_step_dispatches(make, most):
    normalizer = make().eval()
    scores = torch.randn(HEADS * 8, 1, 20)
    values = torch.randn(HEADS * 8, 20, 16)
    with torch.inference_mode(), Ops() as ops:
        normalizer.attend(scores, values, need_weights=False, rows_nonempty=True)
    assert len(ops.names) <= most, ops.names
    # no empty-row check, and nothing that reads a result back (a GPU would wait for it)
    assert not {"aten.any", "aten.is_nonzero", "aten.isneginf"} & set(ops.names), ops.names


@pytest.mark.parametrize("rows_nonempty", [True, False])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_hard_retrieval_gives_nan_not_a_value_for_a_nan_or_inf_row(rows_nonempty, dtype):
    """A NaN or ``+inf`` score makes its row's output and weights NaN, as softmax's; the
    other rows keep the values they retrieve, in the values' dtype."""
    hard = HardRetrieval().eval()
    scores = step_scores(dtype)                        # row 2 has a NaN, row 5 a +inf
    values = torch.randn(scores.size(0), scores.size(-1), 5).to(dtype)
    out, weights = hard.attend(scores, values, rows_nonempty=rows_nonempty)
    assert out.dtype == dtype and weights.dtype == torch.float32
    for row in (2, 5):
        assert out[row].isnan().all() and weights[row].isnan().all()
    finite = [r for r in range(scores.size(0)) if r not in (2, 5)]
    expected = values[finite].gather(1, scores[finite].argmax(-1, keepdim=True)
                                     .expand(-1, -1, 5))
    assert torch.equal(out[finite], expected)
    assert torch.equal(weights[finite].sum(-1), torch.ones(len(finite), 1))
