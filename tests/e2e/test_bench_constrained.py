"""``benchmarks/bench_constrained.py``: a quick run writes complete tables, and its
inputs are feasible with one sink per row."""

import json
import math

import numpy as np
import torch

from sparse_attn_plugin.normalizers.constrained import csoftmax, csparsemax

from helpers import load_benchmark


def load_bench():
    return load_benchmark("bench_constrained")


def test_benchmark_quick_run_writes_complete_tables(tmp_path):
    bench = load_bench()
    threads = torch.get_num_threads()
    try:
        bench.main(["--quick", "--device", "cpu", "--threads", "1", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    md = (tmp_path / "constrained.md").read_text()
    record = json.loads((tmp_path / "constrained.json").read_text())
    for line in ("- command:", "- commit:", "- machine:", "- date:"):
        assert line in md
    assert "--quick" in record["command"] and record["machine"] and record["commit"]
    assert record["shapes"] == [label for label, *_ in bench.SHAPES]
    for mode in bench.MODES:
        for label in record["shapes"]:
            cells = record["results"][mode][label]
            assert set(cells) == set(bench.METHODS) and cells["softmax"]["throughput_ratio"] == 1
            assert all(0 < c["throughput_ratio"] < math.inf for c in cells.values())
            assert label in md
    generation = record["results"]["generation"]["small"]
    assert set(generation) == set(bench.DECODINGS) and generation["softmax"]["time_ratio"] == 1
    assert all(0 < c["time_ratio"] < math.inf for c in generation.values())
    assert "Beam-5 generation" in md and "csparsemax (target <= 1.5:" in md


def test_benchmark_inputs_are_feasible_with_one_sink_per_row():
    bench = load_bench()
    for _, shape, sources in bench.SHAPES:
        scores, upper = bench.make_inputs(shape, sources, torch.float32, "cpu",
                                          torch.Generator().manual_seed(0))
        valid = torch.isfinite(scores)
        sink = torch.isinf(upper) & valid
        assert (sink.sum(-1) == 1).all()
        last = valid.long().cumsum(-1).argmax(-1, keepdim=True)   # last unmasked key
        assert sink.gather(-1, last).all()
        assert ((upper == 0) & valid).any() and (upper >= 0).all()
        for fn in (csoftmax, csparsemax):
            weights = fn(scores, upper, check=True)
            np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
