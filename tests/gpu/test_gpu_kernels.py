"""Our Triton kernels (``--attn-impl triton``) and the torch.compile'd ones
(``--attn-impl compiled``), compiled for the CUDA device, against the eager normalisers
(``--attn-impl torch``) on the same CUDA scores: top-k, sparsemax, 1.5-entmax, learned
alpha-entmax (per-head alphas) and alpha-entmax outside (1, 2], scores in float32, float16
and bfloat16, padded keys and a row with every key masked, rows around the kernels' block
sizes; and the default ``auto``, which on a CUDA device is the Triton kernels. (The CPU
tiers check the same kernels under Triton's interpreter and torch.compile's CPU backend:
tests/unit/test_fused_triton.py, test_compiled.py, test_entmax_general.py.)"""

import pytest
import torch

from sparse_attn_plugin.normalizers import (
    COMPILED,
    NormalizerOptions,
    build_normalizer,
    fused_triton,
)

from helpers.scores import NEG_INF

#: fairseq's float32 and half precisions, and float64, where the comparisons are exact.
FAIRSEQ_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPES = [*FAIRSEQ_DTYPES, torch.float64]
#: (batch, heads, queries, keys): a decoder step's (one query) and a long source's
#: among them; every key row is padded past its sentence's length.
SHAPES = [(8, 4, 37, 41), (4, 8, 1, 300), (2, 4, 64, 1500)]
#: The weights of both impls come from the same float32 scores (the base class upcasts
#: half precision): measured within 6e-7 on an H100, 9e-7 under Triton's interpreter.
WEIGHTS_ATOL = {torch.float64: 1e-12, **dict.fromkeys(FAIRSEQ_DTYPES, 2e-6)}
#: The scores' gradients, relative to their largest entry: float32 measured within 3e-4
#: on an H100 (2.3e-4 under the interpreter); a gradient for float16 or bfloat16 scores is
#: rounded to that type on top (torch.testing's own tolerances for those types).
SCORES_GRAD_RTOL = {torch.float64: 1e-9, torch.float32: 1e-3, torch.float16: 2e-3,
                    torch.bfloat16: 1.6e-2}
#: The learned alphas' gradients. Each is a sum over a head's rows that cancels: in
#: float32 either impl is off the float64 value by about 1% of the largest entry, more
#: with more rows (measured under the interpreter), so there the check is of the size and
#: sign, and float64 checks the value: (relative to the largest entry, absolute per row
#: of the head summed).
ALPHA_GRAD_TOL = {torch.float64: (1e-9, 0.0), **dict.fromkeys(FAIRSEQ_DTYPES, (2e-2, 1e-7))}

#: Widths around the kernels' power-of-two row blocks (at least 16) and their limit.
WIDTHS = [1, 15, 16, 17, 63, 64, 65, 1023, 1024, 1025, fused_triton.MAX_COLS - 1,
          fused_triton.MAX_COLS]
#: Query rows per head in :func:`test_rows_around_the_block_sizes_match_the_eager_ones`:
#: more than the 64 rows one program holds at most, the last block part padding.
BLOCK_ROWS = 67


def cuda_scores(shape, dtype, seed=0):
    """Scores on the CUDA device: each sentence's keys past its length (drawn) are ``-inf``,
    as fairseq's key padding mask makes them, with some more ``-inf`` (future masks),
    and the first row has every key masked."""
    batch, _, _, keys = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    scores = torch.randn(shape, generator=gen, device="cuda") * 2
    lengths = torch.randint(1, keys + 1, (batch,), generator=gen, device="cuda")
    lengths[-1] = keys
    padded = torch.arange(keys, device="cuda") >= lengths[:, None]
    scores = scores.masked_fill(padded[:, None, None, :], NEG_INF)
    more = torch.rand(shape, generator=gen, device="cuda") < 0.2
    more[..., 0] = False
    scores = scores.masked_fill(more, NEG_INF)
    scores[0, 0, 0] = NEG_INF
    return scores.to(dtype)


def normalizer(name, heads, impl, dtype=torch.float32):
    """``name`` with ``--attn-impl impl`` on the CUDA device, learned alphas drawn from
    the same seed (every impl gets the same ones), kept float32 (as fairseq's half
    precision does) or made float64 for float64 scores."""
    torch.manual_seed(0)
    options = NormalizerOptions(topk=8, entmax_alpha_init="random", attn_impl=impl)
    module = build_normalizer(name, heads, options).cuda()
    return module.double() if dtype == torch.float64 else module


def weights_and_grads(module, scores):
    """The weights for ``scores`` and the gradients of the scores and of the module's
    parameters (learned alphas) for a fixed upstream gradient."""
    scores = scores.detach().requires_grad_()
    weights = module(scores)
    upstream = torch.linspace(-1, 1, weights.numel(), device="cuda", dtype=weights.dtype)
    params = list(module.parameters())
    return weights, torch.autograd.grad(weights, [scores, *params], upstream.view_as(weights))


def assert_matches_eager(name, impl, scores):
    """``name`` by ``impl`` gives the eager weights and gradients for ``scores``; the row
    with every key masked gets zero weights and finite gradients."""
    heads, dtype = scores.size(1), scores.dtype
    weights, grads = weights_and_grads(normalizer(name, heads, impl, dtype), scores)
    expected, expected_grads = weights_and_grads(normalizer(name, heads, "torch", dtype), scores)
    assert weights.dtype == expected.dtype == torch.promote_types(scores.dtype, torch.float32)
    assert (weights[0, 0, 0] == 0).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(weights, expected, atol=WEIGHTS_ATOL[dtype], rtol=0)
    assert len(grads) == len(expected_grads) == (2 if name == "entmax_alpha" else 1)
    rows = scores[:, 0, :, 0].numel()  # per head
    alpha_rtol, atol_per_row = ALPHA_GRAD_TOL[dtype]
    tolerances = (SCORES_GRAD_RTOL[dtype], 0.0), (alpha_rtol, atol_per_row * rows)
    for ours, eager, (rtol, atol) in zip(grads, expected_grads, tolerances):
        assert ours.dtype == eager.dtype and torch.isfinite(ours).all()
        worst = (ours.double() - eager.double()).abs().max().item()
        largest = eager.double().abs().max().item()
        assert worst <= rtol * largest + atol, f"off by {worst}; the largest is {largest}"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: "x".join(map(str, shape)))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", COMPILED)
