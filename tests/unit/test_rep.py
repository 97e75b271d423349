"""REP on hand-computed cases, in the reference script's reading.

Source of every expected value: Malaviya et al.'s own scorer, ``coverage-eval/rep_score.py``
of Unbabel/sparse_constrained_attention (commit 55111dc, 2018-06-11; the file last changed
in 57a9496, moved unchanged from ``generate_results/`` at ce8eedf), run on one-line
hypothesis and reference files as ``python3 rep_score.py -r REF -p PRED``: it printed
``REP_SCORE: N.0`` with N the expected value of each of the 9 sentence cases; with
``--normalize`` (as its ``run_coverage_metrics.sh`` runs it) on the three-sentence corpus
below, ``REP_SCORE: 11.0, NORMALIZED_REP_SCORE: 183.33``. The comments give the
arithmetic of the script's two terms (``-w1 1 -w2 2``, its defaults)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparse_attn_plugin.evaluation.rep import corpus_rep, sentence_rep


@pytest.mark.parametrize("hyp,ref,expected", [
    # no repeated bigram, no "w w" bigram
    ("the cat sat", "the cat sat", 0),
    # "the cat" twice in the hypothesis, once in the reference: a = 2 - 1
    ("the cat and the cat", "the cat and a dog", 1),
    # "the cat" twice, absent from the reference: a = 2
    ("the cat and the cat", "a dog", 2),
    # "very very": b = 1 (count 1, reference 0); a = 0 (count < 2)
    ("it is very very good", "it is very good", 2),
    # "very very" three times in "very very very very": a = 3, b = 3 -> 3 + 6
    ("very very very very", "very", 9),
    # the reference repeats it too: nothing in excess
    ("very very good", "very very good", 0),
    # empty hypothesis
    ("", "the cat", 0),
    # case is kept: "The cat" and "the cat" are different bigrams, so no repeat ...
    ("The cat the cat", "x", 0),
    # ... while the lowercased sentence repeats "the cat"
    ("the cat the cat", "x", 2),
])
def test_hand_computed_sentences(hyp, ref, expected):
    assert sentence_rep(hyp.split(), ref.split()) == expected


def test_corpus_score_is_normalised_by_reference_tokens():
    # rep_score.py --normalize: REP_SCORE: 11.0, NORMALIZED_REP_SCORE: 183.33
    result = corpus_rep(["the cat and the cat", "very very very very", ""],
                        ["a dog", "very", "the cat sat"])
    assert result.sentences == [2, 9, 0]
    assert result.reference_tokens == 6
    assert result.score == pytest.approx(100 * 11 / 6)


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_rep(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="references have no tokens"):
        corpus_rep(["a"], [""])


@given(st.lists(st.sampled_from("abc"), max_size=12))
def test_a_translation_equal_to_its_reference_scores_zero(tokens):
    assert sentence_rep(tokens, tokens) == 0


@given(st.lists(st.sampled_from("abc"), max_size=12), st.lists(st.sampled_from("abc"), max_size=12))
def test_rep_never_negative_and_only_counts_excess(hyp, ref):
    score = sentence_rep(hyp, ref)
    assert score >= 0
    assert sentence_rep(hyp, ref + hyp) == 0  # the reference covers every hypothesis bigram
