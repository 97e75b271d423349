"""``sparse-attn-compare`` as typed says no more than what ran: the help names every
stopping limit of ``--smoke``, a progress bar stops at the updates a row trained (never at
a cap it did not reach), every row records how far it trained, a row trained to another
point than softmax gets its difference without a paired test (in the table and in the
JSON), and a training flag this machine cannot train with is refused before anything is
written."""

import json
import re
import subprocess

import pytest

from sparse_attn_experiments import compare

from helpers import REPO, fairseq_env

COMPARE = str(REPO / ".venv" / "bin" / "sparse-attn-compare")
#: The smallest comparison the other tests run (test_compare.py's TINY), two rows.
TINY = ["--train-size", "200", "--eval-size", "30", "--max-updates", "12",
        "--validate-every", "6", "--rows", "softmax,entmax15"]


def typed(*argv, cwd):
    return subprocess.run([COMPARE, *map(str, argv)], capture_output=True, text=True,
                          cwd=cwd, env=fairseq_env())


def test_the_help_and_the_docs_state_every_limit_of_a_smoke_run(tmp_path):
    """``--smoke`` stops a row at the update cap or the time budget, whichever comes first:
    both are in --help and in the flags' table (docs/comparing.md), as are the folders
    --out and --work-dir create."""
    smoke = compare.SCHEDULES["smoke"]
    shown = typed("--help", cwd=tmp_path)
    assert shown.returncode == 0
    help_text = " ".join(shown.stdout.split())
    assert (f"each row stops after {smoke.max_update} updates or {smoke.minutes:g} minutes of "
            "training, whichever comes first") in help_text
    assert "rows may stop at different points" in help_text
    assert "the folder the report goes to, created with its parents where missing" in help_text
    table = " ".join((REPO / "docs" / "comparing.md").read_text().split())
    assert (f"| `--smoke` | each row stops after {smoke.max_update} updates or "
            f"{smoke.minutes:g} minutes of training, whichever comes first") in table


@pytest.mark.skipif("__import__('torch').cuda.is_available()",
                    reason="a GPU trains with --fp16")
def test_fp16_training_without_a_gpu_is_refused_before_anything_runs(tmp_path):
    refused = typed(*TINY, "--train-flags", "--fp16", "--out", tmp_path / "out",
                    "--work-dir", tmp_path / "work", cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        "sparse-attn-compare: error: --train-flags '--fp16': fairseq-train cannot train with "
        "--fp16 without a GPU, and this machine shows none (torch.cuda.is_available() is "
        "False)\n")
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


def _bar_frames(stderr: str, row: str):
    """The frames a row's training bar drew (tqdm redraws in place with carriage returns)."""
    return [frame for frame in re.split(r"[\r\n]", stderr) if f"{row} train" in frame]


