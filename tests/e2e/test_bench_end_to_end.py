"""benchmarks/bench_end_to_end.py run as a user types it: every row and ratio is in its
tables with its spread, fairseq's transformer starts from our softmax's weights and
decodes its checkpoint to the same hypotheses; the verdicts say "meets" only where the
whole range allows it; decoding in process runs on models prepared for inference as
fairseq-generate prepares them; kernel launches per step are a GPU's figure, absent on
the CPU. No timing is asserted."""

import copy
import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from fairseq.sequence_generator import SequenceGenerator
from torch.autograd import DeviceType

from helpers import REPO, fairseq_env, load_benchmark

RATIO = r"\d+\.\d\d \[\d+\.\d\d–\d+\.\d\d\]"  # median [min–max]
ROWS = ("fairseq transformer", "softmax", "topk", "topk [torch]")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("end-to-end")
    command = [sys.executable, "benchmarks/bench_end_to_end.py", "--quick", "--models", "demo",
               "--attn-fns", "topk", "--attn-impls", "torch", "--threads", "1",
               "--out", str(folder / "out"), "--work-dir", str(folder / "work")]
    done = subprocess.run(command, cwd=REPO, env=fairseq_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, done.stdout


@pytest.mark.slow
def test_quick_run_tables_hold_every_row_and_ratio_with_its_spread(quick_run):
    folder, stdout = quick_run
    table = (folder / "out" / "end_to_end.md").read_text()
    assert table in stdout
    for line in ("- command: `python benchmarks/bench_end_to_end.py --quick", "- commit: `",
                 "- machine: ", "Device `cpu`"):
        assert line in table
    for section in ("### demo model: training", "### demo model: generation"):
        part = table.split(section)[1].split("###")[0]
        header = part.splitlines()[2]
        for denominator in ("speed ÷ fairseq transformer", "speed ÷ our softmax",
                            "speed ÷ its [torch]", "target", "verdict"):
            assert f"| {denominator} |" in header
        lines = {line.split(" | ")[0][2:]: line.split(" | ") for line in part.splitlines()
                 if line.startswith("| ") and not line.startswith(("| row", "|---"))}
        assert set(lines) == set(ROWS)
        for cells in lines.values():
            assert re.fullmatch(RATIO.replace(r"\d\d", r"\d"), cells[1]), cells  # value
            assert re.fullmatch(RATIO, cells[2]) and re.fullmatch(RATIO, cells[3]), cells
        assert re.fullmatch(RATIO, lines["topk"][4])        # default ÷ its [torch]
        assert lines["softmax"][-2].startswith("≥ 1 ÷ fairseq transformer")
        assert lines["topk"][-2].startswith("≥ 1 ÷ its [torch]")
        assert lines["softmax"][-1].rstrip(" |") in ("meets", "meets (within spread)", "below")
    assert "fairseq-train words/s ÷ our softmax" in table


@pytest.mark.slow
def test_fairseq_transformer_has_our_softmax_weights_and_hypotheses(quick_run):
    folder, _ = quick_run
    record = json.loads((folder / "out" / "end_to_end.json").read_text())
    assert record["commit"] and record["machine"] and record["device"] == "cpu"
    result = record["results"]["demo"]
    assert result["checks"] == {"initial_weights_identical": True, "identical_hypotheses": 16,
                                "sentences": 16}
    rows = result["rows"]
    assert rows["fairseq transformer"]["flags"] == ["--arch", "transformer"]
    assert rows["fairseq transformer"]["decode_flags"] == rows["softmax"]["decode_flags"] == []
    assert rows["topk [torch]"]["decode_flags"] == [
        "--model-overrides", "{'attn_fn': 'topk', 'attn_impl': 'torch'}"]
    for row in rows.values():
        assert len(row["train_ms_per_batch"]) == len(row["words_per_second"]) == 2
        assert all(v > 0 for v in row["sentences_per_second"])
        assert row["kernel_launches_per_step"] is None  # the CPU launches no kernel
    # the copy fairseq's row decodes is fairseq's own class with our softmax's weights
    import torch
    from fairseq import checkpoint_utils
    from fairseq.models.transformer import TransformerModel

    import sparse_attn_plugin  # noqa: F401  (registers sparse_transformer for the checkpoint)

    work = folder / "work"
    (stock,), _ = checkpoint_utils.load_model_ensemble([str(work / "demo-as-fairseq.pt")])
    (ours,), _ = checkpoint_utils.load_model_ensemble([str(work / "demo-softmax.pt")])
    assert type(stock) is TransformerModel and type(ours) is not TransformerModel
    assert stock.state_dict().keys() == ours.state_dict().keys()
    assert all(torch.equal(v, ours.state_dict()[k]) for k, v in stock.state_dict().items())


def test_verdict_says_meets_only_where_the_whole_range_allows_it():
    bench = load_benchmark("bench_end_to_end")

    def stats(lo, hi):
        return {"median": (lo + hi) / 2, "min": lo, "max": hi}
    assert bench.verdict(stats(0.96, 1.1), 0.95, strict=True) == "meets"
    assert bench.verdict(stats(0.93, 0.97), 0.95, strict=True) == "within spread"
    assert bench.verdict(stats(0.80, 0.94), 0.95, strict=True) == "below"
    assert bench.verdict(stats(0.97, 1.02), 1.0, strict=False) == "meets (within spread)"
    assert bench.verdict(stats(0.90, 0.99), 1.0, strict=False) == "below"
    assert bench.verdict(None, 1.0, strict=False) == "n/a"


def test_targets_name_their_denominator_per_device():
    bench = load_benchmark("bench_end_to_end")
    rows = {r.label: r for r in bench.make_rows(["entmax_alpha", "hard"], ["torch", "triton"])}
    assert list(rows) == ["fairseq transformer", "softmax", "entmax_alpha", "entmax_alpha [torch]",
                          "entmax_alpha [triton]", "hard (decoder self + cross)"]
    assert bench.target(rows["softmax"], "train", "cpu") == ("÷ fairseq transformer", 1.0, False)
    assert bench.target(rows["entmax_alpha"], "train", "cuda") == ("÷ our softmax", 0.9, True)
    assert bench.target(rows["entmax_alpha"], "generate", "cuda") == ("÷ our softmax", 0.9, True)
    assert bench.target(rows["hard (decoder self + cross)"], "train", "cuda") == (
        "÷ our softmax", 0.95, True)
    assert bench.target(rows["entmax_alpha"], "train", "cpu") == ("÷ its [torch]", 1.0, False)
    assert bench.target(rows["hard (decoder self + cross)"], "train", "cpu") is None
    assert bench.target(rows["entmax_alpha [triton]"], "train", "cuda") is None
    assert bench.row_overrides(rows["entmax_alpha [triton]"]) == [
        "--model-overrides", "{'attn_fn': 'entmax_alpha', 'attn_impl': 'triton'}"]
    assert bench.fairseq_arch("iwslt") == "transformer_iwslt_de_en"
    assert bench.row_flags(rows["hard (decoder self + cross)"], "demo") == [
        "--decoder-self-attn-fn", "hard", "--decoder-cross-attn-fn", "hard"]


@pytest.mark.parametrize("flags,message", [
    (["--fp16"], "--fp16 needs --device cuda"),
    (["--attn-fns", "nosuch"], "unknown or unusable model, normaliser or implementation: nosuch"),
    (["--updates", "3"], "--updates must be at least 10"),
])
def test_bad_settings_get_one_line_and_exit_status_1_and_write_nothing(tmp_path, flags,
                                                                        message):
    command = [sys.executable, "benchmarks/bench_end_to_end.py", "--models", "demo", *flags,
               "--out", str(tmp_path / "out")]
    done = subprocess.run(command, cwd=REPO, env=fairseq_env(), capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert done.stderr.startswith("bench_end_to_end.py: error: ")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_run_stopped_in_a_later_model_keeps_the_tables_of_the_earlier_ones(tmp_path,
                                                                             monkeypatch):
    """Each model's tables are written once it is measured: the GPU report stops a part
    at its time budget, and what was measured before stays."""
    bench = load_benchmark("bench_end_to_end")
    measure = bench.run_model

    def run_model(data, model, *rest):
        if model == "iwslt":
            raise KeyboardInterrupt  # as SIGINT would, in the second model
        return measure(data, model, *rest)
    monkeypatch.setattr(bench, "run_model", run_model)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--quick", "--in-process", "--models", "demo,iwslt", "--attn-fns", "topk",
                    "--attn-impls", "", "--threads", "1", "--out", tmp_path])
    record = json.loads((tmp_path / "end_to_end.json").read_text())
    assert list(record["results"]) == ["demo"]
    assert "## demo model" in (tmp_path / "end_to_end.md").read_text()


