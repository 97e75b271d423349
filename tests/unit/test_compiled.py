"""The compiled kernels (``--attn-impl compiled``) against the eager ones: same weights,
same gradients, and new batch sizes, sentence lengths and values of k reusing the compiled
code."""

import itertools

import pytest
import torch
from torch._dynamo.utils import counters

from sparse_attn_plugin.normalizers import NormalizerOptions, build_normalizer
from sparse_attn_plugin.normalizers import entmax_newton as newton
from sparse_attn_plugin.normalizers.entmax_newton import entmax_newton
from sparse_attn_plugin.normalizers.topk import topk_softmax

from helpers.scores import NEG_INF, assert_empty_rows_give_zeros, candidates, random_scores

# Compiling takes seconds per kernel: one worker compiles them all, once.
pytestmark = [pytest.mark.xdist_group("compiled"), pytest.mark.slow]


def grads(fn, scores, *params):
    scores = scores.detach().requires_grad_()
    out = fn(scores)
    upstream = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return (out, *torch.autograd.grad(out, [scores, *params], upstream))


@pytest.mark.parametrize("alpha", [2.0, 1.5, 1.3])
def test_entmax_compiled_equals_eager(alpha):
    scores = random_scores(shape=(3, 2, 5, 9), seed=1)
    for ours, eager in zip(grads(lambda s: entmax_newton(s, alpha, impl="compiled"), scores),
                           grads(lambda s: entmax_newton(s, alpha), scores)):
        torch.testing.assert_close(ours, eager, atol=1e-12, rtol=0)


def test_rows_the_fused_first_call_leaves_unsolved_are_solved_after_it(monkeypatch):
    scores = random_scores(shape=(3, 2, 5, 9), seed=4)
    monkeypatch.setattr(newton, "FIRST_STEPS", 1)
    went_on = []
    threshold = newton.entmax_threshold
    monkeypatch.setattr(newton, "entmax_threshold",
                        lambda *args: went_on.append(args[-1]) or threshold(*args))
    fused = grads(lambda s: entmax_newton(s, 1.3, impl="compiled"), scores)
    assert went_on and went_on[0] is not None           # went on from the first call's state
    for ours, eager in zip(fused, grads(lambda s: entmax_newton(s, 1.3), scores)):
        torch.testing.assert_close(ours, eager, atol=1e-12, rtol=0)


def test_learned_alpha_compiled_equals_eager_with_its_gradient():
    scores = random_scores(shape=(3, 2, 5, 9), seed=2)
    compiled = build_normalizer("entmax_alpha", 2, NormalizerOptions(attn_impl="compiled"))
    eager = build_normalizer("entmax_alpha", 2, NormalizerOptions(attn_impl="torch"))
    for module in (compiled, eager):
        module.double()
        with torch.no_grad():
            module.alpha_logit.copy_(torch.tensor([-1.0, 2.0]))
    for ours, theirs in zip(grads(compiled, scores, compiled.alpha_logit),
                            grads(eager, scores, eager.alpha_logit)):
        torch.testing.assert_close(ours, theirs, atol=1e-11, rtol=0)


def test_topk_compiled_equals_eager_with_ties_and_short_rows():
    scores = random_scores(shape=(3, 2, 5, 9), seed=3)
    for ours, eager in zip(grads(lambda s: topk_softmax(s, 3, "compiled"), scores),
                           grads(lambda s: topk_softmax(s, 3), scores)):
        torch.testing.assert_close(ours, eager, atol=1e-12, rtol=0)
    tied = scores.clone()
    tied[0, 0, 0] = torch.tensor([2.0, 2.0, 2.0, 2.0, 1.0, 0.0, NEG_INF, 1.0, 1.0])
    tied[0, 0, 1] = torch.tensor([1.0, 2.0, 2.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0])
    probs = topk_softmax(tied, 3, "compiled")
    torch.testing.assert_close(probs, topk_softmax(tied, 3), atol=1e-12, rtol=0)
    assert (probs[0, 0, 0, :4] > 0).all() and (probs[0, 0, 0, 4:] == 0).all()
    assert (probs[0, 0, 1, :3] > 0).all() and (probs[0, 0, 1, 3:] == 0).all()