@pytest.mark.slow
def test_rows_stopped_at_different_points_are_not_tested_as_comparable(tmp_path):
    """Every row stopped by a tiny time budget: the bars end at the updates trained, not
    at the cap, and say why; the record gives each row's updates and epoch as fairseq's log
    has them. Then softmax's record made to say it reached the 12-update cap (as a quiet
    machine would have): run again, the reused rows stopped at different points, and
    entmax15's difference is printed without a test, in the table and the JSON."""
    out, work = tmp_path / "out", tmp_path / "work"
    argv = [*TINY, "--minutes-per-row", "0.001", "--out", out, "--work-dir", work]
    ran = typed(*argv, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    rows = json.loads((out / "comparison.json").read_text())["rows"]
    for row in rows:
        assert row["stopped"] == "time budget" and row["updates"] < 12
        log = (work / "tiny" / row["attention"] / "train.log").read_text()
        logged = [int(n) for n in re.findall(r'"(?:train_|valid_)?num_updates": "?(\d+)', log)]
        epoch = max(int(n) for n in re.findall(r'"epoch": "?(\d+)', log))
        assert row["updates"] == max(logged) and row["epochs"] == epoch
        frames = _bar_frames(ran.stderr, row["attention"])
        assert frames and f"{row['updates']}/12" in frames[-1]
        assert "time budget of 0.00102 min ended" in frames[-1]  # 0.000017 hours
        assert not any("12/12" in frame for frame in frames)
        assert (f"BLEU {row['bleu']['test']:.2f} after {row['updates']} of 12 updates, "
                f"epoch {epoch} (time budget ended)") in ran.stdout
    softmax, entmax = rows
    assert ("bleu_vs_softmax" in entmax) == (entmax["updates"] == softmax["updates"])

    folder = work / "tiny" / "softmax"
    for name in ("trained.json", "row.json"):
        record = json.loads((folder / name).read_text())
        record.update(updates=12, stopped="cap")
        (folder / name).write_text(json.dumps(record))
    again = typed(*argv, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("finished before, reused") == 2
    rows = json.loads((out / "comparison.json").read_text())["rows"]
    difference = rows[1]["bleu"]["test"] - rows[0]["bleu"]["test"]
    why = (f"entmax15 trained {rows[1]['updates']} updates (time budget ended), softmax 12 "
           "(update cap reached)")
    assert "bleu_vs_softmax" not in rows[1]
    assert rows[1]["bleu_vs_softmax_untested"] == {"why": why,
                                                   "difference": {"test": difference}}
    table = (out / "README.md").read_text()
    assert f"| entmax15 | {difference:+.2f}, no test ({why}) |" in table
    assert "gets its difference with the reason and no test" in table
    assert "entmax15 trained to another point than softmax" in table
    assert f"no paired test for entmax15: {why}" in again.stdout


def test_which_rows_count_as_trained_to_the_same_point_as_softmax():
    """The same number of updates, both converged, or one converged before the cap the
    other reached: tested. The time budget ending either at another number of updates,
    two different caps, or a cap met before the other converged: not tested, in the paired
    table and in the tuned length penalties' table alike."""
    from types import SimpleNamespace

    from sparse_attn_experiments.comparison.lenpen import KEY as TUNED
    from sparse_attn_experiments.comparison.lenpen import _pair_with_softmax
    from sparse_attn_experiments.comparison.paired import stopped_apart
    from sparse_attn_experiments.comparison.report import lenpen_table

    def row(name, updates, stopped):
        return {"attention": name, "updates": updates, "stopped": stopped}

    softmax_cap = row("softmax", 200, "cap")
    assert stopped_apart(row("entmax15", 200, "cap"), softmax_cap) is None
    assert stopped_apart(row("entmax15", 150, "converged"), softmax_cap) is None
    assert stopped_apart(row("entmax15", 150, "converged"), row("softmax", 90, "converged")) \
        is None
    assert stopped_apart(row("entmax15", 200, "time budget"), row("softmax", 200, "cap")) \
        is None
    assert stopped_apart(row("entmax15", 200, "cap"), row("softmax", 153, "time budget")) == (
        "entmax15 trained 200 updates (update cap reached), softmax 153 (time budget ended)")
    assert stopped_apart(row("entmax15", 180, "time budget"), row("softmax", 153, "time "
                                                                  "budget"))
    assert stopped_apart(row("entmax15", 300, "cap"), softmax_cap)  # another cap
    assert stopped_apart(row("entmax15", 200, "cap"), row("softmax", 250, "converged"))

    tuned = {"grid": ["1"], "valid": {"1": 30.0}, "lenpen": "1",
             "length_ratio": {"test": 1.0}}
    rows = [{**row("softmax", 153, "time budget"), TUNED: {**tuned, "bleu": {"test": 30.0}}},
            {**row("entmax15", 200, "cap"), TUNED: {**tuned, "bleu": {"test": 32.5},
                                                    "vs_softmax": {"test": {}}}}]
    _pair_with_softmax(rows, "no work folder", SimpleNamespace(tests={"test": "t"}))
    why = "entmax15 trained 200 updates (update cap reached), softmax 153 (time budget ended)"
    assert "vs_softmax" not in rows[1][TUNED]
    assert rows[1][TUNED]["vs_softmax_untested"] == {"why": why, "difference": {"test": 2.5}}
    table = lenpen_table(rows, {"softmax": "softmax", "entmax15": "entmax15"},
                         SimpleNamespace(tests={"test": "t"}))
    assert f"| entmax15 | 1 (30.00) | 32.50 (1.000); +2.50, no test ({why}) |" in table
    assert "gets its difference with the reason and no test" in table
