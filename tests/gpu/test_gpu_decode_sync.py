"""No host-device synchronisation in a decoding step's attention on the CUDA device.

Every kind of attention that runs in ``SparseMultiheadAttention`` (every normaliser but the
constrained ones, which run in ``ConstrainedMultiheadAttention`` with fertilities), at the
default ``--attn-impl`` and, for those with kernels, eager (``torch``), is called as
fairseq's beam search calls it: every decoder layer's self- then cross-attention, one
target position a step with an incremental state, the cache reordered between beams after
each step, in eval mode, with and without cross-attention weights (``--print-alignment``).
The checked decode runs under ``torch.cuda.set_sync_debug_mode("error")``, where the
synchronising calls torch flags (``.item()``, ``bool(tensor)``, ``nonzero``, copies to
the host, stream synchronisation) raise. An identical decode runs first, unchecked: first
calls (Triton's compile, cuBLAS's set-up) are not part of a step's path."""

from contextlib import contextmanager

import pytest
import torch

from sparse_attn_plugin.normalizers import COMPILED, CONSTRAINED, NAMES, build_normalizer

from helpers.models import build

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: Every normaliser ``SparseMultiheadAttention`` takes, hard retrieval among them.
KINDS = [name for name in NAMES if name not in CONSTRAINED]
CASES = [(name, "auto") for name in KINDS] + [(name, "torch") for name in KINDS
                                               if name in COMPILED]
SENTENCES, BEAM, SOURCE, STEPS = 2, 3, 7, 4


@contextmanager
def no_sync():
    """Inside, a synchronising CUDA call raises; the previous mode is restored after."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def test_the_guard_raises_on_a_synchronisation():
    """The check below means something on this torch: a host read of a device value
    raises inside the guard, and the mode is back to its default after."""
    flag = torch.ones(2, device="cuda")
    with pytest.raises(RuntimeError), no_sync():
        flag.sum().item()
    assert torch.cuda.get_sync_debug_mode() == 0


def decoding_inputs(embed_dim, dtype):
    """On the device, before any check: the encoder's states for ``SENTENCES`` sentences
    times ``BEAM`` hypotheses (the first sentence's two last positions padding), and per
    step a query and a reordering of the hypotheses within each sentence."""
    gen = torch.Generator().manual_seed(0)
    rows = SENTENCES * BEAM
    padding = torch.zeros(rows, SOURCE, dtype=torch.bool)
    padding[:BEAM, -2:] = True
    sentence = torch.arange(rows) // BEAM * BEAM
    orders = [sentence + torch.randint(0, BEAM, (rows,), generator=gen) for _ in range(STEPS)]
    queries = [torch.randn(1, rows, embed_dim, generator=gen) for _ in range(STEPS)]
    return {"encoder": torch.randn(SOURCE, rows, embed_dim, generator=gen).to("cuda", dtype),
            "padding": padding.to("cuda"),
            "steps": [(q.to("cuda", dtype), o.to("cuda")) for q, o in zip(queries, orders)]}


def decode(layers, inputs, need_weights):
    """``STEPS`` decoding steps through every layer's self- and cross-attention (as
    fairseq's decoder layer calls them), each followed by the beam search's reordering."""
    state = {}
    for query, order in inputs["steps"]:
        x = query
        for layer in layers:
            x, _ = layer.self_attn(query=x, key=x, value=x, incremental_state=state,
                                   need_weights=False)
            x, _ = layer.encoder_attn(query=x, key=inputs["encoder"], value=inputs["encoder"],
                                      key_padding_mask=inputs["padding"],
                                      incremental_state=state, static_kv=True,
                                      need_weights=need_weights)
        for layer in layers:
            layer.self_attn.reorder_incremental_state(state, order)
            layer.encoder_attn.reorder_incremental_state(state, order)
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("name,impl", CASES)
def test_a_decoding_step_of_every_attention_never_waits_for_the_device(synthetic_bin, name,
                                                                       impl, dtype):
    flags = ["--decoder-self-attn-fn", name, "--decoder-cross-attn-fn", name,
             "--attn-impl", impl, "--topk", "3", "--entmax-alpha-init", "random"]
    _, model = build(synthetic_bin, extra=flags)
    if dtype == torch.float16:
        model.half()                          # as fairseq-generate does: half, then cuda
    model = model.cuda().eval()
    layers = model.decoder.layers
    kind = type(build_normalizer(name, layers[0].self_attn.num_heads))
    assert all(type(attention.normalizer) is kind for layer in layers
               for attention in (layer.self_attn, layer.encoder_attn))
    inputs = decoding_inputs(model.decoder.embed_dim, dtype)
    with torch.no_grad():
        for need_weights in (False, True):
            decode(layers, inputs, need_weights)                 # first calls, unchecked
            with no_sync():
                out = decode(layers, inputs, need_weights)
            assert out.shape == (1, SENTENCES * BEAM, model.decoder.embed_dim)
            assert torch.isfinite(out).all(), f"{name} [{impl}] {dtype}: not finite"