def test_rounds_are_seven_by_default_and_the_flag_still_sets_them(tmp_path):
    bench = load_benchmark("bench_end_to_end")
    assert bench.parse_args(["--out", str(tmp_path)]).rounds == 7
    assert bench.parse_args(["--out", str(tmp_path), "--rounds", "3"]).rounds == 3


@pytest.fixture(scope="module")
def in_process_run(tmp_path_factory):
    """A quick ``--in-process`` run with every model fairseq's beam search decodes
    recorded: ``(bench, record, report, decoded models)``."""
    bench = load_benchmark("bench_end_to_end")
    out = tmp_path_factory.mktemp("in-process")
    decoded = []
    generate = SequenceGenerator.generate

    def recording(self, models, sample, **kwargs):
        decoded.extend(self.model.models)
        return generate(self, models, sample, **kwargs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SequenceGenerator, "generate", recording)
        bench.main(["--quick", "--in-process", "--models", "demo", "--attn-fns", "hard",
                    "--attn-impls", "", "--threads", "1", "--out", out])
    return (bench, json.loads((out / "end_to_end.json").read_text()),
            (out / "end_to_end.md").read_text(), decoded)


def test_in_process_decoding_runs_on_models_prepared_for_inference(in_process_run):
    """As fairseq-generate's ``prepare_for_inference_`` leaves them: prepared once, and
    cross-attention asked for no weights (no ``--print-alignment``)."""
    _, record, _, decoded = in_process_run
    assert len({id(model) for model in decoded}) == len(record["results"]["demo"]["rows"])
    for model in decoded:
        assert model._is_generation_fast
        assert not any(layer.need_attn for layer in model.decoder.layers)


