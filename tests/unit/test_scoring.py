"""One scorer for every command: metric names in one spelling, each metric equal to its
own module's, DROP under several symmetrisations, and the record result files hold."""

import pytest

from sparse_attn_plugin.evaluation import corpus_bleu, corpus_rep, scoring
from sparse_attn_plugin.evaluation.bleu import corpus_chrf
from sparse_attn_plugin.evaluation.drop import corpus_drop

from helpers.aligners import GreedyAligner

SOURCES = ["a b c", "d e", "a a b"]
REFERENCES = ["A B C", "D E", "A A B"]
HYPOTHESES = ["A C C", "D E", "A B B"]


@pytest.mark.parametrize("given, canonical", [
    (["bleu", "Rep"], ["BLEU", "REP"]),
    ([" DROP ", "meteor", ""], ["DROP", "METEOR"]),
    (["CHRF", "chrf", "chrF"], ["chrF", "chrF", "chrF"]),
])
def test_metric_names_read_any_case(given, canonical):
    assert scoring.metric_names(given) == canonical


@pytest.mark.parametrize("given", [["bleu", "cider"], [], [" "]])
def test_an_unknown_metric_or_none_is_refused(given):
    named = "cider" if given[1:] else r"\(none\)"
    with pytest.raises(ValueError, match=f"unknown metric\\(s\\) {named}; choose from "
                                         "BLEU, chrF, METEOR, REP, DROP"):
        scoring.metric_names(given)


def test_each_metric_is_its_modules_and_only_those_asked_for_are_scored():
    aligner = GreedyAligner()
    scores = scoring.score(HYPOTHESES, REFERENCES, SOURCES, ["bleu", "chrf", "REP", "drop"],
                           bleu_options={"lowercase": True}, aligner=aligner,
                           symmetrizations=["forward", "intersection"])
    assert scores.bleu == corpus_bleu(HYPOTHESES, REFERENCES, lowercase=True)
    assert scores.chrf == corpus_chrf(HYPOTHESES, REFERENCES, lowercase=True)
    assert scores.rep == corpus_rep(HYPOTHESES, REFERENCES)
    assert scores.meteor is None
    assert list(scores.drop_by_symmetrization) == ["forward", "intersection"]
    assert scores.drop == corpus_drop(GreedyAligner(), SOURCES, HYPOTHESES, REFERENCES,
                                      "forward")
    assert set(aligner.calls) == {"forward", "intersection"}
    record = scores.record()
    assert record == {"bleu": scores.bleu.score, "bleu_signature": scores.bleu.signature,
                      "chrf": scores.chrf.score, "chrf_signature": scores.chrf.signature,
                      "rep": scores.rep.score, "drop": scores.drop.score,
                      "drop_by_symmetrization": {
                          name: result.score
                          for name, result in scores.drop_by_symmetrization.items()}}
    assert "case:lc" in record["bleu_signature"] and "case:lc" in record["chrf_signature"]
    only_bleu = scoring.score(HYPOTHESES, REFERENCES)
    assert only_bleu.rep is None and only_bleu.drop is None and only_bleu.chrf is None
    assert set(only_bleu.record()) == {"bleu", "bleu_signature"}


def test_meteor_and_drop_say_what_they_need():
    with pytest.raises(ValueError, match="METEOR needs a running Meteor"):
        scoring.score(HYPOTHESES, REFERENCES, metrics=["METEOR"])
    with pytest.raises(ValueError, match="DROP needs the sources"):
        scoring.score(HYPOTHESES, REFERENCES, metrics=["DROP"], aligner=GreedyAligner())
    with pytest.raises(ValueError, match="DROP needs the sources"):
        scoring.score(HYPOTHESES, REFERENCES, SOURCES, ["DROP"])
