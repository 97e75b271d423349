"""sparse_transformer with the fused attention kernels (``--attn-impl triton`` here, under
Triton's interpreter; ``auto`` takes them on CUDA): every site of a training forward and
the decoder's sites at every decoding step run one fused call (but the cross-attention
whose weights fairseq's decoder returns), the outputs and gradients
(the learned alphas' too) are the unfused model's, incremental decoding equals the full
pass, and beam search (which reorders the cache the fused path keeps) finds the unfused
model's hypotheses. Calls that need the weights, attention dropout or rows longer than the
kernels hold take the unfused path."""

import pytest
import torch
from fairseq.modules import MultiheadAttention
from fairseq.sequence_generator import SequenceGenerator

from sparse_attn_plugin.modules import SparseMultiheadAttention, multihead_attention
from sparse_attn_plugin.normalizers import NormalizerOptions, build_normalizer, fused_attention
from sparse_attn_plugin.normalizers.fused_attention import KINDS

from helpers.dispatch import Ops
from helpers.dispatch import fused_calls as record
from helpers.models import attn_flags, batch, build, decode_incrementally, peaked

pytestmark = pytest.mark.requires("triton")

#: The normalisers with a fused kind (top-k keeps 2 of the synthetic corpus's few keys).
FUSED = ["softmax", "sparsemax", "entmax15", "entmax_alpha", "topk"]
assert sorted(FUSED) == sorted(KINDS)
#: Layers of the tiny model's encoder and decoder.
LAYERS = 2
#: Decoding steps checked.
STEPS = 4


def pair(data, name, *flags):
    """(task, fused model, unfused model) with the same peaked weights, as double."""
    task, fused = build(data, extra=[*attn_flags(name), "--attn-impl", "triton", *flags])
    _, plain = build(data, extra=[*attn_flags(name), "--attn-impl", "torch", *flags])
    peaked(fused)
    plain.load_state_dict(fused.state_dict())
    return task, fused.double(), plain.double()


@pytest.fixture
def fused_calls(monkeypatch):
    return record(monkeypatch, multihead_attention)


def net_input(sample):
    return {k: sample["net_input"][k] for k in ("src_tokens", "src_lengths", "prev_output_tokens")}


@pytest.mark.parametrize("name", FUSED)
def test_training_forward_and_gradients_equal_the_unfused_model(synthetic_bin, name,
                                                                fused_calls):
    task, fused, plain = pair(synthetic_bin, name)
    sample = batch(task, split="train", size=4)
    results = []
    for model in (fused, plain):
        model.train()
        out, _ = model(**net_input(sample))
        loss = out.double().logsumexp(-1).sum()
        parameters = [p for p in model.parameters() if p.requires_grad]
        results.append((out, torch.autograd.grad(loss, parameters)))
    # every site of every layer once, but the last layer's cross-attention, whose weights
    # fairseq's decoder returns (its alignment layer) and the fused kernels do not give
    assert fused_calls == [name] * (3 * LAYERS - 1)
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-9, rtol=1e-9)
    for ours, theirs in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(ours, theirs, atol=1e-8, rtol=1e-7)


