"""``sparse-attn-compare --redraw --out DIR``: a comparison's figures drawn again from its
record alone (how results/demo/comparison.png got its values and whiskers), with nothing
trained or translated and the report and record left as they are."""

import json
import shutil

import pytest

from sparse_attn_experiments import compare
from sparse_attn_plugin.analysis import plots

from helpers import REPO


def test_redraw_draws_the_figures_from_the_record_and_nothing_else(tmp_path, monkeypatch):
    record = REPO / "results" / "demo" / "comparison.json"
    shutil.copy(record, tmp_path / "comparison.json")
    (tmp_path / "README.md").write_text("the report\n")
    monkeypatch.setattr(compare, "run_row", lambda *a, **k: pytest.fail("trained a row"))
    drawn, draw = [], plots.comparison_bars

    def comparison_bars(*args, **kwargs):
        drawn.append((args, kwargs))
        return draw(*args, **kwargs)

    monkeypatch.setattr(plots, "comparison_bars", comparison_bars)

    assert compare.main(["--redraw", "--out", str(tmp_path)]) == 0

    assert {p.name for p in tmp_path.iterdir()} == {
        "comparison.json", "README.md", "comparison.png", "training-curves.png", "alphas.png"}
    assert (tmp_path / "comparison.json").read_bytes() == record.read_bytes()
    assert (tmp_path / "README.md").read_text() == "the report\n"
    (labels, bleu, *_), kwargs = drawn[0]
    rows = json.loads(record.read_text())["rows"]
    assert labels[5] == "hard (decoder self + cross)"            # titled as the demo's model
    assert bleu == [row["bleu"]["test"] for row in rows] and kwargs["reference"] == 0
    paired = rows[2]["bleu_vs_softmax"]["test"]
    assert kwargs["intervals"][0] is None
    assert kwargs["intervals"][2] == (paired["low"], paired["high"])


def test_redraw_needs_a_record(tmp_path, capsys):
    for argv in (["--redraw"], ["--redraw", "--out", str(tmp_path)]):
        with pytest.raises(SystemExit) as stopped:
            compare.main(argv)
        assert stopped.value.code == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("sparse-attn-compare: error: --redraw")