def test_in_process_tables_give_every_ratio_its_spread_and_no_launches_on_the_cpu(
        in_process_run):
    _, record, report, _ = in_process_run
    rows = record["results"]["demo"]["rows"]
    for row in rows.values():
        assert row["kernel_launches_per_step"] is None
        for by_denominator in row["ratios"].values():
            for stats in by_denominator.values():
                assert stats is None or len(stats["rounds"]) == 2
    for section in ("### demo model: training", "### demo model: generation"):
        lines = [line.split(" | ") for line in report.split(section)[1].split("###")[0]
                 .splitlines() if line.startswith("| ") and not line.startswith("|---")]
        header, body = lines[0], lines[1:]
        assert len(body) == 3 and all(len(cells) == len(header) for cells in body)
        for cells in body:
            assert all(re.fullmatch(RATIO, cell) for cell in cells[2:4]), cells
    assert "kernel launches" not in report.lower()
    assert "prepared as fairseq-generate prepares it (`prepare_for_inference_`)" in report


def test_on_cuda_the_generation_table_gives_kernel_launches_per_step(in_process_run):
    bench, record, _, _ = in_process_run
    results = copy.deepcopy(record["results"])
    for i, row in enumerate(results["demo"]["rows"].values()):
        row["kernel_launches_per_step"] = 100.0 + i
    args = bench.parse_args(["--out", "unused", "--quick", "--in-process", "--models", "demo",
                             "--attn-fns", "hard", "--attn-impls", ""])
    args.device = "cuda"
    rows = bench.make_rows(args.names, args.impls)
    report = bench.render(results, rows, args, "python benchmarks/bench_end_to_end.py")
    generation = report.split("### demo model: generation")[1]
    lines = [line.strip("| ").split(" | ") for line in generation.splitlines()
             if line.startswith("| ") and not line.startswith("|---")]
    column = lines[0].index("kernel launches per step")
    assert {cells[0]: cells[column] for cells in lines[1:]} == {
        label: f"{100 + i:.1f}" for i, label in enumerate(results["demo"]["rows"])}
    assert "each sample timed in this process the device's time between two CUDA events" \
        in report
    assert "Kernel launches per step: the kernels torch's profiler lists" in report
    assert "kernel launches" not in report.split("### demo model: training")[1].split(
        "###")[0]


def test_kernels_are_the_device_events_less_copies_fills_and_annotations():
    from sparse_attn_experiments.timing import count_kernels

    def event(name, device=DeviceType.CUDA, annotation=False):
        return SimpleNamespace(name=name, device_type=device, is_user_annotation=annotation)
    events = [event("void at::native::vectorized_elementwise_kernel<4>"),
              event("triton_per_fused_softmax_0"),
              event("Memcpy HtoD (Pageable -> Device)"), event("Memset (Device)"),
              event("## forward ##", annotation=True),
              event("aten::softmax", device=DeviceType.CPU),
              event("cudaLaunchKernel", device=DeviceType.CPU)]
    assert count_kernels(events) == 2