@pytest.mark.parametrize("name", FUSED)
def test_incremental_decoding_equals_the_full_pass_and_the_unfused_model(synthetic_bin, name,
                                                                         fused_calls):
    task, fused, plain = pair(synthetic_bin, name)
    for model in (fused, plain):  # as fairseq-generate prepares it: no weights but the last's
        model.make_generation_fast_(need_attn=False)
    sample = batch(task, size=3)
    for field in ("prev_output_tokens",):  # the first STEPS steps (the interpreter is slow)
        sample["net_input"][field] = sample["net_input"][field][:, :STEPS]
    real = sample["target"][:, :STEPS].ne(task.target_dictionary.pad())
    with torch.no_grad():
        full = fused(**net_input(sample))[0]
        fused_calls.clear()
        incremental, attention = decode_incrementally(fused, sample)
        reference, reference_attention = decode_incrementally(plain, sample)
    # the encoder's layers, then per step each layer's self-attention and the
    # cross-attention of all but the last layer, whose weights the decoder returns
    assert fused_calls == [name] * (LAYERS + (2 * LAYERS - 1) * STEPS)
    torch.testing.assert_close(incremental[real], full[real], atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(incremental, reference, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(attention, reference_attention, atol=1e-9, rtol=1e-9)


def test_beam_search_finds_the_unfused_models_hypotheses(synthetic_bin, fused_calls):
    """Beam search reorders the cache the fused path writes (fairseq's layout)."""
    task, fused, plain = pair(synthetic_bin, "entmax_alpha")
    sample = batch(task, size=2)
    found = []
    for model in (fused.eval(), plain.eval()):
        generator = SequenceGenerator([model], task.target_dictionary, beam_size=3,
                                      max_len_a=0, max_len_b=5, normalize_scores=False)
        with torch.no_grad():
            found.append(generator.generate([model], sample))
    assert fused_calls
    for ours, theirs in zip(*found):
        for a, b in zip(ours, theirs):
            assert torch.equal(a["tokens"], b["tokens"])
            torch.testing.assert_close(a["positional_scores"], b["positional_scores"],
                                       atol=1e-9, rtol=1e-9)


def test_weights_dropout_and_long_rows_take_the_unfused_path(synthetic_bin, fused_calls,
                                                             monkeypatch):
    task, fused, _ = pair(synthetic_bin, "entmax15", "--attention-dropout", "0.1")
    sample = batch(task, size=2)
    fused.train()(**net_input(sample))                    # attention dropout on: unfused
    assert fused_calls == []
    fused.eval()
    with torch.no_grad():
        fused(**net_input(sample))                        # dropout off in evaluation,
        assert len(fused_calls) == 2 * LAYERS             # every cross-attention's weights
        fused_calls.clear()                               # wanted until
        fused.make_generation_fast_(need_attn=False)      # fairseq-generate's preparation
        fused(**net_input(sample))
        assert len(fused_calls) == 3 * LAYERS - 1         # but the alignment layer's
        fused_calls.clear()
        monkeypatch.setattr(multihead_attention, "MAX_KEYS", 2)
        fused(**net_input(sample))
    assert fused_calls == []


@pytest.mark.parametrize("name", ["entmax_alpha", "topk"])
def test_keys_shared_across_beams_and_padding(name, fused_calls):
    """fairseq may keep one copy of the encoder states per sentence for all its beam
    hypotheses: the fused path attends with them as the unfused one does, padding too."""
    torch.manual_seed(0)
    normalizer = build_normalizer(name, 4, NormalizerOptions(topk=2))
    modules = [SparseMultiheadAttention(16, 4, encoder_decoder_attention=True,
                                        normalizer=normalizer, attn_impl=impl).double().eval()
               for impl in ("triton", "torch")]
    modules[1].load_state_dict(modules[0].state_dict())
    query = torch.randn(3, 4, 16, dtype=torch.float64)   # 3 steps, 2 sentences x 2 beams
    keys = torch.randn(5, 2, 16, dtype=torch.float64)    # one copy per sentence
    padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    fused, plain = (module(query, keys, keys, key_padding_mask=padding, static_kv=True,
                           need_weights=False)[0] for module in modules)
    assert fused_calls == [name]
    torch.testing.assert_close(fused, plain, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("site,most", [
    ("decoder_self", 21),    # 3 projections, scaling, 2 cache appends, 1 fused, out: 8 launch
    ("decoder_cross", 17),   # 1 projection, scaling, the beams' queries, 1 fused, out
])
@pytest.mark.parametrize("name", ["softmax", "entmax15"])
def test_a_decoding_steps_attention_dispatches_less_than_fairseqs(site, most, name,
                                                                 monkeypatch):
    """One fused launch per attention call of a decoding step, nothing read back, and
    fewer operations than fairseq's own softmax attention dispatches for the same step."""
    cross = site == "decoder_cross"
    kind = dict(encoder_decoder_attention=True) if cross else dict(self_attention=True)
    ours = SparseMultiheadAttention(64, 4, normalizer=build_normalizer(name, 4),
                                    attn_impl="triton", **kind).eval()
    theirs = MultiheadAttention(64, 4, **kind).eval()
    kernels, counts = fused_attention._kernels(), []
    for module in (ours, theirs):
        torch.manual_seed(0)
        step = torch.randn(1, 6, 64)                          # 3 sentences x 2 beams
        source = torch.randn(9, 3, 64) if cross else step     # one copy per sentence
        state = {}
        with torch.inference_mode():
            for _ in range(1 if cross else 3):                # the cache holds 3 keys
                module(step, source, source, incremental_state=state, static_kv=cross,
                       need_weights=False)
            ops = Ops()
            monkeypatch.setattr(fused_attention, "_kernels", ops.kernels(kernels))
            with ops:
                module(step, source, source, incremental_state=state, static_kv=cross,
                       need_weights=False)
        counts.append(ops.names)
    fused, fairseq = counts
    assert fused.count("fused kernel") == 1, fused
    assert len(fused) <= most < len(fairseq), (fused, fairseq)
    assert not {"aten.any", "aten.is_nonzero", "aten._local_scalar_dense"} & set(fused), fused
