"""The Hugging Face attention functions by the fused kernels (``impl="triton"`` here, under
Triton's interpreter; ``auto`` takes them on CUDA): the output and gradients of the unfused
function for every fused kind, with boolean masks (padding, causal, a query with every key
masked), grouped-query heads and a cache's longer keys, and in models: a causal LM, and an
encoder-decoder whose sites each have a normaliser, learned alpha included. No weights come
back from the fused path; asking for them (``output_attentions``) takes the unfused one."""

import os

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may be downloaded
transformers = pytest.importorskip("transformers")

from transformers import LlamaConfig, LlamaForCausalLM, MarianConfig, MarianMTModel  # noqa: E402

from sparse_attn_plugin.huggingface import (  # noqa: E402
    attention_function,
    functions,
    register,
    use_sparse_attention,
)

from helpers.dispatch import fused_calls as record  # noqa: E402

pytestmark = pytest.mark.requires("triton")

#: Each fused kind's options (entmax_alpha: one fixed alpha per head).
OPTIONS = {"softmax": {}, "sparsemax": {}, "entmax15": {}, "topk": {"k": 3},
           "entmax_alpha": {"alpha": (1.2, 1.5, 1.8, 2.0)}}


@pytest.fixture
def fused_calls(monkeypatch):
    return record(monkeypatch, functions)


class Module(torch.nn.Module):
    is_causal = True


def inputs(len_q, len_k, seed=0):
    """Query (2, 4, len_q, 8), keys and values of 2 key/value heads, and a boolean mask
    (2, 1, len_q, len_k): padding in the second sentence, causal, and in the first
    sentence one query that sees no key."""
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, heads, length, 8, generator=generator, dtype=torch.float64)
               for heads, length in ((4, len_q), (2, len_k), (2, len_k)))
    mask = torch.ones(len_q, len_k, dtype=torch.bool).tril(len_k - len_q).repeat(2, 1, 1, 1)
    mask[1, ..., :2] = False
    mask[0, 0, len_q // 2] = False
    return q, k, v, mask


@pytest.mark.parametrize("kind", OPTIONS)
@pytest.mark.parametrize("len_q,len_k", [(5, 5), (1, 6), (3, 7)])
def test_the_fused_function_gives_the_unfused_output_and_gradients(kind, len_q, len_k,
                                                                   fused_calls):
    results = []
    for impl in ("triton", "torch"):
        leaves = [x.requires_grad_() for x in inputs(len_q, len_k)[:3]]
        mask = inputs(len_q, len_k)[3]
        out, weights = attention_function(kind, impl=impl, **OPTIONS[kind])(
            Module(), *leaves, mask, scaling=0.5)
        upstream = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
        results.append((out, weights, torch.autograd.grad(out, leaves, upstream)))
    (fused, no_weights, fused_grads), (plain, _, plain_grads) = results
    assert fused_calls == [kind] and no_weights is None
    torch.testing.assert_close(fused, plain, atol=1e-12, rtol=1e-12)
    for ours, theirs in zip(fused_grads, plain_grads):
        torch.testing.assert_close(ours, theirs, atol=1e-11, rtol=1e-11)


def test_no_mask_on_a_causal_module_is_causal_and_float_masks_stay_unfused(fused_calls):
    q, k, v, _ = inputs(4, 4)
    fused = attention_function("entmax15", impl="triton")(Module(), q, k, v, None)[0]
    plain = attention_function("entmax15", impl="torch")(Module(), q, k, v, None)[0]
    torch.testing.assert_close(fused, plain, atol=1e-12, rtol=1e-12)
    assert fused_calls == ["entmax15"]
    additive = torch.zeros(2, 1, 4, 4, dtype=torch.float64)
    attention_function("entmax15", impl="triton")(Module(), q, k, v, additive)
    assert fused_calls == ["entmax15"]                    # an additive mask: unfused


def llama():
    config = LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, vocab_size=100,
                         max_position_embeddings=64, initializer_range=0.3)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).double().eval()


def test_a_causal_lm_and_its_cached_generation_fused(fused_calls):
    model = llama()
    ids = torch.randint(3, 100, (2, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :2] = 0
    found = {}
    for impl in ("triton", "torch"):
        model.set_attn_implementation(register("sparsemax", f"sparsemax_{impl}", impl=impl))
        with torch.no_grad():
            found[impl] = model.generate(ids, attention_mask=mask, max_new_tokens=3,
                                         do_sample=False, output_logits=True,
                                         return_dict_in_generate=True, pad_token_id=0)
    assert len(fused_calls) == 2 * 3                      # 2 layers, 3 steps
    assert torch.equal(found["triton"].sequences, found["torch"].sequences)
    for ours, theirs in zip(found["triton"].logits, found["torch"].logits):
        torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=1e-10)
    fused_calls.clear()
    model.set_attn_implementation("sparsemax_triton")
    with torch.no_grad():
        weights = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    assert fused_calls == [] and all(w is not None for w in weights)  # asked: unfused


def test_an_encoder_decoder_with_a_normaliser_per_site_and_learned_alpha(fused_calls):
    sites = dict(encoder_self={"kind": "entmax15", "impl": "triton"},
                 decoder_self={"kind": "topk", "k": 2, "impl": "triton"},
                 decoder_cross={"kind": "entmax_alpha", "learn_alpha": True, "alpha": 1.3,
                                "impl": "triton"})
    unfused = {site: {**choice, "impl": "torch"} for site, choice in sites.items()}
    generator = torch.Generator().manual_seed(1)
    batch = dict(input_ids=torch.randint(2, 60, (2, 7), generator=generator),
                 attention_mask=torch.tensor([[1] * 7, [1] * 4 + [0] * 3]),
                 decoder_input_ids=torch.randint(2, 60, (2, 6), generator=generator))
    results = []
    for choice in (sites, unfused):
        torch.manual_seed(0)
        model = use_sparse_attention(MarianMTModel(MarianConfig(
            vocab_size=60, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_position_embeddings=64, init_std=0.3)).double().eval(), **choice)
        logits = model(**batch).logits
        alphas = [p for n, p in model.named_parameters() if "alpha_logit" in n]
        results.append((logits, torch.autograd.grad(logits.sum(), alphas)))
    assert sorted(set(fused_calls)) == ["entmax15", "entmax_alpha", "topk"]
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-10, rtol=1e-10)
    for ours, theirs in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(ours, theirs, atol=1e-9, rtol=1e-9)
