"""One scorer for every command: metric names in one spelling, each metric equal to its
own module's, DROP under several symmetrisations, the record result files hold, and what
a metric needs (Meteor, a word aligner) checked before and made once, only when needed."""

from types import SimpleNamespace

import pytest

from sparse_attn_plugin.evaluation import corpus_bleu, corpus_rep, drop, meteor, scoring
from sparse_attn_plugin.evaluation.bleu import corpus_chrf
from sparse_attn_plugin.evaluation.drop import corpus_drop
from sparse_attn_plugin.evaluation.metric import Resource, Setting

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
                           bleu_options={"lowercase": True}, setting=Setting(
                               aligner=lambda: aligner,
                               options={"drop": {"symmetrize": ["forward", "intersection"]}}))
    assert scores.bleu == corpus_bleu(HYPOTHESES, REFERENCES, lowercase=True)
    assert scores.chrf == corpus_chrf(HYPOTHESES, REFERENCES, lowercase=True)
    assert scores.rep == corpus_rep(HYPOTHESES, REFERENCES)
    assert scores.meteor is None
    assert list(scores.drop) == ["forward", "intersection"]
    assert scores.drop["forward"] == corpus_drop(GreedyAligner(), SOURCES, HYPOTHESES,
                                                 REFERENCES, "forward")
    assert set(aligner.calls) == {"forward", "intersection"}
    record = scores.record()
    assert record == {"bleu": scores.bleu.score, "bleu_signature": scores.bleu.signature,
                      "chrf": scores.chrf.score, "chrf_signature": scores.chrf.signature,
                      "rep": scores.rep.score, "drop": scores.drop["forward"].score,
                      "drop_by_symmetrization": {
                          name: result.score for name, result in scores.drop.items()}}
    assert "case:lc" in record["bleu_signature"] and "case:lc" in record["chrf_signature"]
    only_bleu = scoring.score(HYPOTHESES, REFERENCES)
    assert only_bleu.rep is None and only_bleu.drop is None and only_bleu.chrf is None
    assert set(only_bleu.record()) == {"bleu", "bleu_signature"}


def test_meteor_and_drop_say_what_they_need_before_anything_is_made(monkeypatch):
    made = []
    setting = Setting(aligner=lambda: made.append("aligner") or GreedyAligner())
    assert scoring.Scorer(["DROP", "BLEU"], setting).check() is None
    assert scoring.Scorer(["DROP"]).check() == (
        "DROP needs a word aligner: --aligner MODEL_DIR (train one with sparse-attn-align "
        "train)")
    with pytest.raises(ValueError, match="DROP needs the sources"):
        scoring.score(HYPOTHESES, REFERENCES, metrics=["DROP"], setting=setting)
    assert made == []  # neither the check nor the missing sources made the aligner
    other = scoring.Scorer(["METEOR"], Setting(language="fr")).check()  # Meteor's "other"
    assert not (other or "").startswith("unknown METEOR language")
    assert scoring.Scorer(["METEOR"], Setting(options={"meteor": {"language": "fr"}})
                          ).check().startswith("unknown METEOR language 'fr'; presets are en:")
    monkeypatch.setattr(meteor.shutil, "which", lambda name: None)
    assert scoring.Scorer(["BLEU", "METEOR"]).check() == meteor.JAVA_MISSING
    monkeypatch.setattr(drop.importlib.util, "find_spec", lambda name: None)
    assert scoring.Scorer(["DROP"], setting).check() == "DROP needs sil-thot: pip install sil-thot"


class Counted:
    """A resource that counts what made and closed it."""

    def __init__(self, log):
        self.log = log
        log.append("made")

    def close(self):
        self.log.append("closed")


def _counted_metric(log, fails=None):
    return scoring.Metric(
        "COUNTED", "counted", True,
        lambda inputs: SimpleNamespace(score=len(inputs.resource.log)),
        resource=Resource(make=lambda setting, options: Counted(log),
                          check=lambda setting, options: fails, close=Counted.close))


def test_a_resource_is_made_once_when_first_needed_and_closed(monkeypatch):
    log = []
    monkeypatch.setitem(scoring.METRICS, "COUNTED", _counted_metric(log))
    with scoring.Scorer(["BLEU", "COUNTED"]) as scorer:
        assert log == []
        scorer.score(HYPOTHESES, REFERENCES, metrics=["BLEU"])
        assert log == []  # not asked for yet
        first = scorer.score(HYPOTHESES, REFERENCES)
        second = scorer.score(HYPOTHESES, REFERENCES)
        assert log == ["made"] and first.counted.score == second.counted.score == 1
    assert log == ["made", "closed"]


def test_a_missing_resource_stops_scoring_or_is_skipped_and_said_once(monkeypatch):
    log = []
    monkeypatch.setitem(scoring.METRICS, "COUNTED", _counted_metric(log, "no counter here"))
    with pytest.raises(ValueError, match="^no counter here$"):
        scoring.score(HYPOTHESES, REFERENCES, metrics=["BLEU", "COUNTED"])
    said = []
    with scoring.Scorer(["BLEU", "COUNTED"], skip=said.append) as scorer:
        scores = [scorer.score(HYPOTHESES, REFERENCES) for _ in range(2)]
    assert said == ["COUNTED skipped: no counter here"] and log == []
    assert all(s.counted is None and s.bleu is not None for s in scores)
    assert scores[0].record()["bleu"] == scores[1].record()["bleu"]


def test_no_driver_names_a_metric_that_needs_a_resource():
    """Such a metric is named (a string equal to its name) only in its own module; the
    drivers reach it through the table. The published figures' tables quote the papers'
    column headers."""
    import ast

    from helpers import REPO

    needing = {name for name, metric in scoring.METRICS.items() if metric.resource}
    allowed = {f"{metric.compute.__module__.replace('.', '/')}.py"
               for metric in scoring.METRICS.values() if metric.resource}
    allowed.add("sparse_attn_experiments/comparison/published.py")
    named = []
    for package in ("sparse_attn_plugin", "sparse_attn_experiments", "sparse_attn_data"):
        for path in sorted((REPO / package).rglob("*.py")):
            where = str(path.relative_to(REPO))
            named += [f"{where}:{node.lineno} {node.value!r}"
                      for node in ast.walk(ast.parse(path.read_text()))
                      if isinstance(node, ast.Constant) and node.value in needing
                      and where not in allowed]
    assert needing == {"METEOR", "DROP"} and named == []
