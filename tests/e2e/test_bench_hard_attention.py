"""benchmarks/bench_hard_attention.py at a tiny scale on the CPU: every decoding and
operation in its tables, the CPU profile alone; its GPU report's text and tables from
given rankings; its refusals of a GPU setting without a GPU. No timing is asserted."""

import argparse
import copy
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from helpers import REPO, fairseq_env, load_benchmark

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SMALL_RUN = ["--models", "small", "--sentences", "8", "--batch-size", "4", "--length", "3",
             "--rounds", "1", "--op-rounds", "1"]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_hard_attention")


@pytest.fixture(scope="module")
def cpu_run(bench, tmp_path_factory):
    out = tmp_path_factory.mktemp("hard-attention")
    bench.main(["--out", out, "--device", "cpu", *SMALL_RUN])
    return json.loads((out / "hard_attention.json").read_text()), (
        out / "hard_attention.md").read_text()


def test_cpu_run_reports_every_decoding_and_operation(bench, cpu_run):
    record, report = cpu_run
    assert (record["device"], record["precision"]) == ("cpu", "float32")
    results = record["results"]["small"]
    generation = results["generation"]
    assert set(generation) == set(bench.CONFIGS)
    for r in generation.values():
        assert r["sentences_per_second"] > 0 and 0 < r["attend_share"] < 1
    for calls in results["attention_op"].values():
        assert all(seconds > 0 for seconds in calls.values())
    assert "| hard cross + self |" in report and "- commit:" in report
    assert "Device `cpu`, float32." in report
    assert report.count("(target 1 m") == len(bench.TARGETS)


def test_cpu_run_profiles_self_cpu_time_alone(bench, cpu_run):
    record, report = cpu_run
    profiles = record["results"]["small"]["profile"]
    assert set(profiles) == set(bench.PROFILED)
    for by_kind in profiles.values():
        assert list(by_kind) == ["CPU"]
        assert 0 < len(by_kind["CPU"]) <= 8
        assert all(0 <= share <= 1 for _, share in by_kind["CPU"])
    assert "by share of self CPU time in one decoded batch" in report
    assert "CUDA" not in report and report.count("| rank |") == 1


def test_gpu_report_compares_with_the_paper_and_judges_no_cpu_target(bench, cpu_run):
    results = copy.deepcopy(cpu_run[0]["results"])
    for by_kind in results["small"]["profile"].values():
        by_kind["CUDA"] = [["void gemm_kernel", 0.6], ["void softmax_kernel", 0.4]]
    args = argparse.Namespace(device="cuda", device_name="NVIDIA H100 80GB HBM3",
                              precision="float16", batch_size=4, sentences=8, length=3,
                              rounds=1, op_rounds=1)
    report = bench.render(results, args, "python benchmarks/bench_hard_attention.py")
    assert "Device `NVIDIA H100 80GB HBM3`, float16." in report
    assert "the CPU targets (hard cross and hard cross + self at least as fast as softmax) " \
           "are not judged here" in report and "(target" not in report
    assert "synchronised before and after, so that share is GPU time" in report
    cuda_table = report.split("By share of self CUDA time")[1].split("###")[0]
    assert "| 1 | `void gemm_kernel` | `void gemm_kernel` | 60.0% | 60.0% |" in cuda_table
    hard_cross = next(line for line in report.splitlines() if line.startswith("| hard cross |"))
    assert hard_cross.endswith(" | 1.25 |")                 # the paper's Table 3 column


@pytest.mark.parametrize("name", ["self_device_time_total", "self_cuda_time_total"])
def test_cuda_ranking_reads_the_self_time_the_installed_torch_names(bench, name):
    events = [SimpleNamespace(key="aten::mm", **{name: 1.0}),
              SimpleNamespace(key="aten::bmm", **{name: 3.0})]
    assert bench.ranking(events, bench.SELF_TIMES["CUDA"], top=1) == [("aten::bmm", 0.75)]


@pytest.mark.parametrize("flags,message", [
    (["--fp16"], "--fp16 needs --device cuda"),
    (["--device", "cuda"], "--device cuda: no CUDA device is visible"),
])
def test_gpu_settings_without_a_gpu_are_refused_in_one_line(tmp_path, flags, message):
    env = dict(fairseq_env(), CUDA_VISIBLE_DEVICES="")       # no GPU, whatever the machine
    command = [sys.executable, "benchmarks/bench_hard_attention.py", "--out",
               str(tmp_path / "out"), *SMALL_RUN, *flags]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"bench_hard_attention.py: error: {message} (see " \
                          "bench_hard_attention.py --help)\n"
    assert not (tmp_path / "out").exists()
