"""One metric table (``scoring.METRICS``): a metric entered there and nowhere else is in
``sparse-attn-score``'s JSON, a comparison's row and table and a reproduction's record
and report; so is one that needs a resource, made once by the one scorer and checked
before any work; chrF, which goes with BLEU, is beside BLEU in each report; records
written before chrF still read, without it."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparse_attn_experiments import pipeline, reproduce, results_index
from sparse_attn_experiments.comparison import report, run
from sparse_attn_experiments.reproduction.config import load_config
from sparse_attn_experiments.reproduction.report import render
from sparse_attn_plugin.evaluation import GenerateOutput, scoring
from sparse_attn_plugin.evaluation.cli import run as score_command
from sparse_attn_plugin.evaluation.metric import Resource, Setting

from helpers import REPO
from helpers.aligners import GreedyAligner
from helpers.fakes import fake_generate, fake_train

SOURCES = ["a b c", "d e", "a a b"]
REFERENCES = ["A B C", "D E", "A A B"]
#: Each test split's translations.
TRANSLATIONS = {"test": ["A C C", "D E", "A B B"], "test1": ["A B", "D D E", "A A B"]}
TESTS = {"test": "flickr2016", "test1": "mscoco2017"}
CONFIG = REPO / "configs" / "correia2019_adaptively_sparse.json"


def _words(inputs):
    """The throwaway metric: words a hypothesis holds, on average."""
    return SimpleNamespace(score=sum(len(h.split()) for h in inputs.hypotheses)
                           / len(inputs.hypotheses))


@pytest.fixture
def words_metric():
    """A metric entered in the table only, and taken out again after the test."""
    scoring.METRICS["WORDS"] = scoring.Metric("WORDS", "words", False, _words)
    yield scoring.METRICS["WORDS"]
    del scoring.METRICS["WORDS"]


def compared_rows(monkeypatch, skipped: list = None) -> list:
    """Two comparison rows as :func:`run.score` scores them (fairseq-generate and the
    teacher-forced statistics stood in for; the scorer's skips added to ``skipped``), with
    what training adds to a row."""
    skipped = [] if skipped is None else skipped
    def translate(corpus, checkpoint, flags, split, log):
        output = GenerateOutput([0, 1, 2], SOURCES, REFERENCES, TRANSLATIONS[split],
                                [0.0] * 3)
        return pipeline.GenerateResult(output, 10.0, log)

    monkeypatch.setattr(run, "translate", translate)
    monkeypatch.setattr(run, "site_statistics", lambda checkpoint, data: {})
    corpus = SimpleNamespace(tests=TESTS, first_test="test", data=Path("data"))
    scorer = scoring.Scorer(list(scoring.METRICS), Setting(aligner=GreedyAligner),
                            skip=skipped.append)
    with scorer:
        scored = run.score(corpus, Path("work/softmax"), [], scorer)
    trained = {"updates": 12, "stopped": "cap", "validation_curve": [[6, 4.0], [12, 3.5]],
               "valid_loss": 3.5, "train_words_per_second": 1000.0}
    return [{"attention": name, **trained, **scored} for name in ("softmax", "entmax15")]


def comparison_report(rows) -> str:
    corpus = SimpleNamespace(tests=TESTS, first_test="test", title="a corpus")
    return report.render(rows, {r["attention"]: r["attention"] for r in rows}, corpus,
                         "settings", "sparse-attn-compare", [], [], smoke=True)


def reproduction(tmp_path, monkeypatch, synthetic_bin, metrics) -> tuple:
    """A smoke run of Correia et al.'s config scoring ``metrics`` (training and decoding
    stood in for): its record and its report."""
    config = json.loads(CONFIG.read_text())
    config["metrics"] = metrics
    (tmp_path / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(pipeline, "train", fake_train([]))
    monkeypatch.setattr(pipeline, "generate", fake_generate([]))
    out = tmp_path / "out"
    reproduce.main([tmp_path / "config.json", "--smoke", "--data", synthetic_bin,
                    "--updates", "2", "--work-dir", tmp_path / "work", "--out", out])
    return json.loads((out / "smoke.json").read_text()), (out / "smoke.md").read_text()


def table_rows(text: str, header_start: str) -> list:
    """The cells of the markdown table whose header starts with ``header_start``: the
    header's, then each row's."""
    lines = text[text.index(header_start):].split("\n\n")[0].splitlines()
    return [[cell.strip() for cell in line.strip("|").split(" | ")]
            for line in lines if not line.startswith("|---")]


def column(table: list, header: str) -> list:
    return [row[table[0].index(header)] for row in table[1:]]


def test_a_metric_entered_in_the_table_alone_is_scored_and_reported_everywhere(
        words_metric, tmp_path, monkeypatch, synthetic_bin, capsys):
    for name, lines in (("hyp", TRANSLATIONS["test"]), ("ref", REFERENCES)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    score_command(["--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"),
                   "--metrics", "bleu,words", "--json", str(tmp_path / "scores.json")])
    words = 8 / 3  # A C C, D E, A B B
    assert json.loads((tmp_path / "scores.json").read_text())["words"] == {"score": words}
    assert "WORDS        2.67" in capsys.readouterr().out.splitlines()

    rows = compared_rows(monkeypatch)
    assert rows[0]["words"] == words  # on the first test split
    table = table_rows(comparison_report(rows), "| attention | BLEU")
    assert column(table, "WORDS") == ["2.67", "2.67"]

    record, text = reproduction(tmp_path, monkeypatch, synthetic_bin, ["BLEU", "WORDS"])
    recorded = {json.loads(key)[0]: decoded["words"]
                for key, decoded in record["decoded"].items()}
    table = table_rows(text, "| row | model trained")
    assert column(table, "WORDS (ours, synthetic smoke)") == [
        f"{recorded[model]:.2f}" for model in column(table, "model trained")]
    assert column(table, "WORDS (paper)") == ["-"] * 3


class Lexicon:
    """The throwaway resource: the words it knows, each one made counted and closed."""

    made: list = []

    def __init__(self):
        self.words, self.closed = {"A", "B", "C"}, False
        Lexicon.made.append(self)

    def close(self):
        self.closed = True


def _known(inputs):
    """The throwaway metric: the share of hypothesis words its lexicon knows, x100."""
    words = [w for h in inputs.hypotheses for w in h.split()]
    known = sum(w in inputs.resource.words for w in words)
    return SimpleNamespace(score=100 * known / len(words), known=known)


@pytest.fixture
def known_metric(monkeypatch):
    """A metric that needs a resource, entered in the table only (with what its reports
    add), and whose check fails while ``missing`` holds a reason."""
    missing = []
    monkeypatch.setattr(Lexicon, "made", [])
    resource = Resource(make=lambda setting, options: Lexicon(),
                        check=lambda setting, options: missing[0] if missing else None,
                        close=Lexicon.close)
    monkeypatch.setitem(scoring.METRICS, "KNOWN", scoring.Metric(
        "KNOWN", "known", True, _known, resource=resource,
        fields=lambda result: {"known_words": result.known},
        summary="hypothesis words the lexicon knows",
        note=lambda report: "KNOWN: hypothesis words the lexicon knows, x100.",
        columns=lambda options: [("KNOWN words", lambda record: record["known_words"])]))
    return missing


def test_a_metric_that_needs_a_resource_is_one_entry_and_its_check_runs_first(
        known_metric, tmp_path, monkeypatch, synthetic_bin, capsys):
    for name, lines in (("hyp", TRANSLATIONS["test"]), ("ref", REFERENCES)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    known = 100 * 6 / 8  # A C C, D E, A B B: all but D and E
    command = ["--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"), "--metrics",
               "bleu,known", "--json", str(tmp_path / "scores.json")]
    score_command(command)
    assert json.loads((tmp_path / "scores.json").read_text())["known"] == {"score": known}
    assert "KNOWN       75.00" in capsys.readouterr().out.splitlines()
    assert len(Lexicon.made) == 1 and Lexicon.made[0].closed

    rows = compared_rows(monkeypatch)
    assert rows[0]["known"] == known and rows[0]["known_words"] == 6
    assert len(Lexicon.made) == 2 and Lexicon.made[1].closed  # one for both splits
    text = comparison_report(rows)
    assert column(table_rows(text, "| attention | BLEU"), "KNOWN") == ["75.00", "75.00"]
    assert "KNOWN (hypothesis words the lexicon knows) are on the first test split" in text

    record, text = reproduction(tmp_path, monkeypatch, synthetic_bin, ["BLEU", "KNOWN"])
    assert len(Lexicon.made) == 3 and Lexicon.made[2].closed  # one for the run
    decoded = {json.loads(key)[0]: d for key, d in record["decoded"].items()}
    table = table_rows(text, "| row | model trained")
    models = column(table, "model trained")
    assert column(table, "KNOWN (ours, synthetic smoke)") == [
        f"{decoded[model]['known']:.2f}" for model in models]
    assert column(table, "KNOWN words (ours, synthetic smoke)") == [
        f"{decoded[model]['known_words']:.2f}" for model in models]
    assert "KNOWN: hypothesis words the lexicon knows, x100." in text

    known_metric.append("KNOWN needs its lexicon: install it")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        score_command(command)
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "sparse-attn-score: error: KNOWN needs its lexicon: install it"]
    refused = tmp_path / "refused"
    refused.mkdir()
    with pytest.raises(SystemExit) as exit_info:
        reproduction(refused, monkeypatch, synthetic_bin, ["BLEU", "KNOWN"])
    assert exit_info.value.code == 1  # before it trains: no checkpoint, no report
    assert not list(refused.rglob("*.pt")) and not (refused / "out").exists()
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "sparse-attn-reproduce: error: KNOWN needs its lexicon: install it "
        "(see sparse-attn-reproduce --help)")
    skipped = []  # a comparison scores what it can and says what it left out, once
    rows = compared_rows(monkeypatch, skipped)
    assert rows[0]["known"] is None and rows[0]["rep"] is not None
    assert skipped == ["KNOWN skipped: KNOWN needs its lexicon: install it"]
    assert column(table_rows(comparison_report(rows), "| attention | BLEU"),
                  "KNOWN") == ["n/a", "n/a"]
    assert len(Lexicon.made) == 3


def test_chrf_is_beside_bleu_in_the_comparison_and_the_reproduction(tmp_path, monkeypatch,
                                                                   synthetic_bin):
    rows = compared_rows(monkeypatch)
    chrf = {split: scoring.score(hyps, REFERENCES, metrics=["chrF"]).chrf
            for split, hyps in TRANSLATIONS.items()}
    assert rows[0]["chrf"] == {split: result.score for split, result in chrf.items()}
    assert rows[0]["chrf_signature"] == chrf["test"].signature
    text = comparison_report(rows)
    table = table_rows(text, "| attention | BLEU")
    assert table[0][1:5] == ["BLEU flickr2016", "BLEU mscoco2017", "chrF flickr2016",
                             "chrF mscoco2017"]
    assert column(table, "chrF mscoco2017") == [f"{chrf['test1'].score:.2f}"] * 2
    assert f"and so is chrF (`{chrf['test'].signature}`, higher is better)" in text

    record, text = reproduction(tmp_path, monkeypatch, synthetic_bin, ["BLEU"])
    assert record["metrics"] == ["BLEU"]  # as the config names them; chrF goes with BLEU
    chrfs = {json.loads(key)[0]: decoded["chrf"] for key, decoded in record["decoded"].items()}
    table = table_rows(text, "| row | model trained")
    assert table[0][3:7] == ["BLEU (ours, synthetic smoke)", "BLEU (paper)",
                             "BLEU - first row, 95% interval, p (ours, synthetic smoke)",
                             "chrF (ours, synthetic smoke)"]
    assert column(table, "chrF (ours, synthetic smoke)") == [
        f"{chrfs[model]:.2f}" for model in column(table, "model trained")]
    signature = next(iter(record["decoded"].values()))["chrf_signature"]
    assert f"chrF: sacrebleu `{signature}` (higher is better)." in text


def test_records_written_before_chrf_are_read_without_it(tmp_path):
    """The committed demo comparison and Correia et al.'s smoke run hold no chrF: the
    comparison's tables have no chrF column, the reproduction's say "-", the index holds
    what it held."""
    demo = json.loads((REPO / "results" / "demo" / "comparison.json").read_text())
    assert not any("chrf" in row for row in demo["rows"])
    text = report.table(demo["rows"], {r["attention"]: r["attention"] for r in demo["rows"]},
                        SimpleNamespace(tests=demo["tests"], first_test="test"), "here")
    assert "chrF" not in text and "| attention | BLEU test | METEOR | REP |" in text

    smoke = json.loads((REPO / "results" / "adaptively_sparse" / "smoke.json").read_text())
    assert not any("chrf" in decoded for decoded in smoke["decoded"].values())
    text = render(load_config(CONFIG), smoke, True, "check")
    table = table_rows(text, "| row | model trained")
    assert set(column(table, "chrF (ours, synthetic smoke)")) == {"-"}
    assert "chrF: sacrebleu" not in text

    results = tmp_path / "results"
    for folder in ("demo", "adaptively_sparse"):
        shutil.copytree(REPO / "results" / folder, results / folder)
    (tmp_path / "configs").mkdir()
    shutil.copy(CONFIG, tmp_path / "configs")
    index = results_index.render(results, tmp_path / "configs", REPO / "scripts", "check")
    assert "chrF" not in index
