"""Kernel multi-head attention (Tsai et al. 2019): the exponential kernel with direct-sum
PE is fairseq's attention; symmetric variants share weights; incremental decoding equals
the full forward pass for every PE integration, in self- and cross-attention."""

import pytest
import torch
from fairseq.modules import MultiheadAttention

from sparse_attn_plugin.modules.kernel_attention import (
    PE_INTEGRATIONS,
    KernelMultiheadAttention,
    token_positions,
)
from sparse_attn_plugin.normalizers.kernels import KERNELS, sinusoid

DIM, HEADS = 16, 4


def module(**kwargs):
    torch.manual_seed(0)
    return KernelMultiheadAttention(DIM, HEADS, **kwargs).eval()


def test_exponential_direct_sum_with_value_pe_is_scaled_dot_product_attention():
    kernel = module(kernel="exponential", pe_integration="direct_sum", value_pe=True)
    reference = MultiheadAttention(DIM, HEADS, self_attention=True).eval()
    reference.load_state_dict(kernel.state_dict())
    x = torch.randn(5, 2, DIM)
    padding = torch.tensor([[True, False, False, False, False], [False] * 5])   # left pad
    positions = token_positions(padding, 5, 2, x.device)
    with_pe = x + sinusoid(positions, DIM).transpose(0, 1)
    ours, ours_weights = kernel(x, x, x, key_padding_mask=padding)
    theirs, their_weights = reference(with_pe, with_pe, with_pe, key_padding_mask=padding)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours_weights, their_weights)


def test_positions_count_tokens_not_padded_columns():
    padding = torch.tensor([[True, True, False, False], [False, False, False, True]])
    assert token_positions(padding, 4, 2, "cpu").tolist() == [[0, 0, 0, 1], [0, 1, 2, 0]]


def projection_weights(m):
    return sum(p.numel() for name, p in m.named_parameters()
               if name.split(".")[0] in ("q_proj", "k_proj", "r_proj", "t_proj"))


def test_symmetric_variants_share_their_weights():
    asymmetric, symmetric = module(), module(symmetric=True)
    assert symmetric.k_proj is None
    assert projection_weights(asymmetric) - projection_weights(symmetric) == DIM * DIM + DIM
    # the proposal (W_F, W_T) against Transformer-XL (W_q, W_k, W_R): a third fewer
    xl, sym = module(pe_integration="product_xl"), module(pe_integration="product_sym")
    weights = {name: sum(p.numel() for n, p in m.named_parameters()
                         if n.endswith("weight") and n.split(".")[0] != "v_proj"
                         and n.split(".")[0] != "out_proj")
               for name, m in (("xl", xl), ("sym", sym))}
    assert weights == {"xl": 3 * DIM * DIM, "sym": 2 * DIM * DIM}


def incremental(attention, x, encoder_out=None, padding=None):
    state, outputs = {}, []
    for t in range(x.size(0)):
        step = x[t:t + 1]
        if encoder_out is None:
            out, _ = attention(step, step, step, incremental_state=state)
        else:
            out, _ = attention(step, encoder_out, encoder_out, key_padding_mask=padding,
                               incremental_state=state, static_kv=True)
        outputs.append(out)
    return torch.cat(outputs, 0)


@pytest.mark.parametrize("pe", PE_INTEGRATIONS)
@pytest.mark.parametrize("kernel", ["exponential", "polynomial"])
def test_incremental_equals_full_self_attention(pe, kernel):
    attention = module(kernel=kernel, pe_integration=pe, value_pe=pe != "lookup")
    x = torch.randn(6, 3, DIM)
    future = torch.triu(torch.full((6, 6), float("-inf")), 1)
    full, _ = attention(x, x, x, attn_mask=future)
    torch.testing.assert_close(incremental(attention, x), full)


@pytest.mark.parametrize("pe", PE_INTEGRATIONS)
def test_incremental_equals_full_cross_attention(pe):
    attention = module(pe_integration=pe)
    x, encoder_out = torch.randn(4, 2, DIM), torch.randn(5, 2, DIM)
    padding = torch.tensor([[True, False, False, False, False], [False] * 4 + [True]])
    full, _ = attention(x, encoder_out, encoder_out, key_padding_mask=padding, static_kv=True)
    torch.testing.assert_close(incremental(attention, x, encoder_out, padding), full)


@pytest.mark.parametrize("kind", KERNELS)
def test_every_kernel_gives_finite_outputs_and_gradients(kind):
    attention = module(kernel=kind, pe_integration="product_sym").train()
    x = torch.randn(5, 2, DIM, requires_grad=True)
    out, _ = attention(x, x, x)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


def test_reorder_follows_the_beams():
    attention = module(pe_integration="product_xl")
    x = torch.randn(3, 2, DIM)
    state = {}
    for t in range(2):
        attention(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state)
    swapped = {}
    for t in range(2):
        attention(x[t:t + 1].flip(1), x[t:t + 1].flip(1), x[t:t + 1].flip(1),
                  incremental_state=swapped)
    attention.reorder_incremental_state(state, torch.tensor([1, 0]))
    after, _ = attention(x[2:3].flip(1), x[2:3].flip(1), x[2:3].flip(1), incremental_state=state)
    expected, _ = attention(x[2:3].flip(1), x[2:3].flip(1), x[2:3].flip(1),
                            incremental_state=swapped)
    torch.testing.assert_close(after, expected)


@pytest.mark.parametrize("pe", PE_INTEGRATIONS)
def test_padding_does_not_move_positions(pe):
    """A left-padded sentence attends (and is attended) as it does unpadded."""
    attention = module(pe_integration=pe)
    sentence, queries = torch.randn(4, 1, DIM), torch.randn(3, 1, DIM)
    padded = torch.cat([torch.randn(2, 1, DIM), sentence], 0)
    mask = torch.tensor([[True, True, False, False, False, False]])
    self_plain, _ = attention(sentence, sentence, sentence)
    self_padded, _ = attention(padded, padded, padded, key_padding_mask=mask)
    torch.testing.assert_close(self_padded[2:], self_plain)
    cross_plain, _ = attention(queries, sentence, sentence, static_kv=True)
    cross_padded, _ = attention(queries, padded, padded, key_padding_mask=mask, static_kv=True)
    torch.testing.assert_close(cross_padded, cross_plain)


def test_cross_attention_direct_sum_adds_each_sides_positions():
    kernel = module(kernel="exponential", pe_integration="direct_sum", value_pe=True)
    reference = MultiheadAttention(DIM, HEADS, encoder_decoder_attention=True).eval()
    reference.load_state_dict(kernel.state_dict())
    queries, keys = torch.randn(3, 2, DIM), torch.randn(5, 2, DIM)
    padding = torch.tensor([[True, False, False, False, False], [False] * 5])
    q_t = sinusoid(token_positions(None, 3, 2, "cpu"), DIM).transpose(0, 1)
    k_t = sinusoid(token_positions(padding, 5, 2, "cpu"), DIM).transpose(0, 1)
    ours, _ = kernel(queries, keys, keys, key_padding_mask=padding, static_kv=True)
    theirs, _ = reference(queries + q_t, keys + k_t, keys + k_t, key_padding_mask=padding,
                          static_kv=True)
    torch.testing.assert_close(ours, theirs)
