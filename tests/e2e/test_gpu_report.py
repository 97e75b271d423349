"""benchmarks/gpu_report.py rehearsed on the CPU as it runs on a GPU machine: every part
runs as its own command and lands in the report with its status, a part past its budget
is stopped and the others still run, and ``pack`` keeps the wheels that must travel. The
GPU tier's tests are skipped here with their one reason; the benchmarks run at tiny sizes.
No timing is asserted."""

import json
import subprocess
import sys

import pytest

from helpers import REPO, fairseq_env, load_benchmark

PARTS = ("kernels", "decode_ops", "end_to_end", "hard_attention", "fused_attention", "fairseq")


def gpu_report(*args):
    return subprocess.run([sys.executable, "benchmarks/gpu_report.py", *map(str, args)],
                          cwd=REPO, env=fairseq_env(), capture_output=True, text=True)


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-report") / "gpu"
    done = gpu_report("run", "--out", out, "--rehearse")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out, done


@pytest.mark.slow
def test_the_rehearsal_runs_every_part_into_one_report(rehearsal):
    out, done = rehearsal
    report = json.loads((out / "report.json").read_text())
    assert set(report["parts"]) == set(PARTS)
    env = report["environment"]
    assert env["rehearsal"] is True and env["device"] == "cpu" and env["commit"]
    for key in ("torch", "triton", "python", "machine", "nvidia_smi"):
        assert key in env
    readme = (out / "README.md").read_text()
    assert readme in done.stdout and readme.startswith("# GPU report (CPU rehearsal)")
    for name in PARTS:
        part = report["parts"][name]
        assert part["exit_status"] == 0 and not part["stopped_at_budget"], (name, part)
        assert (out / "logs" / f"{name}.log").exists()
        assert f"| {name} |" in readme
    for tier in ("kernels", "fairseq"):  # collected, each test skipped for the one reason
        tests = report["parts"][tier]["tests"]
        assert tests["tests"] > 0 and tests["skipped"] == tests["tests"], tests
        assert tests["skip_reasons"] == [
            "no CUDA device: the GPU tier (make test-gpu) runs on a machine with one"]
    assert "| kernels | GPU tier: Triton and compiled kernels against the eager path, no sync " \
           "in a step | skipped |" in readme
    assert (out / "decode_ops" / "decode_ops.md").exists()
    fused = (out / "fused_attention" / "fused_attention.md").read_text()
    assert "The fused kernels need CUDA: not timed here." in fused
    assert "| sparsemax eager |" in fused


@pytest.mark.slow
def test_the_end_to_end_part_measures_in_process(rehearsal):
    out, _ = rehearsal
    record = json.loads((out / "end_to_end" / "end_to_end.json").read_text())
    assert record["settings"]["in_process"] is True and record["settings"]["impls"] == []
    result = record["results"]["demo"]
    assert result["checks"]["identical_hypotheses"] == result["checks"]["sentences"] == 16
    assert {"fairseq transformer", "softmax", "topk", "sparsemax", "entmax15", "entmax_alpha",
            "hard (decoder self + cross)"} == set(result["rows"])
    for row in result["rows"].values():
        assert len(row["words_per_second"]) == len(row["sentences_per_second"]) == 2
        assert all(v > 0 for v in row["words_per_second"] + row["sentences_per_second"])
    table = (out / "end_to_end" / "end_to_end.md").read_text()
    assert "sentences/s (in process)" in table and "target words/s (in process)" in table
    assert (out / "hard_attention" / "hard_attention.md").exists()


@pytest.mark.slow
def test_a_part_past_its_budget_is_stopped_and_the_others_still_run(tmp_path):
    out = tmp_path / "gpu"
    done = gpu_report("run", "--out", out, "--rehearse",
                      "--part-budget", "kernels=1,end_to_end=1,fairseq=1")
    assert done.returncode == 0, done.stderr[-2000:]
    parts = json.loads((out / "report.json").read_text())["parts"]
    for name in ("kernels", "end_to_end", "fairseq"):
        assert parts[name]["stopped_at_budget"] and parts[name]["budget_s"] == 1, parts[name]
    assert parts["hard_attention"]["exit_status"] == 0
    assert not parts["hard_attention"]["stopped_at_budget"]
    readme = (out / "README.md").read_text()
    assert readme.count("stopped at its 1 s budget") == 3


