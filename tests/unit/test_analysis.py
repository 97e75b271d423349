"""Attention statistics: counts checked against what the masks force, entropy and head
diversity against their definitions and scipy."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import jensenshannon

from sparse_attn_plugin.analysis import attention_statistics, learned_alphas
from sparse_attn_plugin.analysis.attention_stats import HeadStats, head_statistics, jensen_shannon

from helpers.models import attn_flags, batch, build, peaked


def test_top1_attention_keeps_exactly_one_key_per_real_query(synthetic_bin):
    task, model = build(synthetic_bin, extra=["--attn-fn", "topk", "--topk", "1"])
    sample = batch(task, size=8)
    stats = attention_statistics(model, [sample])
    src = sample["net_input"]["src_tokens"].ne(task.source_dictionary.pad())
    tgt = sample["net_input"]["prev_output_tokens"].ne(task.target_dictionary.pad())
    heads, layers = 4, 2
    src_len, tgt_len = src.sum(1), tgt.sum(1)
    # allowed keys per real query row, summed: enc-self |src|^2, dec-self causal, cross |tgt||src|
    allowed = {
        "encoder_self": int((src_len ** 2).sum()),
        "decoder_self": int((tgt_len * (tgt_len + 1) // 2).sum()),
        "decoder_cross": int((tgt_len * src_len).sum()),
    }
    rows = {"encoder_self": int(src_len.sum()), "decoder_self": int(tgt_len.sum()),
            "decoder_cross": int(tgt_len.sum())}
    for site in allowed:
        assert stats[site].allowed == heads * layers * allowed[site], site
        assert stats[site].zeros == heads * layers * (allowed[site] - rows[site]), site


def test_softmax_has_no_zeros_and_alphas_are_reported(synthetic_bin):
    task, model = build(synthetic_bin, extra=["--attn-fn", "softmax",
                                              "--decoder-cross-attn-fn", "entmax_alpha",
                                              "--entmax-alpha-init", "1.7"])
    stats = attention_statistics(model, [batch(task)])
    assert stats["encoder_self"].zeros == 0 and stats["encoder_self"].zero_fraction == 0
    alphas = learned_alphas(model)
    assert list(alphas) == ["decoder_cross"] and len(alphas["decoder_cross"]) == 2 * 4
    assert torch.allclose(torch.tensor(alphas["decoder_cross"]), torch.tensor(1.7))
    assert stats["decoder_cross"].alphas == alphas["decoder_cross"]


# -- per-head statistics on hand-built attention ---------------------------------------------
def hand_built():
    """Two heads, two queries, three keys (all allowed, all real)."""
    weights = torch.tensor([[[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]],
                             [[1 / 3, 1 / 3, 1 / 3], [0.0, 1.0, 0.0]]]])      # (1, 2, 2, 3)
    return weights, torch.ones_like(weights, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool)


def test_head_stats_count_zeros_entropy_and_diversity_as_defined():
    weights, allowed, real = hand_built()
    stats = HeadStats.empty(2)
    stats.add(weights, allowed, real)
    assert stats.zeros.tolist() == [3, 2] and stats.allowed.tolist() == [6, 6]
    assert stats.zero_fraction.tolist() == pytest.approx([0.5, 1 / 3])
    assert stats.mean_entropy.tolist() == pytest.approx([math.log(2) / 2, math.log(3) / 2])
    # two heads: the generalised JS divergence is the usual one; scipy gives its square root
    expected = [jensenshannon(weights[0, 0, t], weights[0, 1, t]) ** 2 for t in range(2)]
    assert stats.head_diversity == pytest.approx(sum(expected) / 2)


def test_masked_keys_and_padding_queries_are_not_counted():
    weights, allowed, real = hand_built()
    allowed[..., 2] = False                     # key 2 masked (padding) everywhere
    real[0, 1] = False                          # query 1 is padding
    stats = HeadStats.empty(2)
    stats.add(weights, allowed, real)
    assert stats.allowed.tolist() == [2, 2] and stats.zeros.tolist() == [1, 0]
    assert stats.queries == 1 and stats.mean_entropy[0] == 0


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 2 ** 16))
def test_diversity_is_zero_for_identical_heads_and_at_most_log_heads(heads, keys, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(1, heads, 3, keys, generator=g, dtype=torch.float64), -1)
    js = jensen_shannon(p, 1)
    assert (js >= -1e-12).all() and (js <= math.log(heads) + 1e-12).all()
    same = p[:, :1].expand_as(p)
    assert jensen_shannon(same, 1).abs().max() < 1e-12
    one_hot = torch.eye(keys, dtype=torch.float64)[:heads] if heads <= keys else None
    if one_hot is not None:                     # disjoint one-hot heads: exactly log H
        assert float(jensen_shannon(one_hot, 0)) == pytest.approx(math.log(heads))


def test_head_statistics_per_layer_and_site_of_a_model(synthetic_bin):
    task, model = build(synthetic_bin, extra=["--attn-fn", "sparsemax",
                                              "--decoder-cross-attn-fn", "entmax_alpha"])
    stats = head_statistics(model, [batch(task)])
    assert list(stats) == [(site, layer) for site in ("encoder_self", "decoder_self",
                                                      "decoder_cross") for layer in (0, 1)]
    assert all(s.zeros.numel() == 4 for s in stats.values())
    assert stats["decoder_cross", 1].alphas == pytest.approx([1.5] * 4)
    assert stats["encoder_self", 0].alphas is None
    pooled = attention_statistics(model, [batch(task)])
    assert pooled["encoder_self"].zeros == sum(int(stats["encoder_self", i].zeros.sum())
                                               for i in (0, 1))


# -- one call per decoder step: the LSTM's attention, constrained cross-attention -------------
LSTM = ["--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--dropout", "0",
        "--task", "sparse_translation"]


@pytest.mark.parametrize("attention", [
    ["--attn-fn", "softmax"],
    ["--attn-fn", "sparsemax"],
    ["--attn-fn", "csparsemax", "--sink-token", "--exhaustion-c", "0.2"],
], ids=lambda flags: flags[1])
def test_lstm_attention_is_cross_attention_counted_at_real_steps_and_keys(synthetic_bin,
                                                                           attention):
    task, model = build(synthetic_bin, "sparse_lstm", [*LSTM, *attention])
    sample = batch(task, size=8)
    stats = head_statistics(peaked(model), [sample])
    # The decoder run by hand: its weights over the model's source columns, step by step.
    inp = sample["net_input"]
    with torch.no_grad():
        encoder_out = model.encoder(inp["src_tokens"], inp["src_lengths"])
        weights = model.decoder(inp["prev_output_tokens"], encoder_out)[1]["model_attn"][0]
    keys = ~encoder_out["padding_mask"][0]                          # (B, S'), the sink a key
    steps = inp["prev_output_tokens"].ne(task.target_dictionary.pad())           # (B, T)
    assert not keys.all() and not steps.all()                       # both sides are padded

    def zeros(real_steps, real_keys):
        return int(((weights == 0) & real_steps[:, :, None] & real_keys[:, None, :]).sum())

    allowed = int((steps[:, :, None] & keys[:, None, :]).sum())
    assert list(stats) == [("decoder_cross", 0)]
    cross = stats["decoder_cross", 0]
    assert cross.zeros.tolist() == [zeros(steps, keys)] and cross.allowed.tolist() == [allowed]
    assert cross.queries == int(steps.sum())
    entropy = torch.special.entr(weights.double()).sum(-1)[steps].mean()
    assert cross.mean_entropy.tolist() == pytest.approx([float(entropy)], rel=1e-6)
    share = attention_statistics(model, [sample])["decoder_cross"].zero_fraction
    assert share == zeros(steps, keys) / allowed
    if attention[1] == "softmax":
        assert share == 0
    else:  # sparse, and counting padding steps or padding keys would change the share
        assert share > 0
        assert zeros(torch.ones_like(steps), keys) != zeros(steps, keys)
        assert zeros(steps, torch.ones_like(keys)) != zeros(steps, keys)


def test_constrained_transformer_cross_attention_counts_each_decoder_step_once(synthetic_bin):
    task, model = build(synthetic_bin, extra=["--task", "sparse_translation",
                                              *attn_flags("csparsemax")])
    sample = batch(task, size=8)
    stats = head_statistics(peaked(model), [sample])
    src_len = sample["net_input"]["src_tokens"].ne(task.source_dictionary.pad()).sum(1)
    tgt_len = sample["net_input"]["prev_output_tokens"].ne(task.target_dictionary.pad()).sum(1)
    for layer in (0, 1):
        cross = stats["decoder_cross", layer]
        assert cross.queries == int(tgt_len.sum())
        assert cross.allowed.tolist() == [int((tgt_len * (src_len + 1)).sum())] * 4  # + sink
