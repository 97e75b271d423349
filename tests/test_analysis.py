"""Attention statistics: counts checked against what the masks force."""

import torch

from sparse_attn_plugin.analysis import attention_statistics, learned_alphas

from models import batch, build


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