def test_pack_keeps_every_wheel_but_the_large_ones_the_image_has(tmp_path):
    wheels, to = tmp_path / "wheels", tmp_path / "to"
    wheels.mkdir()
    names = ["fairseq_fixed-0.12.3.1-cp312-cp312-manylinux_2_28_x86_64.whl",
             "numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl",
             "scikit_learn-1.9.1-cp312-cp312-manylinux_2_28_x86_64.whl",
             "sparse_attn-0.1.0-py3-none-any.whl", "hydra_core-1.3.2-py3-none-any.whl"]
    for name in names:
        (wheels / name).write_bytes(b"x" * 1024)
    done = gpu_report("pack", "--wheels", wheels, "--to", to)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in to.iterdir()) == sorted(
        n for n in names if not n.startswith(("numpy", "scikit_learn")))
    assert done.stdout == f"gpu_report pack: 3 of 5 wheels, 0.0 MiB, in {to}\n"


@pytest.mark.parametrize("args,message", [
    (["pack", "--wheels", "{tmp}", "--to", "{tmp}/to"], "gpu_report.py: error: pack: no wheels in"),
    (["run", "--out", "{tmp}/out"], "no CUDA device is visible"),
    (["render", "--out", "{tmp}/out"], "gpu_report.py: error: render: no report.json in"),
    (["run", "--out", "{tmp}/out", "--rehearse", "--part-budget", "nosuch=3"],
     "NAME=SECONDS, NAME one of kernels, decode_ops, end_to_end, hard_attention, "
     "fused_attention, fairseq"),
])
def test_bad_input_gets_one_line_and_writes_nothing(tmp_path, args, message):
    done = gpu_report(*(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "to").exists()



@pytest.mark.slow
def test_render_writes_the_readme_again_from_the_report_and_junit_files(rehearsal):
    out, _ = rehearsal
    readme = (out / "README.md").read_text()
    (out / "README.md").write_text("stale\n")
    done = gpu_report("render", "--out", out)
    assert done.returncode == 0, done.stderr
    assert (out / "README.md").read_text() == readme and readme in done.stdout


@pytest.mark.slow
def test_commit_names_the_files_that_ran_where_git_metadata_cannot(tmp_path):
    out = tmp_path / "gpu"
    done = gpu_report("run", "--out", out, "--rehearse", "--commit", "6a5a337",
                      "--part-budget",
                      "kernels=1,decode_ops=1,end_to_end=1,hard_attention=1,fairseq=1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "report.json").read_text())["environment"]["commit"] == "6a5a337"
    assert "- commit: `6a5a337`" in (out / "README.md").read_text()


JUNIT = """<testsuites><testsuite tests="4" failures="1" errors="0" skipped="2">
<testcase classname="t" name="passes"/>
<testcase classname="t" name="breaks"><failure message="assert 1 == 2">...</failure></testcase>
<testcase classname="t" name="overflows"><skipped type="pytest.xfail" message="fp16 overflow"/>
</testcase>
<testcase classname="t" name="needs_cuda"><skipped type="pytest.skip" message="no CUDA"/>
</testcase></testsuite></testsuites>"""


def test_junit_counts_expected_failures_apart_from_skips(tmp_path):
    (tmp_path / "junit.xml").write_text(JUNIT)
    tests = load_benchmark("gpu_report").junit_summary(tmp_path / "junit.xml")
    assert (tests["passed"], tests["failed"], tests["xfailed"], tests["skipped"]) == (1, 1, 1, 1)
    assert tests["xfail_reasons"] == ["fp16 overflow"] and tests["skip_reasons"] == ["no CUDA"]
    assert tests["failures"] == ["t::breaks: assert 1 == 2"]
