"""A reproduction table's rows paired with its first row: which rows are paired, that the
pairing is the bootstrap of the two decodings' own translations under the corpus's BLEU
settings, and the report's column."""

import random
from types import SimpleNamespace

import pytest

from sparse_attn_experiments.reproduction import paired
from sparse_attn_experiments.reproduction.config import Config, RunSection
from sparse_attn_experiments.reproduction.report import _table
from sparse_attn_plugin.evaluation import corpus_bleu
from sparse_attn_plugin.evaluation.significance import paired_bootstrap

WORDS = "a small dog runs over the green grass while two Children play".split()


def sentences(n=60, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10))) for _ in range(n)]


def garbled(lines, keep, seed):
    rng = random.Random(seed)
    return [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in line.split())
            for line in lines]


def output(hypotheses, references):
    return SimpleNamespace(hypotheses=hypotheses, references=references)


def row(index, key, corpus=None, subset=None, seed=None):
    return {"row": index, "key": key, "corpus": corpus, "subset": subset, "seed": seed,
            "model": key, "label": key, "source": None, "train": key}


REFS = sentences()
OUTPUTS = {"base": output(garbled(REFS, 0.9, 1), REFS),
           "worse": output(garbled(REFS, 0.5, 2), REFS),
           "better": output(garbled(REFS, 0.97, 3), REFS)}


def test_every_row_is_paired_with_its_tables_first_row_under_the_corpus_bleu_settings():
    decoded = {key: {} for key in OUTPUTS}
    tables = [({}, [row(0, "base"), row(1, "worse")]),
              ({}, [row(0, "better"), row(1, "base")])]
    paired.pair_with_first_rows(tables, decoded, OUTPUTS, lambda corpus: {"lowercase": True})

    assert "bleu_vs" not in decoded["better"]        # a first row only
    assert set(decoded["base"]["bleu_vs"]) == {"better"}
    assert set(decoded["worse"]["bleu_vs"]) == {"base"}
    worse = decoded["worse"]["bleu_vs"]["base"]
    assert worse == paired_bootstrap(OUTPUTS["worse"].hypotheses, OUTPUTS["base"].hypotheses,
                                     REFS, lowercase=True).record()
    # independently: sacreBLEU's corpus scores of the two systems
    expected = (corpus_bleu(OUTPUTS["worse"].hypotheses, REFS, lowercase=True).score
                - corpus_bleu(OUTPUTS["base"].hypotheses, REFS, lowercase=True).score)
    assert worse["difference"] == pytest.approx(expected, abs=1e-9)
    assert worse["high"] < 0 and worse["p"] < 0.05
    assert paired.paired_cell(decoded, row(1, "worse"), row(0, "base")).startswith("-")
    assert paired.paired_cell(decoded, row(0, "base"), row(0, "base")) == "-"


def test_pooled_seeds_other_splits_and_failed_trainings_are_not_paired():
    decoded = {key: {} for key in [*OUTPUTS, "failed"]}
    tables = [({}, [row(0, "base", seed=1), row(0, "base", seed=2),  # seeds pooled
                    row(1, "worse", seed=1), row(1, "worse", seed=2)]),
              ({}, [row(0, "base"), row(1, "better", subset="valid"),
                    row(2, "worse", corpus="en-de"), row(3, "failed")])]
    paired.pair_with_first_rows(tables, decoded, OUTPUTS, lambda corpus: {})
    assert all("bleu_vs" not in record for record in decoded.values())
    assert not paired.pairable(tables[0][1]) and not paired.pairable([row(0, "base")])


def test_decodings_scored_on_other_references_are_not_paired():
    """E.g. a row whose generation flags post-process the text otherwise."""
    outputs = {**OUTPUTS, "other": output(OUTPUTS["worse"].hypotheses, sentences(seed=9))}
    decoded = {key: {} for key in outputs}
    paired.pair_with_first_rows([({}, [row(0, "base"), row(1, "other"), row(2, "worse")])],
                                decoded, outputs, lambda corpus: {})
    assert "bleu_vs" not in decoded["other"] and "base" in decoded["worse"]["bleu_vs"]


def test_the_report_puts_the_pairing_beside_the_bleu_columns():
    rows = [row(0, "base"), row(1, "worse")]
    decoded = {"base": {"bleu": 40.0}, "worse": {"bleu": 30.0}}
    paired.pair_with_first_rows([({}, rows)], decoded, OUTPUTS, lambda corpus: {})
    config = Config(name="paired", paper="a paper", smoke=RunSection(),
                    models={"base": [], "worse": []}, tables=())
    table = _table(config, rows, decoded, {"base": {}, "worse": {}}, ["BLEU"], {}, smoke=True)
    header, _, first, second = table.strip().split("\n")
    assert header.endswith("| BLEU (ours, synthetic smoke) | BLEU (paper) | "
                           "BLEU - first row, 95% interval, p (ours, synthetic smoke) |")
    record = decoded["worse"]["bleu_vs"]["base"]
    assert first.endswith("| 40.00 | - | - |")
    assert second.endswith(f"| 30.00 | - | {record['difference']:+.2f} [{record['low']:+.2f}, "
                           f"{record['high']:+.2f}], p {record['p']:.3f} |")
    pooled = [row(0, "base", seed=1), row(0, "base", seed=2)]
    assert "first row" not in _table(config, pooled, decoded, {"base": {}}, ["BLEU"], {},
                                     smoke=True)
