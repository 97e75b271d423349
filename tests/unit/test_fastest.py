"""Fastest: the implementation a normaliser runs is chosen by timing, once per kind of
scores; --attn-impl picks the candidates; the choice changes speed only."""

import time

import pytest
import torch

from sparse_attn_plugin.normalizers import (
    COMPILED,
    CONSTRAINED,
    IMPLS,
    NAMES,
    NormalizerOptions,
    build_normalizer,
    entmax_newton,
    topk,
)
from sparse_attn_plugin.normalizers.entmax_family import ENTMAX15, SPARSEMAX
from sparse_attn_plugin.normalizers.fastest import Fastest, by_impl


def counted(log, name, delay):
    def fn(scores, *args):
        log.append((name, args))
        time.sleep(delay)
        return torch.softmax(scores, -1)
    return fn


def test_the_faster_candidate_is_chosen_once_per_kind_of_scores():
    log = []
    fastest = Fastest("test", {"slow": counted(log, "slow", 0.02),
                               "quick": counted(log, "quick", 0.0)}, rounds=2)
    fastest(torch.randn(2, 3, 5), "arg")
    assert log.count(("slow", ("arg",))) == 2 and log.count(("quick", ("arg",))) == 3
    log.clear()
    fastest(torch.randn(4, 3, 7), "arg")                           # same bucket: 5 and 7 -> 8
    assert log == [("quick", ("arg",))]
    fastest(torch.randn(2, 3, 9), "arg")                           # a longer row: timed again
    assert log.count(("slow", ("arg",))) == 2
    log.clear()
    fastest(torch.randn(2, 3, 5, requires_grad=True), "arg")       # with gradients: again
    assert log.count(("slow", ("arg",))) == 2
    assert len(fastest.chosen) == 3 and {name for name, _ in fastest.chosen.values()} == {"quick"}


def test_later_candidates_join_after_so_many_calls():
    log = []
    fastest = Fastest("test", {"eager": counted(log, "eager", 0.01)},
                      later={"compiled": counted(log, "compiled", 0.0)}, compile_after=3, rounds=2)
    for _ in range(3):
        fastest(torch.randn(2, 5))
    assert {name for name, _ in log} == {"eager"}                  # one candidate: not timed
    log.clear()
    fastest(torch.randn(2, 5))
    fastest(torch.randn(2, 5))
    assert [name for name, _ in log][-1] == "compiled" and log.count(("eager", ())) == 2


def test_by_impl_gives_the_candidates_of_each_implementation():
    choosers = by_impl("test", {"a": None, "b": None}, {"c": None}, {"d": None})
    assert set(choosers) == set(IMPLS)
    assert set(choosers["torch"].candidates) == {"a", "b"} and not choosers["torch"].later
    assert set(choosers["compiled"].candidates) == {"c"}
    assert set(choosers["triton"].candidates) == {"d"}
    assert set(choosers["auto"].candidates) == {"a", "b"}
    assert set(choosers["auto"].later) == {"c", "d"} and choosers["auto"].cuda_only == {"d"}


def test_cuda_only_candidates_never_run_on_cpu_scores():
    log = []
    fastest = Fastest("test", {"eager": counted(log, "eager", 0.0)},
                      later={"triton": counted(log, "triton", 0.0)}, compile_after=0,
                      cuda_only={"triton"})
    fastest(torch.randn(2, 5))
    assert {name for name, _ in log} == {"eager"}


def test_a_later_candidate_that_fails_is_left_out_with_a_warning(caplog):
    def broken(scores):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")

    log = []
    fastest = Fastest("test", {"eager": counted(log, "eager", 0.0)},
                      later={"compiled": broken}, compile_after=0)
    with caplog.at_level("WARNING"):
        fastest(torch.randn(2, 5))
    assert "test: compiled cannot run here and is left out of --attn-impl auto (RuntimeError: " \
           "InvalidCxxCompiler: No working C++ compiler found)" in caplog.text
    log.clear()
    fastest(torch.randn(3, 5))
    fastest(torch.randn(2, 33))                                    # another kind: not retried
    assert fastest.failed == {"compiled"} and {name for name, _ in log} == {"eager"}


def test_a_failing_candidate_the_user_chose_is_an_error():
    def broken(scores):
        raise RuntimeError("no compiler")

    fastest = Fastest("test", {"compiled": broken, "other": torch.sigmoid})
    with pytest.raises(RuntimeError, match="no compiler"):
        fastest(torch.randn(2, 5))


def test_gradients_are_timed_with_a_backward_pass_and_still_flow():
    fastest = Fastest("test", {"a": lambda s: torch.softmax(s, -1), "b": lambda s: s.sigmoid()})
    scores = torch.randn(3, 4, requires_grad=True)
    fastest(scores).sum().backward()
    assert scores.grad is not None and scores.grad.shape == scores.shape


def test_sparsemax_and_entmax15_give_the_same_weights_whichever_algorithm_wins():
    scores = torch.randn(2, 3, 4, 9, dtype=torch.float64)
    for name, choosers in (("sparsemax", SPARSEMAX), ("entmax15", ENTMAX15)):
        weights = build_normalizer(name, 3, NormalizerOptions(attn_impl="torch"))(scores)
        for algorithm in choosers["torch"].candidates.values():
            torch.testing.assert_close(algorithm(scores), weights, atol=1e-12, rtol=0)


def test_an_unknown_implementation_is_refused():
    with pytest.raises(ValueError, match="unknown attention implementation 'cuda'"):
        build_normalizer("topk", 2, NormalizerOptions(attn_impl="cuda"))


def test_the_normalisers_listed_as_compiled_are_the_ones_that_compile(monkeypatch):
    """--attn-impl compiled reaches compiled kernels for exactly COMPILED (compiling is
    replaced by a record of what would be compiled)."""
    asked = []

    def record(fn):
        asked.append(fn.__name__)
        return fn

    for module in (entmax_newton, topk):
        monkeypatch.setattr(module, "compiled", record)
    scores = torch.randn(2, 3, 4, 9, requires_grad=True)
    for name in (n for n in NAMES if n not in CONSTRAINED):
        asked.clear()
        norm = build_normalizer(name, 3, NormalizerOptions(attn_impl="compiled", topk=3))
        torch.autograd.grad(norm(scores).sum(), scores)
        assert bool(asked) == (name in COMPILED), (name, asked)
