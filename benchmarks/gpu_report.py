"""The GPU verdict in one command: the GPU tier of tests, the end-to-end GPU benchmark and
hard retrieval decoding at the paper's size, written to one folder that names the device,
driver, torch, triton and commit. Each part is a command of its own, stopped at its own
time budget (SIGINT first, so pytest still writes its report), so a slow part never costs
the others their results. ``--rehearse`` runs the same parts on the CPU at tiny sizes.

    make gpu-report TORCH=system PYTHON=python3 WHEELS=.gpu/wheels WITHOUT="meteor lint hf" \\
        PUBLISH=results                        # on the GPU machine: results/gpu/
    python benchmarks/gpu_report.py run --out DIR [--rehearse] [--budget-s 490]
    python benchmarks/gpu_report.py pack --wheels DIR --to .gpu/wheels   # what travels
    python benchmarks/gpu_report.py render --out DIR      # its README again from its files
"""

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from sparse_attn_plugin.command_line import CommandParser

REPO = Path(__file__).resolve().parent.parent
#: Seconds a part is given after SIGINT to write its report, before it is killed.
GRACE_S = 20
#: pytest-xdist workers of the GPU tier (the GPU machine has 16 cores).
WORKERS = 8
#: The largest wheels (3 MB or more each) of distributions that the GPU machines' image
#: ("cuda", read 2026-11-17: the device tool's KINDS.md) already has, in versions that
#: meet our needs (numpy 2.5): ``pack`` leaves them behind, and keeps every other wheel.
IMAGE_HAS = ("numpy", "scipy", "scikit_learn", "matplotlib", "pillow", "fonttools", "lxml",
             "cython")


@dataclass(frozen=True)
class Part:
    """One part of the report: its budget in seconds on the GPU and the command that
    runs it, given the part's folder and whether this is a rehearsal."""

    name: str
    budget_s: float
    command: Callable[[Path, bool], List[str]]
    title: str


def pytest_tier(*test_files: str) -> Callable[[Path, bool], List[str]]:
    def command(folder: Path, rehearse: bool) -> List[str]:
        return [sys.executable, "-m", "pytest", *(f"tests/gpu/{f}" for f in test_files), "-q", "-p",
                "no:cacheprovider", "-n", "1" if rehearse else str(WORKERS), "--dist",
                "loadgroup", f"--junitxml={folder / 'junit.xml'}"]
    return command


def end_to_end(folder: Path, rehearse: bool) -> List[str]:
    sizes = (["--device", "cpu", "--quick", "--models", "demo"] if rehearse
             else ["--device", "cuda", "--fp16", "--models", "demo,iwslt", "--rounds", "7"])
    return [sys.executable, "benchmarks/bench_end_to_end.py", "--out", str(folder),
            "--attn-impls", "", "--in-process", *sizes]


def hard_attention(folder: Path, rehearse: bool) -> List[str]:
    sizes = (["--device", "cpu", "--models", "small", "--sentences", "8", "--batch-size", "4",
              "--length", "3", "--rounds", "1", "--op-rounds", "1"] if rehearse
             else ["--device", "cuda", "--fp16", "--models", "base", "--sentences", "256",
                   "--batch-size", "128", "--length", "30", "--rounds", "7", "--op-rounds", "3"])
    return [sys.executable, "benchmarks/bench_hard_attention.py", "--out", str(folder), *sizes]


def decode_ops(folder: Path, rehearse: bool) -> List[str]:
    sizes = ["--device", "cpu", "--models", "demo"] if rehearse else ["--device", "cuda"]
    return [sys.executable, "benchmarks/bench_decode_ops.py", "--out", str(folder), *sizes]


def fused_attention(folder: Path, rehearse: bool) -> List[str]:
    sizes = (["--device", "cpu", "--quick"] if rehearse
             else ["--device", "cuda", "--dtype", "float16", "--repeats", "7"])
    return [sys.executable, "benchmarks/bench_fused_attention.py", "--out", str(folder), *sizes]


#: The parts in the order they run; the last one gets what is left of the total budget.
PARTS = (
    Part("kernels", 120, pytest_tier("test_gpu_kernels.py", "test_gpu_decode_sync.py",
                                     "test_gpu_timing.py", "test_gpu_fused_attention.py"),
         "GPU tier: Triton and compiled kernels against the eager path, no sync in a step"),
    Part("decode_ops", 40, decode_ops,
         "Operations and kernel launches per decoding step, every normaliser"),
    Part("end_to_end", 120, end_to_end,
         "End to end: every normaliser against our softmax and fairseq's transformer"),
    Part("hard_attention", 80, hard_attention,
         "Hard retrieval decoding at the WMT base size (Xu et al. 2021)"),
    Part("fused_attention", 40, fused_attention,
         "Attention in one call (fused Triton kernels) against scaled_dot_product_attention"),
    Part("fairseq", 100, pytest_tier("test_gpu_fairseq.py"),
         "GPU tier: fairseq-train --fp16 and fairseq-generate for every kind of attention"),
)


