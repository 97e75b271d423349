"""The kernel transformer (Tsai et al. 2019) as a fairseq model: incremental decoding and
beam search for every PE integration, PE sites, positions added once to the embeddings
(Vaswani et al.'s direct sum), parameter counts, flag errors, and fairseq-train ->
fairseq-generate for each kernel and each integration."""

import math

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from sparse_attn_plugin.errors import SettingsError
from sparse_attn_plugin.models.kernel_transformer import INPUT_PE
from sparse_attn_plugin.modules.kernel_attention import PE_INTEGRATIONS

from helpers.models import batch, build, decode_incrementally, peaked, teacher_forced

INTEGRATIONS = PE_INTEGRATIONS[:-1]  # "none" is what --pe-sites leaves out


def kernel_model(data, *flags):
    return build(data, "kernel_transformer", ["--dropout", "0", *flags])


@pytest.mark.parametrize("flags", [
    *(["--pe-integration", pe, "--no-value-pe"] for pe in INTEGRATIONS),
    ["--pe-integration", INPUT_PE, "--kernel", "polynomial"],
], ids=[*INTEGRATIONS, INPUT_PE])
def test_incremental_decoding_equals_full_forward(synthetic_bin, flags):
    task, model = kernel_model(synthetic_bin, *flags)
    peaked(model)
    sample = batch(task)
    with torch.no_grad():
        full, extra = model(**sample["net_input"])
        incremental, attn = decode_incrementally(model, sample)
    real = sample["target"].ne(task.target_dictionary.pad())
    torch.testing.assert_close(incremental[real], full[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(attn[real], extra["attn"][0][real], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pe,kernel", [("product_sym", "exponential"), ("lookup", "rbf"),
                                       ("product_xl", "polynomial")])
def test_beam_search_equals_teacher_forced_rescoring(synthetic_bin, pe, kernel):
    task, model = kernel_model(synthetic_bin, "--pe-integration", pe, "--kernel", kernel)
    peaked(model, seed=1)
    sample = batch(task, size=4)
    tgt_dict = task.target_dictionary
    generator = SequenceGenerator([model], tgt_dict, beam_size=4, max_len_b=10,
                                  normalize_scores=False)
    hypos = generator.generate([model], sample)
    src, pad = sample["net_input"]["src_tokens"], task.source_dictionary.pad()
    for i, beams in enumerate(hypos):
        real = src[i].ne(pad)
        for hypo in beams:
            scores, _ = teacher_forced(model, src[i][real], hypo["tokens"], tgt_dict.eos())
            torch.testing.assert_close(hypo["positional_scores"], scores, atol=1e-4, rtol=1e-4)


def input_sinusoid(tokens, pad, dim):
    """fairseq's sinusoidal positional embedding written out: the unpadded tokens are at
    positions ``pad + 1, pad + 2, ...``; ``sin(p / 10000^(i / (dim/2 - 1)))`` for
    ``i < dim/2``, then ``cos`` of the same; pads get zeros."""
    real = tokens.ne(pad)
    positions = (real.cumsum(1) + pad).double()
    rates = torch.exp(-math.log(10000) * torch.arange(dim // 2, dtype=torch.float64)
                      / (dim // 2 - 1))
    angles = positions[..., None] * rates
    return (torch.cat([angles.sin(), angles.cos()], -1) * real[..., None]).float()


def test_input_pe_adds_the_sinusoid_once_to_the_embeddings(synthetic_bin):
    """Vaswani et al.'s direct sum: each stack's first layer gets ``sqrt(C) E[w] + t``
    and no attention site adds positions of its own."""
    task, model = kernel_model(synthetic_bin, "--pe-integration", INPUT_PE, "--kernel", "rbf")
    peaked(model)
    inp = batch(task)["net_input"]
    seen = {}

    def first_input(name):
        def hook(module, args):
            seen[name] = args[0].transpose(0, 1)                  # (B, T, C)
        return hook

    for name in ("encoder", "decoder"):
        getattr(model, name).layers[0].register_forward_pre_hook(first_input(name))
    with torch.no_grad():
        model(**inp)
    for name, tokens in (("encoder", inp["src_tokens"]), ("decoder", inp["prev_output_tokens"])):
        embed = getattr(model, name).embed_tokens
        real = tokens.ne(embed.padding_idx)
        expected = math.sqrt(16) * embed(tokens) + input_sinusoid(tokens, embed.padding_idx, 16)
        torch.testing.assert_close(seen[name][real], expected[real], atol=1e-5, rtol=1e-5)
    attentions = [m for name, m in model.named_modules() if name.endswith("attn")]
    assert len(attentions) == 6
    assert all(m.pe_integration == "none" and not m.value_pe for m in attentions)


def test_input_pe_with_the_exponential_kernel_is_fairseqs_transformer(synthetic_bin):
    task, model = kernel_model(synthetic_bin, "--pe-integration", INPUT_PE)
    _, reference = build(synthetic_bin, "transformer", ["--dropout", "0"])
    reference.load_state_dict(peaked(model).state_dict())
    inp = batch(task)["net_input"]
    with torch.no_grad():
        ours, theirs = model(**inp)[0], reference.eval()(**inp)[0]
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("flags", [["--no-value-pe"], ["--pe-sites", "none"],
                                   ["--no-token-positional-embeddings"]])
def test_input_pe_refuses_per_site_flags_in_one_line(synthetic_bin, flags):
    with pytest.raises(SettingsError, match=f"^--pe-integration {INPUT_PE} "):
        kernel_model(synthetic_bin, "--pe-integration", INPUT_PE, *flags)


def encoder_states(model, tokens):
    with torch.no_grad():
        return model.encoder(tokens[None], torch.tensor([tokens.numel()]))["encoder_out"][0]


@pytest.mark.parametrize("sites,blind", [("none", True), ("decoder_self,decoder_cross", True),
                                         ("encoder_self", False)])
def test_pe_sites_decide_where_positions_are_seen(synthetic_bin, sites, blind):
    """Without positions the encoder is a bag of words: reversing a sentence (its end
    marker kept last) reverses its states."""
    task, model = kernel_model(synthetic_bin, "--pe-integration", "product_sym",
                               "--pe-sites", sites)
    peaked(model)
    tokens = batch(task)["net_input"]["src_tokens"][0]
    tokens = tokens[tokens.ne(task.source_dictionary.pad())]
    reversed_ = torch.cat([tokens[:-1].flip(0), tokens[-1:]])
    forward, backward = encoder_states(model, tokens), encoder_states(model, reversed_)
    same = torch.allclose(forward[:-1].flip(0), backward[:-1], atol=1e-5)
    assert same == blind


def attention_weight_count(model):
    return sum(p.numel() for name, p in model.named_parameters()
               if "attn." in name and name.endswith("weight")
               and any(f".{proj}." in name for proj in ("q_proj", "k_proj", "r_proj", "t_proj")))


def test_symmetric_product_kernel_saves_a_third_of_the_xl_kernels_weights(synthetic_bin):
    _, xl = kernel_model(synthetic_bin, "--pe-integration", "product_xl")
    _, sym = kernel_model(synthetic_bin, "--pe-integration", "product_sym")
    assert 3 * attention_weight_count(sym) == 2 * attention_weight_count(xl)
    _, tied = kernel_model(synthetic_bin, "--kernel-symmetric")
    _, untied = kernel_model(synthetic_bin)
    assert 2 * attention_weight_count(tied) == attention_weight_count(untied)


def test_the_proposed_kernel_stays_symmetric_where_there_are_no_positions(synthetic_bin):
    _, model = kernel_model(synthetic_bin, "--pe-integration", "product_sym", "--pe-sites",
                            "encoder_self")
    attentions = [m for name, m in model.named_modules() if name.endswith("attn")]
    assert len(attentions) == 6 and all(m.k_proj is None for m in attentions)
    assert sum(m.pe_integration == "product_sym" for m in attentions) == 2  # encoder layers
