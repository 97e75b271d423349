"""benchmarks/bench_output_layer.py, as typed: every loss timed against cross-entropy with
its spread and a peak-memory figure, the decoding step against log_softmax, and one line
with exit status 1 for bad input, writing nothing."""

import json
import subprocess
import sys

import pytest

from helpers import REPO, fairseq_env, load_benchmark


def run(*args):
    return subprocess.run([sys.executable, "benchmarks/bench_output_layer.py", *args],
                          cwd=REPO, env=fairseq_env(), capture_output=True, text=True)


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("output_layer")
    done = run("--out", str(out), "--shapes", "64x1100", "--threads", "1", "--repeats", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    md = (out / "output_layer.md").read_text()
    for line in ("- command:", "- commit:", "- machine:", "- date:", "## 1 thread",
                 "### 64 x 1100", "### decoding step 40 x 1100, randn", "≤ 2.0 ("):
        assert line in md
    return json.loads((out / "output_layer.json").read_text())["results"]["1"]


def test_every_loss_has_its_rounds_ratio_and_peak(record):
    bench = load_benchmark("bench_output_layer")
    rows = record["64 x 1100"]
    assert set(bench.losses()) == set(rows)
    for row in rows.values():
        assert len(row["rounds"]) == 2 and row["min"] <= row["median"] <= row["max"]
        assert row["peak_buffers"] >= 0
    assert rows["cross_entropy"]["median"] == 1.0
    step = record["decoding step 40 x 1100, randn"]
    assert set(step) == set(bench.steps()) and step["log_softmax step"]["median"] == 1.0
    assert step["log entmax1.5 step"]["mean_support"] >= 1


@pytest.mark.parametrize("args, message", [
    (["--shapes", "64by1100"], "--shapes takes ROWSxVOCABULARY"),
    (["--threads", "two"], "--shapes takes ROWSxVOCABULARY,... and --threads numbers"),
    (["--checkpoint", "model.pt"], "--checkpoint and --data go together"),
    (["--checkpoint", "missing.pt", "--data", "."], "--checkpoint missing.pt: no such file"),
])
def test_bad_input_is_one_line_and_exit_status_1(tmp_path, args, message):
    done = run("--out", str(tmp_path / "out"), *args)
    assert done.returncode == 1 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_out_naming_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("kept\n")
    done = run("--out", str(tmp_path / "file"), "--shapes", "8x1100")
    assert done.returncode == 1 and "not a directory" in done.stderr
    assert (tmp_path / "file").read_text() == "kept\n"
