"""The kernel transformer (Tsai et al. 2019) as a fairseq model: incremental decoding and
beam search for every PE integration, PE sites, parameter counts, flag errors, and
fairseq-train -> fairseq-generate for each kernel and each integration."""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from test_fairseq_cli import run

from sparse_attn_plugin.modules.kernel_attention import PE_INTEGRATIONS
from sparse_attn_plugin.normalizers.kernels import KERNELS

from conftest import BIN, PLUGIN
from models import TINY, batch, build, decode_incrementally, peaked, teacher_forced

INTEGRATIONS = PE_INTEGRATIONS[:-1]  # "none" is what --pe-sites leaves out


def kernel_model(data, *flags):
    return build(data, "kernel_transformer", ["--dropout", "0", *flags])


@pytest.mark.parametrize("pe", INTEGRATIONS)
def test_incremental_decoding_equals_full_forward(synthetic_bin, pe):
    task, model = kernel_model(synthetic_bin, "--pe-integration", pe, "--no-value-pe")
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


def fairseq_train(data, save_dir, *flags, check=True):
    return run([BIN / "fairseq-train", data, "--user-dir", PLUGIN, "--arch", "kernel_transformer",
                "--cpu", *TINY, "--optimizer", "adam", "--lr", "5e-3", "--max-tokens", "1000",
                "--max-update", "4", "--save-dir", save_dir, "--no-epoch-checkpoints",
                "--no-progress-bar", "--seed", "1", *flags], check=check)


def test_bad_pe_sites_give_one_line(synthetic_bin, tmp_path):
    proc = fairseq_train(synthetic_bin, tmp_path, "--pe-sites", "encoder,decoder", check=False)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "--pe-sites takes 'none' or a comma-separated list" in last


VARIANTS = [["--kernel", kind] for kind in KERNELS] + \
    [["--pe-integration", pe, "--no-value-pe"] for pe in INTEGRATIONS if pe != "direct_sum"] + \
    [["--kernel-symmetric", "--kernel", "rbf"], ["--pe-sites", "none"]]


@pytest.mark.parametrize("flags", VARIANTS, ids=[" ".join(v) for v in VARIANTS])
def test_train_then_generate(synthetic_bin, tmp_path, flags):
    fairseq_train(synthetic_bin, tmp_path, *flags)
    out = run([BIN / "fairseq-generate", synthetic_bin, "--user-dir", PLUGIN, "--path",
               tmp_path / "checkpoint_last.pt", "--beam", "3", "--max-len-b", "20",
               "--batch-size", "16", "--required-batch-size-multiple", "1", "--cpu"]).stdout
    assert sum(line.startswith("H-") for line in out.splitlines()) == 40


def test_the_proposed_kernel_stays_symmetric_where_there_are_no_positions(synthetic_bin):
    _, model = kernel_model(synthetic_bin, "--pe-integration", "product_sym", "--pe-sites",
                            "encoder_self")
    attentions = [m for name, m in model.named_modules() if name.endswith("attn")]
    assert len(attentions) == 6 and all(m.k_proj is None for m in attentions)
    assert sum(m.pe_integration == "product_sym" for m in attentions) == 2  # encoder layers
