"""benchmarks/bench_entmax_loss_training.py, as typed, on the synthetic corpus: every
criterion row timed against cross-entropy in training and decoding, its record written;
a folder with no fairseq dictionary is one line and exit status 1."""

import json
import subprocess
import sys

from helpers import REPO, fairseq_env, load_benchmark


def run(*args):
    return subprocess.run([sys.executable, "benchmarks/bench_entmax_loss_training.py", *args],
                          cwd=REPO, env=fairseq_env(), capture_output=True, text=True)


def test_every_criterion_is_timed_against_cross_entropy(synthetic_bin, tmp_path):
    done = run("--data", str(synthetic_bin), "--out", str(tmp_path), "--rounds", "2",
               "--threads", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    md = (tmp_path / "entmax_loss_training.md").read_text()
    assert md in done.stdout
    for line in ("- command:", "- commit:", "- machine:", "| entmax_loss 1.5 |", "≥ 0.8 ("):
        assert line in md
    record = json.loads((tmp_path / "entmax_loss_training.json").read_text())
    rows = load_benchmark("bench_entmax_loss_training").ROWS
    for part in ("training", "decoding"):
        assert set(record[part]) == set(rows)
        assert record[part]["cross_entropy"]["median"] == 1.0
        assert all(len(row["rounds"]) == 2 and row["median"] > 0
                   for row in record[part].values())


def test_a_folder_without_a_dictionary_is_refused(tmp_path):
    done = run("--data", str(tmp_path), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "no fairseq dictionary there" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
