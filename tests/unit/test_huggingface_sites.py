"""One normaliser per attention site of a Hugging Face encoder-decoder
(sparse_attn_plugin.huggingface.use_sparse_attention), on tiny randomly initialised
Marian, BART and T5 models built from configs: nothing is downloaded. Each site's choice
against transformers' own eager attention (an independent reference) everywhere else;
exact zeros where sparse; cached generation against uncached and the full forward pass;
fine-tuning; learned alphas per head through save_pretrained / from_pretrained, in this
process and a fresh one; float64 gradcheck; clear errors."""

import json
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may be downloaded
transformers = pytest.importorskip("transformers")

from transformers import (  # noqa: E402
    BartConfig,
    BartForConditionalGeneration,
    LlamaConfig,
    LlamaForCausalLM,
    MarianConfig,
    MarianMTModel,
    T5Config,
    T5ForConditionalGeneration,
)

from sparse_attn_plugin.huggingface import (  # noqa: E402
    ALPHA_MODULE,
    KINDS,
    SITE_ATTENTION,
    LearnedAlpha,
    site_attention,
    use_sparse_attention,
)
from sparse_attn_plugin.sites import SITES  # noqa: E402

from helpers import REPO  # noqa: E402

VOCAB, SRC, TGT = 60, 7, 6
ENCODER_SELF, DECODER_SELF, DECODER_CROSS = SITES
LEARNED = {"kind": "entmax_alpha", "learn_alpha": True, "alpha": 1.3}
# init scales larger than the models' defaults, so that a random model's attention is peaked
# enough for sparsemax's zeros to show
SHARED = dict(vocab_size=VOCAB, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
SEQ2SEQ = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
               max_position_embeddings=64, init_std=0.3, **SHARED)
MODELS = {
    "marian": lambda: MarianMTModel(MarianConfig(**SEQ2SEQ)),
    "bart": lambda: BartForConditionalGeneration(BartConfig(bos_token_id=2, **SEQ2SEQ)),
    "t5": lambda: T5ForConditionalGeneration(T5Config(
        d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, initializer_factor=1.5,
        **SHARED)),
}


def build(which, **sites):
    torch.manual_seed(0)
    model = MODELS[which]().eval()
    return use_sparse_attention(model, **sites) if sites else model


def batch():
    """Two sources, the second right-padded by three tokens, and decoder inputs."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(2, VOCAB, (2, SRC), generator=gen)
    mask = torch.ones(2, SRC, dtype=torch.long)
    mask[1, -3:] = 0
    ids[1, -3:] = 0
    return dict(input_ids=ids, attention_mask=mask,
                decoder_input_ids=torch.randint(2, VOCAB, (2, TGT), generator=gen))


def attentions(model, **inputs):
    """``{site: [weights of each layer]}`` of a forward pass."""
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    return {ENCODER_SELF: out.encoder_attentions, DECODER_SELF: out.decoder_attentions,
            DECODER_CROSS: out.cross_attentions}, out.logits


def allowed_keys(site, mask):
    """``(B, 1, T, S)``: the keys each query of ``site`` may see."""
    if site == DECODER_SELF:
        return torch.ones(TGT, TGT, dtype=torch.bool).tril().expand(2, 1, TGT, TGT)
    rows = SRC if site == ENCODER_SELF else TGT
    return mask.bool()[:, None, None, :].expand(2, 1, rows, SRC)


@pytest.fixture(scope="module", params=list(MODELS))
def eager(request):
    """A model's eager attention weights and logits, the reference."""
    model = build(request.param)
    model.set_attn_implementation("eager")
    return request.param, attentions(model, **batch())


# --- each site against transformers' eager attention -------------------------------

