"""Attention in one call (``functional.attention``): the fused Triton kernels, run under
Triton's interpreter on CPU tensors (``tests/conftest.py`` sets ``TRITON_INTERPRET=1``),
give the eager path's output and gradients (q, k, v and a per-head alpha) for every kind,
with padding masks, causal masks, query and key lengths that differ, a decoding step's one
query, head dims that are not powers of two, float64, float32 and float16; rows with every
key masked give zeros and rows with a NaN NaN; bad arguments are one line. With
``TRITON_INTERPRET=0`` on a machine with a GPU the same tests run the kernels on CUDA."""

import math
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_attn_plugin import functional
from sparse_attn_plugin.errors import SettingsError
from sparse_attn_plugin.functional import eager_attention
from sparse_attn_plugin.normalizers.fused_attention import KINDS, MAX_KEYS

pytestmark = pytest.mark.requires("triton")

DEVICE = ("cuda" if os.environ.get("TRITON_INTERPRET") == "0" and torch.cuda.is_available()
          else "cpu")
#: Each kind's own argument.
OPTIONS = {"softmax": {}, "sparsemax": {}, "entmax15": {}, "entmax_alpha": {"alpha": 1.3},
           "topk": {"k_top": 3}}
ATOL = {torch.float64: 1e-12, torch.float32: 2e-5, torch.float16: 4e-3}


def inputs(batch=2, heads=2, len_q=5, len_k=7, dim=16, value_dim=8, dtype=torch.float64,
           seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, length, width, generator=generator, dtype=dtype)
            for length, width in ((len_q, dim), (len_k, dim), (len_k, value_dim))]


def both(q, k, v, kind, options, **masks):
    """The fused output and gradients (upstream ``linspace``) and the eager ones, for
    ``q, k, v`` and, if a tensor, alpha."""
    results = []
    for fused in (True, False):
        leaves = [x.detach().to(DEVICE).requires_grad_() for x in (q, k, v)]
        given = dict(options)
        if isinstance(given.get("alpha"), torch.Tensor):
            given["alpha"] = given["alpha"].detach().to(DEVICE).requires_grad_()
            leaves.append(given["alpha"])
        moved = {name: (m.to(DEVICE) if torch.is_tensor(m) else m) for name, m in masks.items()}
        if fused:
            out = functional.attention(*leaves[:3], kind, impl="triton", **given, **moved)
        else:
            out = eager_attention(*[x.double() for x in leaves[:3]], kind, **{
                name: (value.double() if torch.is_tensor(value) else value)
                for name, value in given.items()}, **moved)
        upstream = torch.linspace(-1, 1, out.numel(), dtype=out.dtype,
                                  device=out.device).view_as(out)
        results.append([t.cpu() for t in (out, *torch.autograd.grad(out, leaves, upstream))])
    return results


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_the_kernels_give_the_eager_output_and_gradients(kind, causal):
    q, k, v = inputs()
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[1, -3:] = True
    fused, eager = both(q, k, v, kind, OPTIONS[kind], key_padding_mask=mask, causal=causal)
    for got, expected in zip(fused, eager):
        torch.testing.assert_close(got, expected, atol=ATOL[torch.float64], rtol=0)


def test_a_per_head_alpha_gets_its_gradient():
    q, k, v = inputs(heads=3)
    alpha = torch.tensor([1.2, 1.5, 1.9], dtype=torch.float64).view(3, 1, 1)
    fused, eager = both(q, k, v, "entmax_alpha", {"alpha": alpha}, causal=True)
    assert fused[-1].shape == (3, 1, 1)
    for got, expected in zip(fused, eager):
        torch.testing.assert_close(got, expected, atol=1e-11, rtol=0)


@settings(derandomize=True, database=None, deadline=None, max_examples=25)
@given(st.sampled_from(list(KINDS)), st.integers(1, 40), st.integers(1, 70),
       st.sampled_from([8, 20, 32]), st.sampled_from([torch.float64, torch.float32,
                                                      torch.float16]),
       st.booleans(), st.booleans(), st.integers(0, 2 ** 16))
def test_shapes_dtypes_and_masks_agree_with_the_eager_path(kind, len_q, len_k, dim, dtype,
                                                          causal, padded, seed):
    """Any lengths (a decoding step's single query, keys past the block size), head dims
    that are not powers of two, three dtypes, with and without masks: the fused output
    and gradients equal the float64 eager ones to the dtype's precision (half: its
    rounding of the inputs and the product)."""
    q, k, v = inputs(len_q=len_q, len_k=len_k, dim=dim, dtype=dtype, seed=seed)
    masks = {"causal": causal}
    if padded:
        mask = torch.rand(2, len_k, generator=torch.Generator().manual_seed(seed)) < 0.3
        masks["key_padding_mask"] = mask
    fused, eager = both(q, k, v, kind, OPTIONS[kind], **masks)
    scale = max(1.0, max(t.abs().max().item() for t in eager))
    for got, expected in zip(fused, eager):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), expected.double(), atol=ATOL[dtype] * scale,
                                   rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_masked_and_non_finite_rows_follow_the_contract(kind):
    """A query with every key masked (causal and padding together) gets zeros and a zero
    gradient; a NaN in one query makes that query's output NaN and leaves the others."""
    q, k, v = inputs(len_q=3, len_k=3)
    mask = torch.tensor([[False, False, False], [True, False, False]])
    out = functional.attention(q, k, v, kind, impl="triton", key_padding_mask=mask,
                               causal=True, **OPTIONS[kind])
    assert (out[1, :, 0] == 0).all() and torch.isfinite(out[1, :, 1:]).all()
    q[0, 1, 2, 0] = math.nan
    out = functional.attention(q, k, v, kind, impl="triton", **OPTIONS[kind])
    assert out[0, 1, 2].isnan().all() and torch.isfinite(out[0, 1, :2]).all()
    assert torch.isfinite(out[1]).all()


@pytest.mark.parametrize("arguments, message", [
    (dict(kind="relu"), "kind must be one of softmax, sparsemax, entmax15, entmax_alpha, topk"),
    (dict(kind="entmax_alpha"), "alpha goes with kind='entmax_alpha'"),
    (dict(kind="softmax", alpha=1.5), "alpha goes with kind='entmax_alpha'"),
    (dict(kind="topk"), "k_top goes with kind='topk'"),
    (dict(kind="softmax", key_padding_mask=torch.zeros(2, 6, dtype=torch.bool)),
     "key_padding_mask must be bool (batch, key length) = (2, 7)"),
])
def test_bad_arguments_are_one_line(arguments, message):
    q, k, v = inputs()
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(").replace(
            ")", r"\)")):
        functional.attention(q, k, v, **arguments)


def test_the_eager_path_runs_where_the_kernels_do_not_and_triton_says_why():
    """``auto`` on CPU tensors, more than MAX_KEYS keys, and alpha outside (1, 2] take the
    eager path; ``impl='triton'`` refuses those rows in one line."""
    q, k, v = inputs(len_k=MAX_KEYS + 1, dim=8, value_dim=4)
    torch.testing.assert_close(functional.attention(q, k, v, "sparsemax"),
                               eager_attention(q, k, v, "sparsemax"))
    with pytest.raises(SettingsError, match=f"at most {MAX_KEYS} keys"):
        functional.attention(q, k, v, "sparsemax", impl="triton")
    q, k, v = inputs()
    torch.testing.assert_close(functional.attention(q, k, v, "entmax_alpha", alpha=3.0),
                               eager_attention(q, k, v, "entmax_alpha", alpha=3.0))
