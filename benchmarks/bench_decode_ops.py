"""Operations dispatched per decoding step: fairseq's ``transformer`` and
``sparse_transformer`` with every normaliser at default flags, decoded by fairseq's
``SequenceGenerator`` as fairseq-generate does (``prepare_for_inference_`` first).

On a GPU a decoding step at these sizes is bound by how fast the host dispatches
operations, not by arithmetic, so the number of aten operations a step dispatches is the
measure; counted by a ``TorchDispatchMode`` it is the same on every run and machine, so
tests hold its targets. Each row: the operations of one ``generate`` call (batch 8, beam 4,
every hypothesis forced to 12 tokens) over its 13 steps, encoder and search included. On
CUDA, kernel launches per step too (``torch.profiler``).

    python benchmarks/bench_decode_ops.py --out results/bench [--models iwslt,demo]
        [--device cuda]
"""

import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sparse_attn_data.synthetic import binarize, write_corpus
from sparse_attn_experiments.provenance import git_commit, provenance_header
from sparse_attn_experiments.timing import forced_steps, kernel_launches, prepare_for_inference
from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic
from sparse_attn_plugin.markdown import markdown_table
from sparse_attn_plugin.normalizers import CONSTRAINED, NAMES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_end_to_end import (  # noqa: E402
    FAIRSEQ,
    HARD,
    SOFTMAX,
    make_rows,
    row_flags,
)
from bench_training import MODELS, in_process  # noqa: E402

BATCH, BEAM, LENGTH = 8, 4, 12
#: Issue 52's targets: a row's operations per step at most this many times its
#: denominator's (our softmax's; fairseq's transformer for our softmax).
TARGETS = {SOFTMAX: 1.00, HARD: 0.85, "topk": 1.10, "sparsemax": 1.30, "entmax15": 1.30,
           "entmax_alpha": 1.6}


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched while it is active, by name."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def denominator(label: str) -> str:
    return FAIRSEQ if label == SOFTMAX else SOFTMAX


def build_generators(data: Path, model: str, device: str):
    """Every row's model (seed 1), prepared as fairseq-generate prepares it, with fairseq's
    beam search; and the test batch."""
    from fairseq.sequence_generator import SequenceGenerator

    names = [n for n in NAMES if n not in CONSTRAINED and n != SOFTMAX]
    rows = make_rows(names, [])
    built, _, task = in_process(data, MODELS[model][0], {r.label: row_flags(r, model)
                                                        for r in rows}, 0, device)
    generators = {label: SequenceGenerator([prepare_for_inference(network, BEAM)],
                                           task.target_dictionary, beam_size=BEAM,
                                           min_len=LENGTH, max_len_a=0, max_len_b=LENGTH)
                  for label, (network, _) in built.items()}
    task.load_dataset("test")
    dataset = task.dataset("test")
    batch = dataset.collater([dataset[i] for i in range(BATCH)])
    if device == "cuda":
        from fairseq import utils
        batch = utils.move_to_cuda(batch)
    return generators, batch


def count_step(generator, batch) -> Dict[str, float]:
    """Operations per step of one ``generate`` (after an untimed one that settles every
    lazy choice), by name, and ``total``."""
    with torch.inference_mode():
        generator.generate(None, batch)
        with OpCounter() as counter:
            generator.generate(None, batch)
    steps = forced_steps(LENGTH)
    per_step = {name: n / steps for name, n in counter.ops.most_common()}
    return {"total": sum(counter.ops.values()) / steps, "ops": per_step}


def launches_per_step(generator, batch) -> float:
    """CUDA kernels launched per step of one ``generate`` (:func:`.timing.kernel_launches`)."""
    with torch.inference_mode():
        return kernel_launches(lambda: generator.generate(None, batch)) / forced_steps(LENGTH)


def measure(data: Path, model: str, device: str) -> Dict[str, dict]:
    generators, batch = build_generators(data, model, device)
    rows = {label: count_step(g, batch) for label, g in generators.items()}
    for label, g in generators.items():
        rows[label]["launches"] = launches_per_step(g, batch) if device == "cuda" else None
    for label, row in rows.items():
        if label != FAIRSEQ:
            row["ratio"] = row["total"] / rows[denominator(label)]["total"]
            row["target"] = TARGETS.get(label)
            row["met"] = None if row["target"] is None else row["ratio"] <= row["target"]
    return rows


def render(results: Dict[str, Dict[str, dict]], command: str, device: str) -> str:
    lines = [f"# Operations per decoding step ({device})", "", provenance_header(command),
             f"Aten operations dispatched by fairseq's SequenceGenerator per step (batch "
             f"{BATCH}, beam {BEAM}, {LENGTH} tokens forced, so {forced_steps(LENGTH)} steps; "
             "encoder and search included), counted by a TorchDispatchMode: the same on every run. "
             "Default flags; models prepared by `prepare_for_inference_` as fairseq-generate "
             "does. Ratios: our softmax over fairseq's transformer, every other row over our "
             "softmax; targets from issue 52.", ""]
    for model, rows in results.items():
        table = []
        for label, row in rows.items():
            target = row.get("target")
            verdict = "" if target is None else ("met" if row["met"] else "missed")
            table.append([label, f"{row['total']:.1f}",
                          "" if label == FAIRSEQ else f"{row['ratio']:.3f} ÷ {denominator(label)}",
                          "" if target is None else f"≤ {target:.2f} ({verdict})",
                          "n/a" if row["launches"] is None else f"{row['launches']:.1f}"])
        lines += [f"## {model}", "", markdown_table(
            ["row", "ops per step", "ratio", "target", "CUDA launches per step"], table), ""]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = CommandParser(prog="bench_decode_ops.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--models", default="iwslt,demo")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args(argv)
    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {unknown[0]!r}; choose from {', '.join(MODELS)}")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: not a folder")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as work:
        raw, data = Path(work) / "raw", Path(work) / "bin"
        write_corpus(str(raw), train=200, valid=20, test=BATCH)
        binarize(str(raw), str(data))
        results = {model: measure(data, model, args.device) for model in models}
    command = "python benchmarks/bench_decode_ops.py " + " ".join(argv or sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "decode_ops" if args.device == "cpu" else f"decode_ops_{args.device}"
    write_json_atomic(args.out / f"{stem}.json", {"command": command, "commit": git_commit(),
                                                   "device": args.device, "models": results})
    text = render(results, command, args.device)
    write_text_atomic(args.out / f"{stem}.md", text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
