"""Paired bootstrap BLEU: the per-sentence statistics give sacreBLEU's corpus BLEU, each
draw equals corpus BLEU of the resampled test set, and the interval and p-value behave."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_attn_plugin.evaluation import corpus_bleu
from sparse_attn_plugin.evaluation.significance import (
    bleu_of,
    paired_bootstrap,
    resample_counts,
    sentence_statistics,
)

WORDS = ["the", "The", "cat", "sat", "on", "a", "mat", "rock-music", ".", ","]
sentence = st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join)
options = st.fixed_dictionaries({"tokenize": st.sampled_from(["none", "13a"]),
                                 "lowercase": st.booleans(),
                                 "split_compounds": st.booleans()})


def noisy(references, keep, seed=0):
    """Each reference with every word kept with probability ``keep``, else replaced."""
    rng = random.Random(seed)
    return [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split())
            for r in references]


def references(n=200, seed=1):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(n)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(sentence, sentence), min_size=1, max_size=8), options)
def test_summed_statistics_give_sacrebleu_corpus_bleu(pairs, bleu_options):
    hyps, refs = zip(*pairs)
    summed = sentence_statistics(hyps, refs, **bleu_options).sum(0)
    assert bleu_of(summed) == pytest.approx(corpus_bleu(hyps, refs, **bleu_options).score,
                                            abs=1e-9)


def test_every_draw_is_corpus_bleu_of_the_resampled_test_set():
    refs = references(40)
    system, baseline = noisy(refs, 0.8, seed=2), noisy(refs, 0.6, seed=3)
    counts = resample_counts(len(refs), resamples=15, seed=7)
    assert (counts.sum(1) == len(refs)).all()
    ours, theirs = sentence_statistics(system, refs), sentence_statistics(baseline, refs)
    for draw in counts:
        # the resampled test set written out, scored by sacreBLEU's own corpus path
        index = np.repeat(np.arange(len(refs)), draw)
        expected = (corpus_bleu([system[i] for i in index], [refs[i] for i in index]).score
                    - corpus_bleu([baseline[i] for i in index], [refs[i] for i in index]).score)
        assert bleu_of(draw @ ours) - bleu_of(draw @ theirs) == pytest.approx(expected, abs=1e-9)


def test_the_difference_is_the_corpus_bleu_difference_and_inside_its_interval():
    refs = references()
    system, baseline = noisy(refs, 0.8, seed=2), noisy(refs, 0.7, seed=3)
    result = paired_bootstrap(system, baseline, refs)
    assert result.difference == pytest.approx(
        corpus_bleu(system, refs).score - corpus_bleu(baseline, refs).score, abs=1e-9)
    assert result.low < result.difference < result.high
    assert result.resamples == 1000


def test_a_clearly_better_system_is_significant():
    refs = references()
    result = paired_bootstrap(noisy(refs, 0.95, seed=2), noisy(refs, 0.5, seed=3), refs)
    assert result.low > 0
    assert result.p_value == pytest.approx(2 / 1001)  # no draw puts it at or below zero


def test_identical_systems_differ_by_nothing_with_p_one():
    refs = references()
    hyps = noisy(refs, 0.7)
    result = paired_bootstrap(hyps, hyps, refs)
    assert (result.difference, result.low, result.high, result.p_value) == (0, 0, 0, 1)


def test_swapping_the_systems_mirrors_the_result():
    refs = references()
    a, b = noisy(refs, 0.75, seed=2), noisy(refs, 0.7, seed=3)
    forward, backward = paired_bootstrap(a, b, refs), paired_bootstrap(b, a, refs)
    assert backward.difference == pytest.approx(-forward.difference)
    assert (backward.low, backward.high) == pytest.approx((-forward.high, -forward.low))
    assert backward.p_value == forward.p_value


def test_close_systems_are_not_significant():
    refs = references()
    a, b = noisy(refs, 0.7, seed=2), noisy(refs, 0.7, seed=3)  # the same noise level
    result = paired_bootstrap(a, b, refs)
    assert result.low < 0 < result.high and result.p_value > 0.05


@pytest.mark.parametrize("keep_system, keep_baseline, significant", [
    (0.85, 0.6, True), (0.7, 0.7, False)])
def test_it_agrees_with_sacrebleus_own_paired_bootstrap(keep_system, keep_baseline,
                                                        significant):
    """sacreBLEU's ``--paired-bs`` (its p-value centres the drawn differences instead of
    counting sign changes) makes the same call at the 5% level."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    refs = references()
    system, baseline = noisy(refs, keep_system, seed=2), noisy(refs, keep_baseline, seed=3)
    test = PairedTest([("baseline", baseline), ("system", system)],
                      {"BLEU": BLEU(tokenize="none", force=True)}, [refs], test_type="bs",
                      n_samples=1000)
    theirs = test()[1]["BLEU"][1]
    ours = paired_bootstrap(system, baseline, refs)
    assert ours.difference == pytest.approx(theirs.score - corpus_bleu(baseline, refs).score)
    assert (ours.p_value < 0.05) == (theirs.p_value < 0.05) == significant


def test_the_seed_fixes_the_draws():
    refs = references()
    a, b = noisy(refs, 0.75, seed=2), noisy(refs, 0.7, seed=3)
    assert paired_bootstrap(a, b, refs) == paired_bootstrap(a, b, refs)
    assert paired_bootstrap(a, b, refs, seed=1) != paired_bootstrap(a, b, refs, seed=2)


@pytest.mark.parametrize("system, baseline, refs, resamples, message", [
    (["a"], ["a", "b"], ["a", "b"], 10, "1 system hypotheses but 2 baseline"),
    (["a", "b"], ["a", "b"], ["a"], 10, "2 hypotheses but 1 references"),
    ([], [], [], 10, "no sentences"),
    (["a"], ["a"], ["a"], 0, "resamples must be positive"),
])
def test_bad_input_is_named(system, baseline, refs, resamples, message):
    with pytest.raises(ValueError, match=message):
        paired_bootstrap(system, baseline, refs, resamples=resamples)
