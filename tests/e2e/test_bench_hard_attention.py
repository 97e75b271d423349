"""benchmarks/bench_hard_attention.py at a tiny scale on the CPU: every decoding and
operation in its tables, every ratio with its spread over the rounds, the models decoded
prepared for inference as fairseq-generate prepares them, the CPU profile alone and no
kernel launches; its GPU report's text and tables from given rankings and launches; its
refusals of a GPU setting without a GPU. No timing is asserted."""

import argparse
import copy
import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from fairseq.sequence_generator import SequenceGenerator

from helpers import REPO, fairseq_env, load_benchmark

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
ROUNDS = 2
SMALL_RUN = ["--models", "small", "--sentences", "8", "--batch-size", "4", "--length", "3",
             "--rounds", str(ROUNDS), "--op-rounds", str(ROUNDS)]
RATIO = r"\d+\.\d\d \[\d+\.\d\d–\d+\.\d\d\]"  # median [min–max]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_hard_attention")


@pytest.fixture(scope="module")
def cpu_run(bench, tmp_path_factory):
    """The run's record and report, and every model fairseq's beam search decoded."""
    out = tmp_path_factory.mktemp("hard-attention")
    decoded = []
    generate = SequenceGenerator.generate

    def recording(self, models, sample, **kwargs):
        decoded.extend(models)
        return generate(self, models, sample, **kwargs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SequenceGenerator, "generate", recording)
        bench.main(["--out", out, "--device", "cpu", *SMALL_RUN])
    return json.loads((out / "hard_attention.json").read_text()), (
        out / "hard_attention.md").read_text(), decoded


def test_cpu_run_reports_every_decoding_and_operation(bench, cpu_run):
    record, report, _ = cpu_run
    assert (record["device"], record["precision"]) == ("cpu", "float32")
    results = record["results"]["small"]
    generation = results["generation"]
    assert set(generation) == set(bench.CONFIGS)
    for r in generation.values():
        assert len(r["sentences_per_second"]) == len(r["attend_share"]) == ROUNDS
        assert all(v > 0 for v in r["sentences_per_second"])
        assert all(0 < share < 1 for share in r["attend_share"])
        assert len(r["ratio"]["rounds"]) == len(r["predicted"]["rounds"]) == ROUNDS
        assert r["kernel_launches_per_step"] is None  # the CPU launches no kernel
    assert generation["softmax"]["ratio"]["rounds"] == [1.0] * ROUNDS
    for calls in results["attention_op"].values():
        assert all(seconds > 0 for seconds in calls["median_s"].values())
        assert len(calls["ratio"]["rounds"]) == ROUNDS
    assert len(results["values_on_demand"]["ratio"]["rounds"]) == ROUNDS
    assert "| hard cross + self |" in report and "- commit:" in report
    assert "Device `cpu`, float32." in report
    assert report.count("(target 1 m") == len(bench.TARGETS)
    assert "kernel launches" not in report.lower()


def table(report, title):
    """The rows of the first table after ``title``, as lists of cells, its header first."""
    lines = report.split(title)[1].split("\n\n")[1].splitlines()
    return [line.strip("| ").split(" | ") for line in lines if not line.startswith("|---")]


def test_every_ratio_has_its_spread(cpu_run):
    _, report, _ = cpu_run
    generation = table(report, "## small model: generation")
    assert generation[0][2] == "÷ softmax" and len(generation) == 5
    for cells in generation[1:]:
        assert re.fullmatch(RATIO + r"( \(target 1 (met|missed)\))?", cells[2]), cells
        assert re.fullmatch(RATIO, cells[4]), cells        # ÷ softmax if only that changed
    operations = table(report, "one decoding step's attention")
    assert operations[0][-1] == "softmax op ÷ hard op" and len(operations) == 3
    assert all(re.fullmatch(RATIO, cells[-1]) for cells in operations[1:])
    assert re.search(r"at each of 3 steps, takes \d+\.\d \[\d+\.\d–\d+\.\d\]x the time",
                     report)


def test_every_decoded_model_is_prepared_for_inference(cpu_run):
    """As fairseq-generate's ``prepare_for_inference_`` leaves them: prepared once, and
    cross-attention asked for no weights (no ``--print-alignment``)."""
    _, _, decoded = cpu_run
    assert len({id(model) for model in decoded}) == 4
    for model in decoded:
        assert model._is_generation_fast
        assert not any(layer.need_attn for layer in model.decoder.layers)


def test_rounds_are_seven_by_default_and_the_flag_still_sets_them(bench):
    assert bench.parse_args(["--out", "unused"]).rounds == 7
    assert bench.parse_args(["--out", "unused", "--rounds", "3"]).rounds == 3


def test_cpu_run_profiles_self_cpu_time_alone(bench, cpu_run):
    record, report, _ = cpu_run
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
    for i, r in enumerate(results["small"]["generation"].values()):
        r["kernel_launches_per_step"] = 200.0 + i
    args = argparse.Namespace(device="cuda", device_name="NVIDIA H100 80GB HBM3",
                              precision="float16", batch_size=4, sentences=8, length=3,
                              rounds=ROUNDS, op_rounds=ROUNDS)
    report = bench.render(results, args, "python benchmarks/bench_hard_attention.py")
    assert "Device `NVIDIA H100 80GB HBM3`, float16." in report
    assert "the CPU targets (hard cross and hard cross + self at least as fast as softmax) " \
           "are not judged here" in report and "(target" not in report
    assert "synchronised before and after, so that share is GPU time" in report
    cuda_table = report.split("By share of self CUDA time")[1].split("###")[0]
    assert "| 1 | `void gemm_kernel` | `void gemm_kernel` | 60.0% | 60.0% |" in cuda_table
    assert "Every timed sample is the GPU's time between two CUDA events" in report
    generation = table(report, "## small model: generation")
    assert generation[0][-2:] == ["paper (GPU)", "kernel launches per step"]
    assert {cells[0]: cells[-2:] for cells in generation[1:]} == {
        name: [f"{bench.PAPER[name]:.2f}", f"{200 + i:.1f}"]  # the paper's Table 3 column
        for i, name in enumerate(results["small"]["generation"])}


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
