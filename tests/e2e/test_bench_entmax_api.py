"""benchmarks/bench_entmax_api.py, as typed: every function of the entmax package timed
against its drop-in, per-round ratios written with their provenance. No timing asserted."""

import json
import math
import subprocess
import sys

from helpers import REPO, fairseq_env, load_benchmark


def test_quick_run_writes_every_function_with_its_spread(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/bench_entmax_api.py", "--quick",
                           "--device", "cpu", "--threads", "1", "--out", str(tmp_path)],
                          cwd=REPO, env=fairseq_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    bench = load_benchmark("bench_entmax_api")
    md = (tmp_path / "entmax_api.md").read_text()
    record = json.loads((tmp_path / "entmax_api.json").read_text())
    assert md in done.stdout and "--quick" in record["command"] and record["commit"]
    for line in ("- command:", "- commit:", "- machine:", "- date:"):
        assert line in md
    rows, cols = bench.QUICK_SHAPE
    assert set(record["time_ratio_per_round"]) == {f"{layer} {rows}x{cols}"
                                                   for layer, *_ in bench.SHAPES}
    labels = [label for label, _, _ in bench.CASES]
    assert {name for _, name, _ in bench.CASES} == set(bench.FUNCTIONS)
    assert {"entmax_bisect alpha 3", "entmax_bisect alpha 5"} <= set(labels)   # above 2 too
    for by_label in record["time_ratio_per_round"].values():
        assert set(by_label) == set(labels)
        for ratios in by_label.values():
            assert len(ratios) == 2 and all(math.isfinite(r) and r > 0 for r in ratios)
    for name in bench.FUNCTIONS:
        assert f"| `entmax.{name}`" in md
    assert "| `entmax.entmax_bisect` alpha 5 |" in md


def test_half_precision_or_one_round_is_refused_in_one_line(tmp_path):
    for flags in (["--dtype", "float16"], ["--repeats", "1"]):
        done = subprocess.run([sys.executable, "benchmarks/bench_entmax_api.py", *flags,
                               "--out", str(tmp_path)], cwd=REPO, env=fairseq_env(),
                              capture_output=True, text=True)
        assert done.returncode == 1 and "must be" in done.stderr
        assert done.stderr.count("\n") == 1 and done.stdout == ""
        assert not list(tmp_path.iterdir())