# --- running the parts ---------------------------------------------------------------------

def run_part(command: List[str], log: Path, budget_s: float, env: Dict[str, str]) -> dict:
    """Run ``command`` with its output in ``log``; past ``budget_s`` seconds send it
    SIGINT, and kill its process group :data:`GRACE_S` seconds later."""
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        stopped = False
        try:
            proc.wait(timeout=max(budget_s, 1))
        except subprocess.TimeoutExpired:
            stopped = True
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return {"exit_status": proc.returncode, "stopped_at_budget": stopped,
            "budget_s": round(budget_s), "seconds": round(time.monotonic() - started, 1)}


def junit_summary(path: Path) -> Optional[dict]:
    """A pytest junit report's counts (its suite's, which count each test once), its
    failures' first lines and the reasons of its skips and of its expected failures (xfail,
    which junit files count as skips); None if absent."""
    if not path.exists():
        return None
    root = ElementTree.parse(path).getroot()
    suite = next(root.iter("testsuite"))
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failed, reasons = [], {"skip_reasons": set(), "xfail_reasons": set()}
    xfailed = 0
    for case in root.iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error"):
                message = (child.get("message") or child.text or "").strip().splitlines()
                failed.append(f"{case.get('classname')}::{case.get('name')}: "
                              f"{message[0] if message else child.tag}"[:300])
            elif child.tag == "skipped":
                expected = child.get("type") == "pytest.xfail"
                xfailed += expected
                reasons["xfail_reasons" if expected else "skip_reasons"].add(
                    child.get("message", ""))
    bad = counts["failures"] + counts["errors"]
    return {"tests": counts["tests"], "failed": bad, "skipped": counts["skipped"] - xfailed,
            "xfailed": xfailed, "passed": counts["tests"] - bad - counts["skipped"],
            "failures": failed, **{key: sorted(values) for key, values in reasons.items()}}