@pytest.mark.parametrize("impl", ["triton", "compiled"])
def test_kernels_give_the_eager_weights_and_gradients(impl, name, dtype, shape):
    assert_matches_eager(name, impl, cuda_scores(shape, dtype, seed=shape[-1]))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", COMPILED)
def test_rows_around_the_block_sizes_match_the_eager_ones(name, width):
    """Triton: rows of every width around a power of two, up to the longest row a program
    holds; three heads of :data:`BLOCK_ROWS` rows each."""
    assert_matches_eager(name, "triton", cuda_scores((1, 3, BLOCK_ROWS, width), torch.float32,
                                                     seed=width))


def test_the_kernels_that_ran_were_compiled_not_interpreted():
    """The tier sets ``TRITON_INTERPRET=0`` before its first test (tests/gpu/conftest.py):
    our kernels are compiled ``JITFunction``\\ s, not the interpreter's stand-ins."""
    from triton.runtime.jit import JITFunction

    fused_triton.sparsemax_triton(cuda_scores((2, 2, 3, 5), torch.float32))
    from sparse_attn_plugin.normalizers import triton_kernels

    assert not fused_triton.interpreting()
    for kernel in (triton_kernels.entmax_forward, triton_kernels.topk_forward,
                   triton_kernels.backward, triton_kernels.entmax_any_forward):
        assert isinstance(kernel, JITFunction), type(kernel)


@pytest.mark.parametrize("dtype", FAIRSEQ_DTYPES, ids=str)
def test_auto_is_the_triton_kernels_on_a_cuda_device(dtype):
    """``--attn-impl auto`` (the default) resolves to ``triton`` for CUDA scores whose rows
    fit a program (``torch`` for the same scores on the CPU) and gives the Triton
    normalisers' weights bit for bit."""
    from sparse_attn_plugin.normalizers.dispatch import resolve

    scores = cuda_scores(SHAPES[0], dtype)
    assert resolve("auto", scores) == "triton"
    assert resolve("auto", scores.cpu()) == "torch"
    widest = cuda_scores((1, 1, 2, fused_triton.MAX_COLS), dtype)
    assert resolve("auto", widest) == "triton"
    for name in COMPILED:
        heads = scores.size(1)
        auto = normalizer(name, heads, "auto")(scores)
        assert torch.equal(auto, normalizer(name, heads, "triton")(scores)), name


@pytest.mark.parametrize("dtype", FAIRSEQ_DTYPES, ids=str)
@pytest.mark.parametrize("name", COMPILED)
@pytest.mark.parametrize("impl", ["triton", "compiled"])
def test_a_nan_or_inf_score_gives_the_eager_nan_row(impl, name, dtype):
    """The non-finite contract (docs/library.md) on the device: a NaN or ``+inf`` score
    makes its row NaN, weights and scores' gradient, as the eager path does; every other
    row is what the eager path gives for the same scores."""
    scores = cuda_scores(SHAPES[0], dtype)
    scores[1, 0, 2, 3] = float("nan")
    scores[2, 1, 5, 0] = float("inf")
    heads = scores.size(1)
    weights, grads = weights_and_grads(normalizer(name, heads, impl), scores)
    expected, expected_grads = weights_and_grads(normalizer(name, heads, "torch"), scores)
    bad = torch.zeros(scores.shape[:-1], dtype=torch.bool, device="cuda")
    bad[1, 0, 2] = bad[2, 1, 5] = True
    for ours, eager in ((weights, expected), (grads[0], expected_grads[0])):
        assert ours[bad].isnan().all() and eager[bad].isnan().all()
        assert torch.isfinite(ours[~bad]).all()
    torch.testing.assert_close(weights[~bad], expected[~bad], atol=WEIGHTS_ATOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("impl", ["triton", "compiled"])
def test_alpha_outside_1_2_gives_the_eager_weights_and_gradients(impl, dtype):
    """alpha-entmax at any alpha > 0 (normalizers/entmax_general.py): the bracketed Triton
    kernel and the compiled steps against the eager solver on the device, one alpha per
    head across the range (below 1, 1 itself, above 2), padded keys and a row with every
    key masked; the weights solved in float64 whatever the dtype."""
    from sparse_attn_plugin import functional

    scores = cuda_scores(SHAPES[0], dtype)
    alphas = torch.tensor([0.4, 1.0, 2.5, 6.0], dtype=torch.float64,
                          device="cuda").view(1, -1, 1, 1).requires_grad_()
    results = {}
    for which in (impl, "torch"):
        x = scores.detach().clone().requires_grad_()
        a = alphas.detach().clone().requires_grad_()
        weights = functional.entmax_alpha(x, a, impl=which)
        weights.backward(torch.randn(weights.shape, generator=torch.Generator(
            device="cuda").manual_seed(0), device="cuda", dtype=weights.dtype))
        results[which] = (weights, x.grad, a.grad)
    for ours, eager in zip(results[impl], results["torch"]):
        torch.testing.assert_close(ours, eager, atol=1e-6, rtol=1e-5, equal_nan=True)