def test_new_lengths_and_batch_sizes_reuse_the_compiled_kernels():
    def run(batch, length):
        scores = torch.randn(batch, 2, length, length, dtype=torch.float64)
        grads(lambda s: entmax_newton(s, 1.5, impl="compiled"), scores)
        grads(lambda s: topk_softmax(s, 3, "compiled"), scores)

    run(3, 7)
    graphs = counters["stats"]["unique_graphs"]
    run(5, 11)
    run(2, 13)
    assert counters["stats"]["unique_graphs"] == graphs


ALPHAS = [2.0, 1.5, 1.3, 1.7, "per head"]
#: The first as many rows as keys (4 x 4): traced with duck shapes, a graph for N == S.
SHAPES = [(2, 2, 1, 4), (2, 2, 5, 5), (3, 2, 3, 7), (4, 2, 1, 9), (1, 2, 6, 4)]


def run_kinds(dtype, mode, alphas=ALPHAS, shapes=SHAPES, layouts=True):
    """alpha-entmax (``alphas``: numbers, or learned ones per head) and top-k compiled,
    forward (and backward where ``mode`` is ``grad``), on scores of ``shapes`` and
    ``dtype`` (with ``layouts``, also transposed and strided), in ``mode``: ``grad``,
    ``no_grad`` (fairseq-generate) or ``inference``."""
    context = {"grad": torch.enable_grad, "no_grad": torch.no_grad,
               "inference": torch.inference_mode}[mode]
    for alpha, shape in itertools.product(alphas, shapes):
        if alpha == "per head":
            alpha = torch.rand(1, 2, 1, 1, dtype=dtype).add(1.1).requires_grad_()
        with context():  # scores made in the mode, as a model's are (inference tensors)
            scores = torch.randn(*shape, dtype=dtype, requires_grad=mode == "grad")
            strided = scores.repeat_interleave(2, -1)[..., ::2]
            for layout in (scores, scores.transpose(-1, -2), strided)[:3 if layouts else 1]:
                for probs in (entmax_newton(layout, alpha, impl="compiled"),
                              topk_softmax(layout, min(3, layout.size(-1)), "compiled")):
                    if mode == "grad":
                        probs.backward(torch.randn_like(probs))


def test_every_alpha_and_shape_shares_one_graph_per_dtype_and_mode_under_dynamos_limit():
    """What made ``_first_steps`` hit dynamo's recompile limit on torch 2.11 (a graph per
    Python-float alpha) and what else could (views, transposes, a square first shape, grad
    flags): once sparsemax, 1.5-entmax, one other number, the per-head alphas and one
    square shape have run, no other alpha, shape or layout compiles anything, and no dtype
    or mode reaches the limit (dynamo's default, 8 per function: nothing here raises it)."""
    assert torch._dynamo.config.recompile_limit == 8
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for dtype, mode in itertools.product((torch.float64, torch.float32),
                                             ("grad", "no_grad", "inference")):
            run_kinds(dtype, mode, [2.0, 1.5, 1.3, "per head"], SHAPES[:1], layouts=False)
            graphs = counters["stats"]["unique_graphs"]
            run_kinds(dtype, mode)
            assert counters["stats"]["unique_graphs"] == graphs, (dtype, mode)


@pytest.mark.parametrize("fn,params", candidates("torch") + candidates("compiled"))
def test_every_candidate_zeroes_rows_with_every_key_masked(fn, params):
    """The Newton solver and the top-k kernels zero such rows themselves (no guard around
    them); the entmax package's sort is guarded."""
    assert_empty_rows_give_zeros(fn, params)


def test_rows_solved_after_the_fused_first_call_keep_empty_rows_zero(monkeypatch):
    monkeypatch.setattr(newton, "FIRST_STEPS", 1)
    alpha = torch.tensor([1.2, 1.5, 1.9], dtype=torch.float64).view(1, 3, 1, 1)
    assert_empty_rows_give_zeros(lambda s, a: entmax_newton(s, a, impl="compiled"), [alpha])
