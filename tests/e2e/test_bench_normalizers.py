"""The normaliser benchmark runs and writes complete, well-formed tables.

No timing is asserted: only that every normaliser and shape is reported, softmax is
the reference (ratio exactly 1.0) and every ratio is a positive finite number.
"""

import json
import math

import torch

from helpers import load_benchmark


def load_bench():
    return load_benchmark("bench_normalizers")


def test_quick_run_writes_complete_tables(tmp_path):
    bench = load_bench()
    threads = torch.get_num_threads()
    try:  # one thread: a busy machine stalls multi-threaded ops far more
        bench.main(["--quick", "--profile", "--device", "cpu", "--threads", "1",
                    "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    md = (tmp_path / "normalizers.md").read_text()
    record = json.loads((tmp_path / "normalizers.json").read_text())
    labels = [label for label, *_ in bench.SHAPES]

    for line in ("- command:", "- commit:", "- machine:", "- date:"):
        assert line in md
    assert "--quick" in record["command"] and record["machine"] and record["commit"]
    assert record["shapes"] == labels
    for label in labels:
        assert label in md
    rows = set(bench.implementations(4, "cpu"))
    assert set(bench.NORMALIZERS) < rows and {"sparsemax [sort]", "entmax_alpha [bisect]",
                                              "topk [compiled]", "entmax_alpha [compiled]"} < rows
    for name in rows:
        assert f"| {name} |" in md and f"### {name}\n" in md
    assert set(record["results"]) == {"train", "infer"}
    for mode, by_shape in record["results"].items():
        assert set(by_shape) == set(labels)
        for label, by_name in by_shape.items():
            assert set(by_name) == rows
            soft = by_name["softmax"]
            assert soft["time_ratio"] == 1.0 and soft["throughput_ratio"] == 1.0
            for name, cell in by_name.items():
                for key in ("median_s", "time_ratio", "throughput_ratio"):
                    assert math.isfinite(cell[key]) and cell[key] > 0, (mode, label, name, key)
                assert math.isclose(cell["time_ratio"] * cell["throughput_ratio"], 1.0)
    compiled = {name for name in rows if name.endswith("[compiled]")}
    assert set(record["first_call_s"]) == rows and "## Compilation" in md
    assert all(f"| {name} | " in md.split("## Compilation")[1] for name in compiled)
    assert "## Where the time goes" in md and "share of self CPU time" in md
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes left no temp files behind
