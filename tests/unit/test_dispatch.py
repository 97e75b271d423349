"""dispatch: which implementation a normaliser runs is a fixed rule of --attn-impl and
the scores' device and size; the default (auto) is Triton's kernels on a CUDA device and
the eager ones elsewhere; nothing is timed, nothing compiled unless asked; the choice
changes speed only."""

import logging
from types import SimpleNamespace

import pytest
import torch

from sparse_attn_plugin.normalizers import (
    COMPILED,
    CONSTRAINED,
    IMPLS,
    NAMES,
    NormalizerOptions,
    build_normalizer,
    dispatch,
    entmax_newton,
    topk,
)
from sparse_attn_plugin.normalizers.dispatch import (
    NEWTON_FROM,
    PARTIAL_COLS,
    PARTIAL_FROM,
    Implementations,
    resolve,
    sort_or_newton,
)
from sparse_attn_plugin.normalizers.entmax_family import (
    ENTMAX15,
    GENERAL,
    SPARSEMAX,
    _entmax_alpha,
)
from sparse_attn_plugin.normalizers.fused_triton import MAX_COLS
from sparse_attn_plugin.normalizers.topk import _topk

KERNELS = {"top-k": _topk(3), "sparsemax": SPARSEMAX, "1.5-entmax": ENTMAX15,
           "alpha-entmax": _entmax_alpha(30)}
#: The further arguments each family's kernels take: learned alpha-entmax's one per head.
ARGS = {"alpha-entmax": (torch.full((1, 4, 1, 1), 1.5),)}


def on_cuda(*shape):
    """A stand-in for CUDA scores of ``shape`` (this machine has no GPU): what the rules
    read of a tensor."""
    numel = torch.Size(shape).numel()
    return SimpleNamespace(is_cuda=True, device=torch.device("cuda"), numel=lambda: numel,
                           size=lambda dim: shape[dim], shape=shape)


@pytest.fixture
def triton_installed(monkeypatch):
    monkeypatch.setattr(dispatch, "have_triton", lambda: True)
    monkeypatch.setattr(dispatch, "_triton_failed", False)


def test_an_explicit_implementation_is_what_runs_on_any_device(triton_installed):
    for impl in ("torch", "compiled", "triton"):
        assert resolve(impl, torch.zeros(2, 3)) == impl == resolve(impl, on_cuda(2, 3))


def test_auto_is_triton_on_a_cuda_device_and_eager_on_a_cpu(triton_installed):
    """Under the tests' TRITON_INTERPRET=1 too: the interpreter is never the default."""
    assert resolve("auto", on_cuda(8, 4, 40, 40)) == "triton"
    assert resolve("auto", on_cuda(8, 4, 1, MAX_COLS)) == "triton"
    assert resolve("auto", torch.zeros(8, 4, 40, 40)) == "torch"


def test_auto_is_eager_where_triton_cannot_take_the_scores(monkeypatch, triton_installed):
    assert resolve("auto", on_cuda(1, 1, 1, MAX_COLS + 1)) == "torch"   # a row too long
    monkeypatch.setattr(dispatch, "_triton_failed", True)               # failed here
    assert resolve("auto", on_cuda(8, 4, 40, 40)) == "torch"
    monkeypatch.setattr(dispatch, "_triton_failed", False)
    monkeypatch.setattr(dispatch, "have_triton", lambda: False)         # not installed
    assert resolve("auto", on_cuda(8, 4, 40, 40)) == "torch"


def test_the_eager_rule_sorts_on_a_gpu_and_for_small_scores_and_solves_large_ones():
    assert NEWTON_FROM == 1 << 14
    assert sort_or_newton(torch.zeros(NEWTON_FROM - 1)) == "sort"
    assert sort_or_newton(torch.zeros(NEWTON_FROM)) == "newton"
    assert sort_or_newton(torch.zeros(32, 4, 40, 40)) == "newton"      # a training batch
    assert sort_or_newton(torch.zeros(40, 4, 1, 10)) == "sort"         # a small decode step