def environment(rehearse: bool) -> dict:
    """The device, driver, torch, triton, Python and commit of this run."""
    import torch

    from sparse_attn_experiments.provenance import describe_machine, git_commit

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    driver = None
    if shutil.which("nvidia-smi"):
        query = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                "--format=csv,noheader"], capture_output=True, text=True)
        driver = query.stdout.strip() or query.stderr.strip()
    cuda = torch.cuda.is_available()
    return {"device": torch.cuda.get_device_name(0) if cuda else "cpu",
            "nvidia_smi": driver, "torch": torch.__version__, "cuda": torch.version.cuda,
            "triton": triton_version, "python": platform.python_version(),
            "commit": git_commit(), "machine": describe_machine(), "rehearsal": rehearse,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def run(args) -> dict:
    out = args.out
    (out / "logs").mkdir(parents=True, exist_ok=True)
    report = {"command": "python benchmarks/gpu_report.py " + " ".join(args.argv),
              "environment": environment(args.rehearse), "parts": {}}
    if args.commit:
        report["environment"]["commit"] = args.commit
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.rehearse:  # the tier skips on a CPU, which CI's skip policy fails in its own runs
        env.pop("CI", None)
    deadline = time.monotonic() + args.budget_s
    for index, part in enumerate(PARTS):
        left = deadline - time.monotonic()
        last = index == len(PARTS) - 1
        budget = min(args.part_budget.get(part.name, left if last else part.budget_s), left)
        folder = out / part.name
        folder.mkdir(exist_ok=True)
        command = part.command(folder, args.rehearse)
        print(f"gpu_report: {part.name} ({budget:.0f} s at most)", file=sys.stderr, flush=True)
        result = run_part(command, out / "logs" / f"{part.name}.log", budget, env)
        result["command"] = " ".join(repr(c) if c == "" or " " in c else c for c in command)
        result["tests"] = junit_summary(folder / "junit.xml")
        report["parts"][part.name] = result
        write_report(out, report)
    return report


# --- the report ----------------------------------------------------------------------------

def status(result: dict) -> str:
    if result["stopped_at_budget"]:
        return f"stopped at its {result['budget_s']} s budget"
    tests = result["tests"]
    if result["exit_status"] == 0:
        return "done" if not tests or tests["passed"] else "skipped"
    return f"failed (exit status {result['exit_status']})"


def tests_cell(tests: Optional[dict]) -> str:
    if tests is None:
        return "-"
    return (f"{tests['passed']} passed, {tests['failed']} failed, "
            f"{tests['xfailed']} xfail, {tests['skipped']} skipped")


def render(report: dict) -> str:
    from sparse_attn_plugin.markdown import markdown_table

    env = report["environment"]
    lines = ["# GPU report" + (" (CPU rehearsal)" if env["rehearsal"] else ""), "",
             f"- command: `{report['command']}`", f"- commit: `{env['commit']}`",
             f"- device: {env['device']}; nvidia-smi: {env['nvidia_smi'] or 'none'}",
             f"- torch {env['torch']} (CUDA {env['cuda']}), triton {env['triton']}, "
             f"Python {env['python']}", f"- machine: {env['machine']}", f"- date: {env['date']}",
             "", "Each part ran as its own command within its time budget; its output is in "
             "`logs/`, its files in the folder of its name.", ""]
    rows = []
    for part in PARTS:
        result = report["parts"].get(part.name)
        if result is None:
            rows.append([part.name, part.title, "not run", "-", "-"])
            continue
        rows.append([part.name, part.title, status(result), f"{result['seconds']:.0f}",
                     tests_cell(result["tests"])])
    lines.append(markdown_table(["part", "what", "status", "seconds", "tests"], rows))
    for name in (part.name for part in PARTS if part.name in report["parts"]):
        tests = report["parts"][name]["tests"]
        if tests and tests["failures"]:
            lines += [f"## {name}: failures", "", *(f"- `{f}`" for f in tests["failures"]), ""]
        if tests and tests["xfail_reasons"]:
            lines += [f"## {name}: expected failures", "",
                      *(f"- {r}" for r in tests["xfail_reasons"]), ""]
        if tests and tests["skip_reasons"] and not tests["passed"]:
            lines += [f"## {name}: skipped", "", *(f"- {r}" for r in tests["skip_reasons"]), ""]
    return "\n".join(lines) + "\n"


def rerender(out: Path) -> dict:
    """Read a report's tests again from its junit files and write its README anew (after a
    change to how they are summarised; the measurements stay as they were)."""
    report = json.loads((out / "report.json").read_text())
    for name, result in report["parts"].items():
        result["tests"] = junit_summary(out / name / "junit.xml")
    write_report(out, report)
    return report


def write_report(out: Path, report: dict) -> None:
    from sparse_attn_plugin.files import write_json_atomic, write_text_atomic

    write_json_atomic(out / "report.json", report)
    write_text_atomic(out / "README.md", render(report))


# --- the wheels that travel ----------------------------------------------------------------

def pack(args) -> List[Path]:
    """Copy the wheels of ``args.wheels`` into ``args.to``, leaving behind those of
    :data:`IMAGE_HAS` (the GPU machine has them): what travels to the GPU machine."""
    wheels = sorted(args.wheels.glob("*.whl"))
    args.to.mkdir(parents=True, exist_ok=True)
    kept = [w for w in wheels if w.name.split("-")[0].lower() not in IMAGE_HAS]
    for wheel in kept:
        shutil.copy2(wheel, args.to / wheel.name)
    size = sum(w.stat().st_size for w in kept)
    print(f"gpu_report pack: {len(kept)} of {len(wheels)} wheels, {size / 2**20:.1f} MiB, "
          f"in {args.to}")
    return kept


def budgets(text: str) -> Dict[str, float]:
    """``NAME=SECONDS,...`` for ``--part-budget``."""
    names = [p.name for p in PARTS]
    out = {}
    for item in filter(None, text.split(",")):
        name, _, seconds = item.partition("=")
        if name not in names or not seconds.replace(".", "", 1).isdigit():
            raise argparse.ArgumentTypeError(f"{item!r}: NAME=SECONDS, NAME one of "
                                             f"{', '.join(names)}")
        out[name] = float(seconds)
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    parser = CommandParser(description=__doc__.split("\n\n")[0], command="gpu_report.py")
    commands = parser.add_subparsers(dest="what", required=True)
    running = commands.add_parser("run", help="run the parts into --out")
    running.add_argument("--out", type=Path, required=True)
    running.add_argument("--rehearse", action="store_true",
                         help="the same parts on the CPU at tiny sizes (CI)")
    running.add_argument("--budget-s", type=float, default=490,
                         help="seconds for all parts together")
    running.add_argument("--commit", help="the commit whose files run, where the checkout's "
                         "git metadata is not (a working tree copied to the GPU machine)")
    running.add_argument("--part-budget", type=budgets, default={},
                         help="NAME=SECONDS,...: another budget for some parts")
    again = commands.add_parser("render", help="summarise a report's junit files again")
    again.add_argument("--out", type=Path, required=True)
    packing = commands.add_parser("pack", help="the wheels that travel to the GPU machine")
    packing.add_argument("--wheels", type=Path, required=True)
    packing.add_argument("--to", type=Path, required=True)
    args = parser.parse_args(argv)
    args.argv = argv
    if args.what == "pack":
        if not any(args.wheels.glob("*.whl")):
            parser.fail(f"pack: no wheels in {args.wheels} (make wheels fills it)")
        pack(args)
        return 0
    if args.what == "render":
        if not (args.out / "report.json").exists():
            parser.fail(f"render: no report.json in {args.out}")
        print(render(rerender(args.out)))
        return 0
    if not args.rehearse:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device is visible: run it on a GPU machine, or --rehearse")
    report = run(args)
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
