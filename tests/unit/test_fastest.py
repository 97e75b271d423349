"""Fastest: the exact algorithm a normaliser runs is chosen by timing, once per kind of
scores, and the choice changes speed only."""

import time

import torch

from sparse_attn_plugin.normalizers import Entmax15, Sparsemax
from sparse_attn_plugin.normalizers.entmax_family import ENTMAX15, SPARSEMAX
from sparse_attn_plugin.normalizers.fastest import Fastest


def counted(log, name, delay):
    def fn(scores):
        log.append(name)
        time.sleep(delay)
        return torch.softmax(scores, -1)
    return fn


def test_the_faster_candidate_is_chosen_once_per_kind_of_scores():
    log = []
    fastest = Fastest("test", {"slow": counted(log, "slow", 0.02),
                               "quick": counted(log, "quick", 0.0)}, rounds=2)
    scores = torch.randn(2, 3, 5)
    fastest(scores)
    assert log.count("slow") == 2 and log.count("quick") == 3    # timed twice, then run
    log.clear()
    fastest(torch.randn(4, 3, 7))                                  # same bucket: 5 and 7 -> 8
    assert log == ["quick"]
    fastest(torch.randn(2, 3, 9))                                  # a longer row: timed again
    assert log.count("slow") == 2
    log.clear()
    fastest(torch.randn(2, 3, 5, requires_grad=True))              # with gradients: timed again
    assert log.count("slow") == 2
    assert len(fastest.chosen) == 3 and set(fastest.chosen.values()) == {"quick"}


def test_gradients_are_timed_with_a_backward_pass_and_still_flow():
    fastest = Fastest("test", {"a": lambda s: torch.softmax(s, -1), "b": lambda s: s.sigmoid()})
    scores = torch.randn(3, 4, requires_grad=True)
    fastest(scores).sum().backward()
    assert scores.grad is not None and scores.grad.shape == scores.shape


def test_sparsemax_and_entmax15_give_the_same_weights_whichever_algorithm_wins():
    scores = torch.randn(2, 3, 4, 9, dtype=torch.float64)
    for module, chooser in ((Sparsemax(), SPARSEMAX), (Entmax15(), ENTMAX15)):
        weights = module(scores)
        chooser(scores)                                            # the kind is chosen now
        for algorithm in chooser.candidates.values():
            torch.testing.assert_close(algorithm(scores), weights, atol=1e-12, rtol=0)