def test_long_rows_of_a_large_call_take_the_partial_sort_on_a_cpu_only():
    """An output layer's rows (thousands of words), not an attention layer's: below either
    bound the rule is as before."""
    vocabulary = torch.zeros(PARTIAL_FROM // PARTIAL_COLS, PARTIAL_COLS)
    assert sort_or_newton(vocabulary) == "partial sort"
    assert sort_or_newton(vocabulary[1:]) == "newton"                   # too few scores
    assert sort_or_newton(torch.zeros(PARTIAL_FROM, 1)) == "newton"    # rows too short
    assert sort_or_newton(on_cuda(256, 8000)) == "sort"
    alpha = _entmax_alpha(30)
    assert alpha.pick("torch", vocabulary, 1.3)[0] == "partial sort"
    assert alpha.pick("torch", vocabulary, torch.tensor(1.3))[0] == "newton"   # per row
    assert alpha.pick("torch", vocabulary[1:], 1.3)[0] == "newton"
    assert GENERAL.pick("auto", vocabulary, 3.0)[0] == "partial sort"
    # above alpha 2 the supports are a few entries, so short rows take it too, on CUDA as
    # well: the threshold solver loses small weights there
    assert GENERAL.pick("torch", torch.zeros(8, 40), 3.0)[0] == "partial sort"
    assert GENERAL.pick("torch", on_cuda(8, 40), 3.0)[0] == "partial sort"
    assert GENERAL.pick("auto", vocabulary, 0.5)[0] == "bracketed newton"      # dense
    assert GENERAL.pick("auto", vocabulary, torch.tensor(3.0))[0] == "bracketed newton"
    assert sort_or_newton(on_cuda(32, 4, 100, 100)) == "sort"


@pytest.mark.parametrize("family", KERNELS)
def test_each_implementation_names_one_kernel_of_its_family(family, triton_installed):
    """The table every family follows: the eager kernel by the rule, else its compiled or
    Triton one (and auto: Triton on CUDA, eager on a CPU)."""
    kernels, args = KERNELS[family], ARGS.get(family, ())
    eager = "topk kernel" if family == "top-k" else "newton"
    fused = "fused" if family == "top-k" else "newton"
    large, cuda = torch.zeros(32, 4, 40, 40), on_cuda(32, 4, 40, 40)
    assert kernels.pick("torch", large, *args)[0] == eager
    assert kernels.pick("auto", large, *args)[0] == eager
    assert kernels.pick("compiled", large, *args)[0] == f"{fused}, compiled"
    assert kernels.pick("triton", cuda, *args)[0] == f"{fused}, triton"
    assert kernels.pick("auto", cuda, *args)[0] == f"{fused}, triton"
    if family in ("sparsemax", "1.5-entmax"):
        assert kernels.pick("torch", cuda)[0] == "sort"
        assert kernels.pick("auto", torch.zeros(4, 4, 1, 10))[0] == "sort"


def test_every_implementation_is_logged_once_per_device(caplog):
    kernels = Implementations("test", {"eager": torch.sigmoid}, ("c", None), ("t", None))
    with caplog.at_level(logging.INFO, logger=dispatch.__name__):
        for _ in range(3):
            kernels("auto", torch.zeros(2, 3))
            kernels("torch", torch.zeros(2, 3))
    assert caplog.messages == ["test on cpu with --attn-impl auto: eager",
                               "test on cpu with --attn-impl torch: eager"]


def test_triton_that_cannot_run_here_leaves_auto_eager_with_one_warning(monkeypatch, caplog,
                                                                         triton_installed):
    """A GPU Triton cannot compile for, or no C compiler for its launcher: auto goes on
    eagerly for the rest of the process; an explicit --attn-impl triton fails."""
    calls = []

    def broken(scores):
        calls.append("triton")
        raise RuntimeError("no C compiler\nmore")

    kernels = Implementations("test", {"eager": lambda s: calls.append("eager") or "eager"},
                              ("compiled", None), ("triton", broken))
    with caplog.at_level(logging.WARNING, logger=dispatch.__name__):
        assert kernels("auto", on_cuda(2, 3)) == "eager"
        assert kernels("auto", on_cuda(2, 3)) == "eager"
    assert calls == ["triton", "eager", "eager"]
    assert caplog.messages == ["test: the Triton kernels cannot run here (RuntimeError: no C "
                               "compiler); --attn-impl auto runs the eager ones for the rest "
                               "of this process"]
    with pytest.raises(RuntimeError, match="no C compiler"):
        kernels("triton", on_cuda(2, 3))


def test_sparsemax_and_entmax15_give_the_same_weights_whichever_algorithm_runs():
    scores = torch.randn(2, 3, 4, 9, dtype=torch.float64)
    for name, kernels in (("sparsemax", SPARSEMAX), ("entmax15", ENTMAX15)):
        weights = build_normalizer(name, 3, NormalizerOptions(attn_impl="torch"))(scores)
        assert set(kernels.kernels("torch")) == {"sort", "newton", "partial sort"}
        for algorithm in kernels.kernels("torch").values():
            torch.testing.assert_close(algorithm(scores), weights, atol=1e-12, rtol=0)


def test_the_default_is_auto_and_on_a_cpu_gives_the_eager_weights_bitwise():
    assert NormalizerOptions().attn_impl == "auto" and IMPLS[0] == "auto"
    scores = torch.randn(4, 3, 5, 9)
    for name in COMPILED:
        default = build_normalizer(name, 3, NormalizerOptions(topk=3))
        eager = build_normalizer(name, 3, NormalizerOptions(topk=3, attn_impl="torch"))
        eager.load_state_dict(default.state_dict())
        assert torch.equal(default(scores), eager(scores)), name


def test_an_unknown_implementation_is_refused():
    with pytest.raises(ValueError, match="unknown attention implementation 'cuda'"):
        build_normalizer("topk", 2, NormalizerOptions(attn_impl="cuda"))


def record_compiles(monkeypatch):
    """Replace compiling by a record of the functions that would be compiled."""
    asked = []

    def record(fn, case=""):
        asked.append(fn.__name__)
        return fn

    for module in (entmax_newton, topk):
        monkeypatch.setattr(module, "compiled", record)
    return asked


@pytest.mark.parametrize("impl", ["compiled", "auto", "torch"])
def test_only_compiled_compiles_and_for_exactly_the_normalisers_listed(monkeypatch, impl):
    asked = record_compiles(monkeypatch)
    scores = torch.randn(2, 3, 4, 9, requires_grad=True)
    for name in (n for n in NAMES if n not in CONSTRAINED):
        asked.clear()
        norm = build_normalizer(name, 3, NormalizerOptions(attn_impl=impl, topk=3))
        torch.autograd.grad(norm(scores).sum(), scores)
        assert bool(asked) == (impl == "compiled" and name in COMPILED), (name, asked)
