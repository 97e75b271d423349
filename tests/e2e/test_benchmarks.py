"""The benchmarks run end to end at a tiny scale and write
complete tables (no timing is asserted: speed is only ever a ratio)."""

import argparse
import json
import math

import pytest

from helpers import load_benchmark

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.usefixtures("fast_fairseq")]


def test_training_benchmark_writes_ratios(tmp_path):
    bench = load_benchmark("bench_training")
    bench.main(["--out", str(tmp_path), "--models", "demo", "--attn-fns", "softmax,topk",
                "--updates", "10", "--test-size", "10", "--length", "5", "--breakdown"])
    data = json.loads((tmp_path / "training.json").read_text())
    breakdown = data["breakdown"]["demo"]
    assert breakdown["softmax"]["kernel_ms"] == 0 < breakdown["topk [compiled]"]["kernel_ms"]
    assert all(b["ms_per_batch"] > b["kernel_ms"] + b["dispatch_ms"] for b in breakdown.values())
    for measure in ("words_per_second", "sentences_per_second"):
        values = data[measure]["demo"]
        assert set(values) == {"softmax", "topk", "topk [compiled]"}
        assert all(v > 0 and math.isfinite(v) for v in values.values())
    table = (tmp_path / "training.md").read_text()
    assert "| topk |" in table and "max tokens per batch {'demo': '1024'}" in table
    assert "| topk [compiled] |" in table and "(compiling included)" in table
    assert "### demo model: where the time goes" in table
    lines = table.splitlines()
    assert any(line.startswith("| attention | train batches/s ÷ softmax | train words/s ÷ "
                               "softmax (fairseq) |") for line in lines)
    topk = next(line for line in lines if line.startswith("| topk |")).split(" | ")
    batch_ratio = breakdown["softmax"]["ms_per_batch"] / breakdown["topk"]["ms_per_batch"]
    words_ratio = data["words_per_second"]["demo"]["topk"] / data["words_per_second"]["demo"][
        "softmax"]
    assert topk[1].startswith(f"{batch_ratio:.2f} (target ")         # judged per batch
    assert topk[2] == f"{words_ratio:.2f}"


def test_training_table_without_breakdown_judges_targets_on_words_per_second():
    bench = load_benchmark("bench_training")
    args = argparse.Namespace(updates=None, test_size=10, length=5, rounds=1)
    results = {"demo": {"softmax": (1000.0, 50.0), "topk": (960.0, 40.0),
                        "sparsemax": (900.0, 40.0)}}
    table = bench.render(results, {}, args, "python benchmarks/bench_training.py").splitlines()
    assert "| attention | train words/s ÷ softmax | generate sent/s ÷ softmax |" in "\n".join(
        table)
    assert "| topk | 0.96 (target met) | 0.80 | 0.98 | 0.94 |" in table
    assert "| sparsemax | 0.90 (target 0.95 missed) | 0.80 | 0.8 | 0.43 |" in table


def test_training_breakdown_without_softmax_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        load_benchmark("bench_training").main(["--out", str(tmp_path), "--attn-fns", "topk",
                                               "--breakdown"])
    assert exit_.value.code == 2
    assert "--breakdown compares with softmax" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_metrics_benchmark_times_every_step(tmp_path):
    load_benchmark("bench_metrics").main(["--out", str(tmp_path), "--sentences", "100",
                                          "--align-pairs", "300"])
    seconds = json.loads((tmp_path / "metrics.json").read_text())["seconds"]
    assert {"BLEU", "REP", "METEOR (after start-up)"} <= set(seconds)
    assert any(k.startswith("aligner training") for k in seconds)
    assert any(k.startswith("DROP") for k in seconds)
    assert all(v > 0 and math.isfinite(v) for v in seconds.values())
    assert "- commit: `" in (tmp_path / "metrics.md").read_text()


def test_drop_calibration_supports_the_recommended_symmetrisation(tmp_path):
    """The README recommends forward alignments for DROP: they must track the true
    drop rate more closely than the published grow-diag-final-and."""
    load_benchmark("drop_calibration").main(["--out", str(tmp_path), "--train", "1500",
                                             "--test", "150"])
    record = json.loads((tmp_path / "drop_calibration.json").read_text())
    true, by_sym = record["true_drop"], record["by_symmetrization"]
    assert 5 < true < 25
    assert abs(by_sym["forward"]["drop"] - true) < abs(by_sym["grow-diag-final-and"]["drop"] - true)
    assert by_sym["forward"]["aer"] < 0.1