def test_softmax_at_every_site_equals_eager(eager):
    which, (reference, logits) = eager
    model = build(which, encoder_self="softmax", decoder_self="softmax",
                  decoder_cross="softmax")
    assert model.config._attn_implementation == SITE_ATTENTION
    ours, our_logits = attentions(model, **batch())
    torch.testing.assert_close(our_logits, logits, atol=1e-5, rtol=1e-5)
    for site in SITES:
        for a, b in zip(ours[site], reference[site], strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("site", SITES)
def test_a_sparse_site_changes_that_site_alone(site, eager):
    """sparsemax at ``site``, softmax elsewhere: ``site``'s weights have exact zeros among
    the keys it may see and sum to 1; every site that runs before it (the encoder, the
    first decoder layer's self-attention) gives eager's weights; softmax sites never give
    an exact zero where a key may be seen."""
    which, (reference, logits) = eager
    inputs = batch()
    ours, our_logits = attentions(build(which, **{site: "sparsemax"}), **inputs)
    allowed = allowed_keys(site, inputs["attention_mask"])
    for weights in ours[site]:
        allowed_here = allowed.expand_as(weights)
        assert (weights[~allowed_here] == 0).all()
        assert ((weights == 0) & allowed_here).sum() > allowed_here.sum() // 10
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    upstream = {ENCODER_SELF: ours[ENCODER_SELF], DECODER_SELF: ours[DECODER_SELF][:1]}
    for other, layers in upstream.items():
        if other != site:
            for a, b in zip(layers, reference[other]):
                torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    for other in SITES:
        if other != site:
            for weights in ours[other]:
                allowed_there = allowed_keys(other, inputs["attention_mask"])
                assert (weights[allowed_there.expand_as(weights)] > 0).all()
    assert not torch.allclose(our_logits, logits, atol=1e-3)


def test_each_site_takes_its_own_options():
    """topk's k per site: encoder self-attention keeps 2 keys, cross-attention 3."""
    inputs = batch()
    ours, _ = attentions(build("marian", encoder_self={"kind": "topk", "k": 2},
                               decoder_cross={"kind": "topk", "k": 3}), **inputs)
    for site, k in ((ENCODER_SELF, 2), (DECODER_CROSS, 3)):
        allowed = allowed_keys(site, inputs["attention_mask"]).expand_as(ours[site][0])
        for weights in ours[site]:
            assert torch.equal((weights > 0).sum(-1), allowed.sum(-1).clamp_max(k))


# --- generation --------------------------------------------------------------------

@pytest.mark.parametrize("which", list(MODELS))
@pytest.mark.parametrize("beams", [1, 3])
def test_cached_generation_equals_uncached_and_the_full_forward_pass(which, beams):
    model = build(which, encoder_self="entmax15", decoder_self={"kind": "topk", "k": 2},
                  decoder_cross=LEARNED)
    inputs = batch()
    del inputs["decoder_input_ids"]
    options = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, num_beams=beams,
                   output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        cached = model.generate(**inputs, use_cache=True, **options)
        uncached = model.generate(**inputs, use_cache=False, **options)
        assert torch.equal(cached.sequences, uncached.sequences)
        for a, b in zip(cached.logits, uncached.logits, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        if beams == 1:
            full = model(**inputs, decoder_input_ids=cached.sequences[:, :-1]).logits
            torch.testing.assert_close(torch.stack(cached.logits, 1), full, atol=1e-4,
                                       rtol=1e-4)


# --- learning alpha per head --------------------------------------------------------

def marian_learning_alpha():
    return build("marian", encoder_self="softmax", decoder_self="softmax",
                 decoder_cross=LEARNED)


def alphas(model):
    return {name: value.detach().clone() for name, value in model.named_parameters()
            if ALPHA_MODULE in name}


def test_learned_alpha_is_one_parameter_per_head_in_each_cross_attention():
    model = marian_learning_alpha()
    found = alphas(model)
    assert sorted(found) == [f"model.decoder.layers.{i}.encoder_attn.{ALPHA_MODULE}.alpha_logit"
                             for i in range(2)]
    for module in (layer.encoder_attn for layer in model.model.decoder.layers):
        alpha = getattr(module, ALPHA_MODULE)
        assert isinstance(alpha, LearnedAlpha) and alpha.alpha_logit.dtype == torch.float32
        torch.testing.assert_close(alpha.alpha(), torch.full((4,), 1.3))
    model.half()                                          # z stays float32
    assert all(v.dtype == torch.float32 for v in alphas(model).values())


def test_twenty_fine_tuning_steps_lower_the_loss_and_move_the_alphas():
    model = marian_learning_alpha().train()
    inputs = batch()
    labels = inputs.pop("decoder_input_ids")
    before = alphas(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    for name, value in alphas(model).items():
        assert (value - before[name]).abs().min() > 1e-3, name        # every head moved


def fine_tuned(steps=3):
    model = marian_learning_alpha().train()
    inputs = batch()
    labels = inputs.pop("decoder_input_ids")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        model(**inputs, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def test_choice_and_learned_alphas_round_trip_through_save_and_from_pretrained(tmp_path):
    model = fine_tuned()
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["attn_implementation"] == SITE_ATTENTION
    assert saved["sparse_attention"] == model.config.sparse_attention == {
        ENCODER_SELF: {"kind": "softmax"}, DECODER_SELF: {"kind": "softmax"},
        DECODER_CROSS: LEARNED}
    loaded = MarianMTModel.from_pretrained(tmp_path).eval()
    assert loaded.config._attn_implementation == SITE_ATTENTION
    assert loaded.config.sparse_attention == model.config.sparse_attention
    learned, back = alphas(model), alphas(loaded)
    assert sorted(back) == sorted(learned)
    assert all(torch.equal(back[name], learned[name]) for name in learned)
    inputs = batch()
    with torch.no_grad():
        assert torch.equal(loaded(**inputs).logits, model(**inputs).logits)
    loaded.save_pretrained(tmp_path / "again")                          # and again
    assert json.loads((tmp_path / "again" / "config.json").read_text())[
        "attn_implementation"] == SITE_ATTENTION


FRESH = """
import sys, torch, transformers
{imports}
from transformers import MarianMTModel
model = MarianMTModel.from_pretrained(sys.argv[1]).eval()
inputs = torch.load(sys.argv[2])
with torch.no_grad():
    torch.save(model(**inputs).logits, sys.argv[3])
"""


@pytest.mark.parametrize("imported", [True, False])
def test_a_fresh_process_loads_the_saved_model_or_refuses(tmp_path, imported):
    """Imported after transformers, our module is all from_pretrained needs: the same
    logits, bit for bit. Without it transformers refuses the attention's name, never
    running softmax in its place."""
    model = fine_tuned()
    model.save_pretrained(tmp_path / "model")
    inputs = batch()
    torch.save(inputs, tmp_path / "inputs.pt")
    code = FRESH.format(imports="import sparse_attn_plugin.huggingface" if imported else "")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "model"),
                           str(tmp_path / "inputs.pt"), str(tmp_path / "logits.pt")],
                          cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    if not imported:
        assert done.returncode == 1
        assert f'attn_implementation="{SITE_ATTENTION}"` is not supported' in done.stderr
        return
    assert done.returncode == 0, done.stderr
    with torch.no_grad():
        assert torch.equal(torch.load(tmp_path / "logits.pt"), model(**inputs).logits)


def test_a_config_chooses_before_the_weights_load_and_missing_alphas_start_at_alpha_init(
        tmp_path):
    """The per-site call on a config, then from_pretrained of a softmax checkpoint (as of
    the hub's): the alphas it lacks start at alpha_init, the rest are the checkpoint's."""
    softmax = build("marian")
    softmax.save_pretrained(tmp_path)
    config = use_sparse_attention(MarianConfig.from_pretrained(tmp_path),
                                  decoder_cross=LEARNED)
    model = MarianMTModel.from_pretrained(tmp_path, config=config).eval()
    assert model.config._attn_implementation == SITE_ATTENTION
    for value in alphas(model).values():
        torch.testing.assert_close(LearnedAlpha.alpha_of(value), torch.full((4,), 1.3))
    weights = dict(softmax.named_parameters())
    assert all(torch.equal(value, weights[name]) for name, value in model.named_parameters()
               if ALPHA_MODULE not in name)


def test_choosing_again_keeps_learned_alphas_and_softmax_drops_them():
    model = fine_tuned()
    learned = alphas(model)
    use_sparse_attention(model, decoder_cross={**LEARNED, "n_iter": 40})
    assert all(torch.equal(v, learned[n]) for n, v in alphas(model).items())
    use_sparse_attention(model, decoder_cross="sparsemax")
    assert alphas(model) == {}


# --- the attention function itself ---------------------------------------------------

class Attention(torch.nn.Module):
    """What site_attention reads of a transformers attention module."""

    def __init__(self, site, choice, heads=3):
        super().__init__()
        self.is_decoder, self.is_causal = site != ENCODER_SELF, site == DECODER_SELF
        self.config = type("Config", (), {"sparse_attention": {site: choice}})()
        self.num_heads = heads


def test_learned_alpha_attention_passes_float64_gradcheck():
    module = Attention(DECODER_CROSS, LEARNED).double()
    use_alpha = LearnedAlpha(3, 1.4).double()
    module.add_module(ALPHA_MODULE, use_alpha)
    gen = torch.Generator().manual_seed(3)
    query, key, value = (torch.randn(2, 3, n, 4, generator=gen, dtype=torch.float64,
                                     requires_grad=True) for n in (3, 5, 5))
    mask = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    mask[1, ..., -2:] = False

    del use_alpha.alpha_logit                 # a plain tensor in its place, to check its grad

    def output(query, key, value, logit):
        use_alpha.alpha_logit = logit
        return site_attention(module, query, key, value, mask, scaling=0.7)[0]

    logit = torch.tensor([-0.5, 0.1, 0.8], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(output, (query, key, value, logit))


@settings(max_examples=25, deadline=None)
@given(site=st.sampled_from(SITES), kind=st.sampled_from(KINDS), heads=st.integers(1, 4),
       queries=st.integers(1, 5), keys=st.integers(1, 6), seed=st.integers(0, 2 ** 16))
def test_site_attention_weights_sum_to_one_and_skip_masked_keys(site, kind, heads, queries,
                                                                 keys, seed):
    if site == DECODER_SELF:
        keys = queries
    gen = torch.Generator().manual_seed(seed)
    module = Attention(site, {"kind": kind}, heads).eval()
    query = torch.randn(2, heads, queries, 8, generator=gen)
    key, value = (torch.randn(2, heads, keys, 8, generator=gen) for _ in range(2))
    mask = torch.rand(2, 1, queries, keys, generator=gen) > 0.3
    mask[..., 0] = True                                      # every query sees a key
    if site == DECODER_SELF:
        mask &= torch.ones(queries, keys, dtype=torch.bool).tril()
    output, weights = site_attention(module, query, key, value, mask)
    assert output.shape == (2, queries, heads, 8) and weights.shape == (2, heads, queries, keys)
    assert (weights[~mask.expand_as(weights)] == 0).all() and (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, heads, queries))


# --- errors ------------------------------------------------------------------------

def tiny_config():
    return MarianConfig(**SEQ2SEQ)


@pytest.mark.parametrize("sites,message", [
    ({"cross": "sparsemax"},
     "unknown attention site 'cross'; choose from encoder_self, decoder_self, decoder_cross"),
    ({"decoder_cross": "sparsemaxx"},
     "unknown attention normaliser 'sparsemaxx' for decoder_cross attention; choose from "
     + ", ".join(KINDS)),
    ({"encoder_self": "csparsemax"}, "unknown attention normaliser 'csparsemax'"),
    ({"decoder_cross": {"k": 3}}, "unknown attention normaliser None"),
    ({"decoder_cross": {"kind": "sparsemax", "k": 3}},
     "decoder_cross: sparsemax takes no option 'k'; it takes: impl"),
    ({"decoder_cross": {"kind": "topk", "learn_alpha": True}},
     "topk takes no option 'learn_alpha'; it takes: k, impl"),
    ({"decoder_cross": {"kind": "topk", "k": 0}}, "k must be >= 1"),
    ({"decoder_self": {"kind": "entmax_alpha", "alpha": -2.5}}, r"alpha in \(0, inf\)"),
    ({"decoder_self": {**LEARNED, "alpha": 2.0}},
     r"decoder_self: learned alpha's first value must be .* a number in \[1.01, 2.0\)"),
    ({"decoder_self": {**LEARNED, "learn_alpha": "yes"}}, "learn_alpha must be True or False"),
    ({"decoder_self": 3}, "decoder_self: give a normaliser name or a dict"),
])
def test_bad_choices_are_one_clear_line(sites, message):
    config = tiny_config()
    with pytest.raises(ValueError, match=message) as error:
        use_sparse_attention(config, **sites)
    assert "\n" not in str(error.value)
    assert not hasattr(config, "sparse_attention")           # nothing half-done


def test_a_model_whose_attention_names_no_site_is_refused():
    llama = LlamaForCausalLM(LlamaConfig(hidden_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, intermediate_size=32,
                                         vocab_size=50))
    with pytest.raises(ValueError, match="LlamaForCausalLM has no attention module that says"):
        use_sparse_attention(llama, decoder_self="sparsemax")
    with pytest.raises(ValueError, match="takes a transformers model or config, got dict"):
        use_sparse_attention({}, decoder_cross="sparsemax")
