"""benchmarks/bench_fused_attention.py, as typed, on the CPU (the GPU report's rehearsal):
every kind's eager row against SDPA with its spread, the fused rows said to need CUDA, and
one line with exit status 1 for bad input, writing nothing."""

import json
import subprocess
import sys

from sparse_attn_plugin.normalizers.fused_attention import KINDS

from helpers import REPO, fairseq_env


def run(*args):
    return subprocess.run([sys.executable, "benchmarks/bench_fused_attention.py", *args],
                          cwd=REPO, env=fairseq_env(), capture_output=True, text=True)


def test_every_kind_is_timed_against_sdpa(tmp_path):
    done = run("--out", str(tmp_path), "--device", "cpu", "--quick")
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "fused_attention.json").read_text())
    for rows in record["results"].values():
        assert set(rows) == {"sdpa", *(f"{kind} eager" for kind in KINDS)}
        assert rows["sdpa"]["median"] == 1.0 and all(r["median"] > 0 for r in rows.values())
    md = (tmp_path / "fused_attention.md").read_text()
    assert "- commit:" in md and "The fused kernels need CUDA: not timed here." in md


def test_bad_input_is_one_line_and_exit_status_1(tmp_path):
    done = run("--out", str(tmp_path / "out"), "--device", "cpu", "--repeats", "1")
    assert done.returncode == 1 and "--repeats must be at least 2" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
