"""Malaviya et al.'s (2018) Figure 1 toy example, computed by the library's normalisers and
checked against numbers derived by hand."""

import json
import math

import pytest

from sparse_attn_experiments import toy_example

# sparsemax(z) = max(0, z - tau), tau = (sum of the k largest z - 1) / k on the support:
#   z1 = (1.2, 0.8, -0.2): support {1, 2}, tau = (2.0 - 1) / 2 = 0.5  -> (0.7, 0.3, 0)
#   z2 = (0.7, 0.9, 0.1): support {1, 2}, tau = (1.6 - 1) / 2 = 0.3  -> (0.4, 0.6, 0)
#   z3 = (-0.2, 0.2, 0.9): support {2, 3}, tau = (1.1 - 1) / 2 = 0.05 -> (0, 0.15, 0.85)
SPARSEMAX = [(0.7, 0.3, 0.0), (0.4, 0.6, 0.0), (0.0, 0.15, 0.85)]
# csparsemax with unit fertilities, u_t = max(0, 1 - beta_{t-1}):
#   t=1: u = (1, 1, 1), inactive: as sparsemax -> (0.7, 0.3, 0)
#   t=2: u = (0.3, 0.7, 1); sparsemax's 0.4 > 0.3, so word 1 sits at its bound; the rest
#        0.7 goes to word 2 (tau = 0.2: 0.9 - 0.2 = 0.7 = u_2; 0.1 - 0.2 < 0) -> (0.3, 0.7, 0)
#   t=3: u = (0, 0, 1) -> (0, 0, 1)
CSPARSEMAX = [(0.7, 0.3, 0.0), (0.3, 0.7, 0.0), (0.0, 0.0, 1.0)]
CSPARSEMAX_UPPER = [(1.0, 1.0, 1.0), (0.3, 0.7, 1.0), (0.0, 0.0, 1.0)]


def close(actual, expected, tol=1e-9):
    return all(math.isclose(a, e, abs_tol=tol) for a, e in zip(actual, expected))


def test_sparsemax_matches_the_hand_derivation():
    steps = toy_example.attention_steps("sparsemax")
    assert steps["upper"] is None
    for got, want in zip(steps["attention"], SPARSEMAX):
        assert close(got, want)
    assert close(steps["cumulative"][-1], (1.1, 1.05, 0.85))  # word 1 over-attended


def test_csparsemax_matches_the_hand_derivation_and_ends_at_the_fertilities():
    steps = toy_example.attention_steps("csparsemax")
    for got, want in zip(steps["attention"], CSPARSEMAX):
        assert close(got, want)
    for got, want in zip(steps["upper"], CSPARSEMAX_UPPER):
        assert close(got, want)
    assert close(steps["cumulative"][-1], (1.0, 1.0, 1.0))


def test_softmax_and_csoftmax_agree_until_the_bounds_bite():
    soft = toy_example.attention_steps("softmax")
    constrained = toy_example.attention_steps("csoftmax")
    z1 = toy_example.SCORES[0]
    total = sum(math.exp(v) for v in z1)
    assert close(soft["attention"][0], [math.exp(v) / total for v in z1])
    for t in (0, 1):  # the first two steps stay below the bounds
        assert close(constrained["attention"][t], soft["attention"][t])
    # step 3: softmax gives words 1 and 2 more than what is left; csoftmax saturates
    # them and word 3 gets the rest, which is exactly its own bound
    upper = constrained["upper"][2]
    assert soft["attention"][2][0] > upper[0] and soft["attention"][2][1] > upper[1]
    assert close(constrained["attention"][2], upper)
    assert close(constrained["cumulative"][-1], (1.0, 1.0, 1.0))
    assert soft["cumulative"][-1][0] > 1.0


@pytest.mark.parametrize("name", toy_example.TRANSFORMS)
def test_every_step_is_a_distribution_within_its_bounds(name):
    steps = toy_example.attention_steps(name)
    for t, p in enumerate(steps["attention"]):
        assert math.isclose(sum(p), 1.0, abs_tol=1e-12) and min(p) >= 0
        if steps["upper"] is not None:
            assert all(v <= u + 1e-12 for v, u in zip(p, steps["upper"][t]))


def test_cli_writes_the_table_and_the_json(tmp_path, capsys):
    toy_example.main(["--out", tmp_path])
    record = json.loads((tmp_path / "figure1.json").read_text())
    assert record["scores"] == [list(s) for s in toy_example.SCORES]
    assert set(record["transforms"]) == set(toy_example.TRANSFORMS)
    assert close(record["transforms"]["csparsemax"]["cumulative"][-1], (1, 1, 1))
    report = (tmp_path / "figure1.md").read_text()
    assert report.startswith("# Malaviya et al. (2018), Figure 1")
    assert "- commit:" in report and "--out" in report
    assert "| csparsemax | 2 | (0.700, 0.900, 0.100) | (0.300, 0.700, 1.000) | " \
           "(0.300, 0.700, 0.000) | (1.000, 1.000, 0.000) |" in report
    assert "| sparsemax | 3 | (-0.200, 0.200, 0.900) | - | (0.000, 0.150, 0.850) | " \
           "(1.100, 1.050, 0.850) |" in report
    assert "softmax and sparsemax have given some word more attention" in report
    assert report in capsys.readouterr().out
