"""sparse_transformer in-process: every site really uses its normaliser, softmax
equals fairseq's transformer, incremental decoding equals the full pass, beam
search keeps its state consistent, and bad settings fail at start-up."""

from dataclasses import replace

import pytest
import torch
from fairseq import utils
from fairseq.sequence_generator import SequenceGenerator

from sparse_attn_plugin.errors import SettingsError
from sparse_attn_plugin.modules import SparseMultiheadAttention
from sparse_attn_plugin.normalizer_registry import SPECS
from sparse_attn_plugin.normalizers import NAMES, EntmaxAlpha, build_normalizer
from sparse_attn_plugin.sites import SITES

from helpers.models import attn_flags, batch, build, decode_incrementally

SITE_OF = {"encoder": {"self_attn": "encoder_self"},
           "decoder": {"self_attn": "decoder_self", "encoder_attn": "decoder_cross"}}


def attention_sites(model):
    """{(site, layer index): SparseMultiheadAttention} over the whole model."""
    found = {}
    for part, attrs in SITE_OF.items():
        for i, layer in enumerate(getattr(model, part).layers):
            for attr, site in attrs.items():
                found[site, i] = getattr(layer, attr)
    return found


def net_input(sample):
    return {k: sample["net_input"][k] for k in ("src_tokens", "src_lengths", "prev_output_tokens")}


@pytest.mark.parametrize("training", [True, False])
def test_every_site_runs_its_normaliser(synthetic_bin, training):
    """fairseq's fused fast path would skip the normaliser: count its calls."""
    task, model = build(synthetic_bin, extra=["--attn-fn", "sparsemax"])
    model.train(training)
    calls = {}
    for key, attn in attention_sites(model).items():
        assert type(attn.normalizer).__name__ == "Sparsemax"
        attn.normalizer.register_forward_hook(
            lambda mod, inp, out, key=key: calls.__setitem__(key, (out == 0).any().item()))
    model(**net_input(batch(task)))
    assert set(calls) == set(attention_sites(model)), "some site did not call its normaliser"
    assert all(calls.values()), "sparsemax gave no exact zero at some site"


def test_per_site_flags_override_attn_fn(synthetic_bin):
    _, model = build(synthetic_bin, extra=["--attn-fn", "topk", "--decoder-self-attn-fn",
                                           "entmax15", "--decoder-cross-attn-fn", "entmax_alpha"])
    kinds = {site: type(attn.normalizer).__name__
             for (site, _), attn in attention_sites(model).items()}
    assert kinds == {"encoder_self": "TopK", "decoder_self": "Entmax15",
                     "decoder_cross": "EntmaxAlpha"}


