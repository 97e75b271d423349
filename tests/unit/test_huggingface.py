"""Our normalisers as attention functions of Hugging Face transformers models
(sparse_attn_plugin.huggingface), on tiny randomly initialised Llama (grouped-query, causal)
and BERT (bidirectional) models built from configs: nothing is downloaded. Our softmax
against transformers' own eager attention (an independent reference); sparsemax's exact
zeros, sums and padding; generation with a cache against the full forward pass; backward;
masks of every form; configurable k and alpha; clear errors."""

import os
import subprocess
import sys

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may be downloaded
transformers = pytest.importorskip("transformers")

from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    BertConfig,
    BertModel,
    LlamaConfig,
)
from transformers.models.llama.modeling_llama import eager_attention_forward  # noqa: E402

from sparse_attn_plugin.huggingface import (  # noqa: E402
    KINDS,
    attention_function,
    register,
    register_all,
)

from helpers import REPO  # noqa: E402

SEQ, NEW = 7, 4
NAMES = register_all(k=3, alpha=(1.2, 1.5, 1.8, 2.0))  # entmax_alpha: one alpha per head


def llama():
    # initializer_range 0.3 (not 0.02) so that the attention is peaked enough for sparsemax's
    # zeros to show in the scores of a random model
    config = LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, vocab_size=100,
                         max_position_embeddings=64, initializer_range=0.3)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


def bert():
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, vocab_size=100, max_position_embeddings=64,
                        initializer_range=0.3)
    torch.manual_seed(0)
    return BertModel(config, add_pooling_layer=False).eval()


@pytest.fixture(scope="module")
def causal_lm():
    return llama()


@pytest.fixture(scope="module")
def encoder():
    return bert()


def batch():
    """Two sequences, the second left-padded by two tokens."""
    ids = torch.randint(3, 100, (2, SEQ), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, SEQ, dtype=torch.long)
    mask[1, :2] = 0
    return ids, mask


def run(model, name, **inputs):
    model.set_attn_implementation(name)
    assert model.config._attn_implementation == name
    return model(**inputs, output_attentions=True)


def allowed_keys(mask, causal):
    """``(B, 1, T, S)``: the keys each query may see."""
    allowed = mask.bool()[:, None, None, :].expand(-1, 1, mask.size(1), -1)
    return allowed & torch.ones(mask.size(1), mask.size(1), dtype=torch.bool).tril() \
        if causal else allowed


# --- against transformers' eager attention -----------------------------------------

def test_our_softmax_equals_eager_in_a_grouped_query_causal_lm_with_left_padding(causal_lm):
    ids, mask = batch()
    with torch.no_grad():
        eager = run(causal_lm, "eager", input_ids=ids, attention_mask=mask)
        ours = run(causal_lm, "softmax", input_ids=ids, attention_mask=mask)
    real = mask.bool()                          # pad queries: eager spreads, ours zero
    torch.testing.assert_close(ours.logits[real], eager.logits[real], atol=1e-5, rtol=1e-5)
    for a, b in zip(ours.attentions, eager.attentions):
        torch.testing.assert_close(a.transpose(1, 2)[real], b.transpose(1, 2)[real],
                                   atol=1e-6, rtol=1e-5)
        assert (a[1, :, :2] == 0).all()                   # rows with every key masked