@pytest.mark.parametrize("training", [True, False])
def test_softmax_computes_what_fairseq_transformer_computes(synthetic_bin, training):
    task, ours = build(synthetic_bin, extra=["--attn-fn", "softmax"])
    _, stock = build(synthetic_bin, arch="transformer")
    ours.load_state_dict(stock.state_dict(), strict=True)  # the same parameter names
    ours.train(training), stock.train(training)
    sample = batch(task)
    ours_out, ours_extra = ours(**net_input(sample))
    stock_out, stock_extra = stock(**net_input(sample))
    torch.testing.assert_close(ours_out, stock_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours_extra["attn"][0], stock_extra["attn"][0], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_incremental_decoding_equals_full_forward(synthetic_bin, name):
    task, model = build(synthetic_bin, extra=attn_flags(name))
    model.eval()
    sample = batch(task)
    with torch.no_grad():
        full, _ = model(**net_input(sample))
        incremental, _ = decode_incrementally(model, sample)
    # positions past a sentence's end see padding differently; compare real tokens
    real = sample["target"].ne(task.target_dictionary.pad())
    torch.testing.assert_close(incremental[real], full[real], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_beam_search_scores_equal_teacher_forced_scores(synthetic_bin, name):
    """Beam search reorders the cached state of every site: its hypothesis scores
    must equal scoring the same hypotheses with a full forward pass."""
    task, model = build(synthetic_bin, extra=attn_flags(name))
    torch.manual_seed(0)
    for p in model.parameters():  # a peaked model, so beams diverge and get reordered
        p.data.normal_(0, 0.5)
    model.eval()
    sample = batch(task, size=4)
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=4, max_len_b=12,
                                  normalize_scores=False)
    hypos = generator.generate([model], sample)
    eos, pad = task.target_dictionary.eos(), task.target_dictionary.pad()
    src = sample["net_input"]["src_tokens"]
    for i, beams in enumerate(hypos):
        for hypo in beams:
            tokens = hypo["tokens"].unsqueeze(0)
            prev = torch.cat([tokens.new_tensor([[eos]]), tokens[:, :-1]], dim=1)
            keep = src[i].ne(pad)
            src_i = src[i][keep].unsqueeze(0)
            with torch.no_grad():
                logits, _ = model(src_i, torch.tensor([src_i.size(1)]), prev)
            lprobs = model.get_normalized_probs((logits, None), log_probs=True)
            forced = lprobs[0].gather(-1, tokens[0].unsqueeze(-1)).squeeze(-1)
            torch.testing.assert_close(hypo["positional_scores"], forced, atol=1e-4, rtol=1e-4)


def test_head_weights_are_per_head_distributions(synthetic_bin):
    task, model = build(synthetic_bin, extra=["--attn-fn", "entmax15"])
    model.eval()
    inp = net_input(batch(task))
    encoder_out = model.encoder(inp["src_tokens"], inp["src_lengths"])
    x = model.decoder.embed_tokens(inp["prev_output_tokens"]).transpose(0, 1)
    enc = encoder_out["encoder_out"][0]
    _, weights = model.decoder.layers[0].encoder_attn(
        x, enc, enc, key_padding_mask=encoder_out["encoder_padding_mask"][0],
        static_kv=True, need_head_weights=True)
    heads, bsz = 4, inp["src_tokens"].size(0)
    assert weights.shape == (heads, bsz, x.size(0), enc.size(0))
    torch.testing.assert_close(weights.sum(-1), torch.ones(heads, bsz, x.size(0)))


def test_switching_normaliser_keeps_shared_weights(synthetic_bin):
    """Loading an alpha-entmax model as softmax drops the alphas; the reverse
    initialises them; every other weight is the checkpoint's."""
    task, alpha_model = build(synthetic_bin, extra=["--attn-fn", "entmax_alpha"])
    _, soft_model = build(synthetic_bin, extra=["--attn-fn", "softmax"])
    soft_model.load_state_dict(alpha_model.state_dict())
    for key, value in soft_model.state_dict().items():
        assert torch.equal(value, alpha_model.state_dict()[key])
    alpha_model.load_state_dict(soft_model.state_dict())


def test_site_misfit_fails_at_start_up(synthetic_bin, monkeypatch):
    monkeypatch.setitem(SPECS, "topk", replace(SPECS["topk"], sites=("encoder_self",)))
    with pytest.raises(SettingsError, match="'topk' cannot be used for decoder cross attention"):
        build(synthetic_bin, extra=["--decoder-cross-attn-fn", "topk"])


def alphas_by_module(model):
    return {name: module.alpha_logit.detach().clone() for name, module in model.named_modules()
            if isinstance(module, EntmaxAlpha)}


def test_random_alpha_init_through_fairseq_train_flags_is_seeded(synthetic_bin):
    """``--entmax-alpha-init random``: every head of every module starts at its own z ~
    N(0, 1), drawn from torch's generator, which fairseq-train seeds with --seed before
    it builds the model; a number still starts every head there."""
    flags = ["--attn-fn", "entmax_alpha", "--entmax-alpha-init", "random"]
    runs = []
    for seed in (1, 1, 2):
        utils.set_torch_seed(seed)
        runs.append(alphas_by_module(build(synthetic_bin, extra=[*flags, "--seed", str(seed)])[1]))
    assert len(runs[0]) == 6 and runs[0].keys() == runs[2].keys()
    every = torch.cat(list(runs[0].values()))
    assert len(set(every.tolist())) == every.numel() == 24        # no two heads alike
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])  # same seed, same start
    assert not any(torch.equal(runs[0][k], runs[2][k]) for k in runs[0])
    _, model = build(synthetic_bin, extra=["--attn-fn", "entmax_alpha",
                                           "--entmax-alpha-init", "1.7"])
    for z in alphas_by_module(model).values():
        assert torch.allclose(EntmaxAlpha.alpha_of(z), torch.tensor(1.7))
    _, lstm = build(synthetic_bin, arch="sparse_lstm", extra=flags)
    assert [z.shape for z in alphas_by_module(lstm).values()] == [(1,)]


@pytest.mark.parametrize("flags,message", [
    (["--attn-fn", "topk", "--topk", "0"], "--topk must be >= 1"),
    (["--attn-fn", "entmax_alpha", "--entmax-alpha-init", "2.5"], "--entmax-alpha-init"),
    (["--attn-fn", "entmax_alpha", "--entmax-alpha-init", "rand"],
     "--entmax-alpha-init must be 'random' or a number in"),
    (["--attn-fn", "entmax_alpha", "--entmax-max-iter", "0"], "--entmax-max-iter"),
])
def test_infeasible_settings_fail_at_start_up(synthetic_bin, flags, message):
    with pytest.raises(SettingsError, match=message):
        build(synthetic_bin, extra=flags)


def test_hard_encoder_self_attention_is_allowed_with_a_warning(synthetic_bin, caplog):
    _, model = build(synthetic_bin, extra=["--attn-fn", "hard"])
    kinds = {type(attn.normalizer).__name__ for attn in attention_sites(model).values()}
    assert kinds == {"HardRetrieval"}
    assert "hard retrieval in encoder self-attention costs BLEU" in caplog.text
    caplog.clear()
    build(synthetic_bin, extra=["--decoder-self-attn-fn", "hard",
                                "--decoder-cross-attn-fn", "hard"])
    assert "costs BLEU" not in caplog.text


def test_sites_cover_the_model(synthetic_bin):
    _, model = build(synthetic_bin)
    assert {site for site, _ in attention_sites(model)} == set(SITES)


@pytest.mark.parametrize("name", ["sparsemax", "hard"])
def test_cross_attention_with_keys_shared_across_beams(name):
    """fairseq may keep one copy of the encoder states per sentence for all its beam
    hypotheses; that must equal attending to the states repeated per hypothesis."""
    torch.manual_seed(0)
    attn = SparseMultiheadAttention(16, 4, kdim=16, vdim=16, encoder_decoder_attention=True,
                                    normalizer=build_normalizer(name, 4)).eval()
    query = torch.randn(3, 4, 16)  # 3 steps, 2 sentences x 2 hypotheses
    keys = torch.randn(5, 2, 16)  # one copy per sentence
    shared, shared_weights = attn(query, keys, keys, static_kv=True, need_head_weights=True)
    repeated = keys.repeat_interleave(2, dim=1)
    expected, expected_weights = attn(query, repeated, repeated, static_kv=True,
                                      need_head_weights=True)
    torch.testing.assert_close(shared, expected)
    torch.testing.assert_close(shared_weights, expected_weights)