def test_our_softmax_equals_eager_in_a_bidirectional_encoder(encoder):
    ids, mask = batch()
    with torch.no_grad():
        eager = run(encoder, "eager", input_ids=ids, attention_mask=mask)
        ours = run(encoder, "softmax", input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(ours.last_hidden_state, eager.last_hidden_state, atol=1e-5,
                               rtol=1e-5)
    for a, b in zip(ours.attentions, eager.attentions):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind", ["softmax", "sparsemax"])
def test_float_and_boolean_masks_and_none_give_the_same_attention(kind):
    """The function itself: a boolean mask and transformers' additive float mask (0 / the
    dtype's minimum) agree, a query with every key masked included (all-zero weights and
    output); no mask on a causal module gives the causal mask. With softmax, the weights
    equal transformers' eager_attention_forward's with grouped-query heads."""
    gen = torch.Generator().manual_seed(2)
    query = torch.randn(2, 4, 5, 8, generator=gen)
    key, value = torch.randn(2, 2, 5, 8, generator=gen), torch.randn(2, 2, 5, 8, generator=gen)
    module = torch.nn.Module().eval()
    module.num_key_value_groups, module.is_causal = 2, True
    causal = torch.ones(5, 5, dtype=torch.bool).tril().expand(2, 1, 5, 5)
    masked = causal.clone()
    masked[1, 0, 0] = False                                 # a query with no key to see
    additive = torch.zeros(masked.shape).masked_fill(~masked, torch.finfo(torch.float32).min)
    fn = attention_function(kind)
    out_bool, w_bool = fn(module, query, key, value, masked, scaling=0.3)
    out, weights = fn(module, query, key, value, additive, scaling=0.3)
    assert torch.equal(out, out_bool) and torch.equal(weights, w_bool)
    assert (w_bool[1, :, 0] == 0).all() and (out_bool[1, 0] == 0).all()
    assert out_bool.shape == (2, 5, 4, 8)                  # (batch, seq, heads, head_dim)
    assert (w_bool[~masked.expand_as(w_bool)] == 0).all()
    out_causal, w_causal = fn(module, query, key, value, causal, scaling=0.3)
    out, weights = fn(module, query, key, value, None, scaling=0.3)
    assert torch.equal(out, out_causal) and torch.equal(weights, w_causal)
    if kind == "softmax":
        additive = torch.zeros(causal.shape).masked_fill(~causal, torch.finfo(torch.float32).min)
        out, weights = eager_attention_forward(module, query, key, value, additive, scaling=0.3)
        torch.testing.assert_close(out_causal, out, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(w_causal, weights, atol=1e-6, rtol=1e-6)


# --- sparse attention in the models ------------------------------------------------

@pytest.mark.parametrize("which", ["llama", "bert"])
def test_sparsemax_weights_have_exact_zeros_sum_to_one_and_skip_padding(which, causal_lm,
                                                                        encoder):
    model, causal = (causal_lm, True) if which == "llama" else (encoder, False)
    ids, mask = batch()
    with torch.no_grad():
        eager = run(model, "eager", input_ids=ids, attention_mask=mask)
        ours = run(model, "sparsemax", input_ids=ids, attention_mask=mask)
    allowed = allowed_keys(mask, causal).expand_as(ours.attentions[0])
    rows = allowed.any(-1)
    for weights in ours.attentions:
        assert (weights[~allowed] == 0).all()            # padded and future keys
        assert ((weights == 0) & allowed).sum() > allowed.sum() // 4   # sparse among the rest
        sums = weights.sum(-1)
        torch.testing.assert_close(sums[rows], torch.ones_like(sums[rows]))
    first = "logits" if causal else "last_hidden_state"
    assert not torch.allclose(getattr(ours, first), getattr(eager, first), atol=1e-3)


def test_topk_keeps_k_keys_and_k_is_configurable(causal_lm):
    name = register("topk", "topk_two", k=2)
    ids, mask = batch()
    with torch.no_grad():
        weights = run(causal_lm, name, input_ids=ids, attention_mask=mask).attentions[0]
    allowed = allowed_keys(mask, True).expand_as(weights)
    kept = (weights > 0).sum(-1)
    assert torch.equal(kept, allowed.sum(-1).clamp_max(2))   # no ties in random scores


def test_entmax_alpha_uses_one_fixed_alpha_per_head(causal_lm):
    """Head 3 has alpha 2: its weights are sparsemax's."""
    ids, mask = batch()
    with torch.no_grad():
        ours = run(causal_lm, "entmax_alpha", input_ids=ids, attention_mask=mask).attentions
        sparse = run(causal_lm, "sparsemax", input_ids=ids, attention_mask=mask).attentions
    torch.testing.assert_close(ours[0][:, 3], sparse[0][:, 3], atol=1e-6, rtol=0)
    assert not torch.allclose(ours[0][:, 0], sparse[0][:, 0], atol=1e-3)


@pytest.mark.parametrize("name", [n for n in NAMES if n != "softmax"])
def test_generation_with_a_cache_equals_the_full_forward_pass(name, causal_lm):
    ids, mask = batch()
    causal_lm.set_attn_implementation(name)
    with torch.no_grad():
        out = causal_lm.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False,
                                 use_cache=True, output_logits=True,
                                 return_dict_in_generate=True, pad_token_id=0)
        assert out.sequences.shape == (2, SEQ + NEW)
        full_mask = torch.cat([mask, torch.ones(2, NEW, dtype=mask.dtype)], 1)
        # the position ids generate gives a left-padded batch
        positions = (full_mask.cumsum(-1) - 1).masked_fill(full_mask == 0, 1)
        full = causal_lm(input_ids=out.sequences, attention_mask=full_mask,
                         position_ids=positions).logits
    for step, logits in enumerate(out.logits):
        torch.testing.assert_close(logits, full[:, SEQ - 1 + step], atol=1e-4, rtol=1e-4)
        assert torch.equal(out.sequences[:, SEQ + step], logits.argmax(-1))


@pytest.mark.parametrize("name", ["sparsemax", "entmax15", "topk", "entmax_alpha"])
def test_backward_reaches_the_attention_weights(name):
    model = llama().train()
    model.set_attn_implementation(name)
    ids, mask = batch()
    loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
    loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "q_proj" in n or "k_proj" in n]
    assert grads and all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0
                         for g in grads)


# --- errors and imports ------------------------------------------------------------

@pytest.mark.parametrize("make_bad,message", [
    (lambda: attention_function("softmaxx"), "unknown attention normaliser 'softmaxx'"),
    (lambda: attention_function("sparsemax", impl="gpu"), "unknown attention implementation"),
    (lambda: attention_function("topk", k=0), "k must be >= 1, got 0"),
    (lambda: attention_function("topk", k=2.5), "k must be an integer >= 1, got 2.5"),
    (lambda: attention_function("topk", top=3), "topk attention takes no option 'top'"),
    (lambda: attention_function("entmax_alpha", alpha=0.0), r"alpha in \(0, inf\), got 0.0"),
    (lambda: attention_function("entmax_alpha", alpha=[1.5, -2.5]), r"alpha in \(0, inf\)"),
    (lambda: attention_function("entmax_alpha", alpha=[[1.5]]), "a number or one per head"),
    (lambda: attention_function("entmax_alpha", alpha="x"), "a number or one per head"),
    (lambda: attention_function("entmax_alpha", n_iter=0), "n_iter must be >= 1, got 0"),
])
def test_bad_options_are_one_clear_line(make_bad, message):
    with pytest.raises(ValueError, match=message) as error:
        make_bad()
    assert "\n" not in str(error.value)


def test_kinds_are_registered_with_transformers():
    from transformers import AttentionInterface

    assert NAMES == KINDS and all(name in AttentionInterface() for name in NAMES)


def test_imports_without_transformers_and_register_names_what_is_missing():
    code = ("import sys; sys.modules['transformers'] = None\n"
            "import sparse_attn_plugin.huggingface as hf\n"
            "assert 'fairseq' not in sys.modules\n"
            "hf.attention_function('sparsemax')\n"
            "hf.register('sparsemax')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: sparse_attn_plugin.huggingface.register needs the 'hf' extra: "
        "pip install 'sparse-attn[hf]'")
