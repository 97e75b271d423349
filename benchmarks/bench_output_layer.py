"""Sparse output layers against cross-entropy: the entmax losses (and one decoding step's
log-probabilities) over a whole vocabulary, as time ratios to PyTorch's ``cross_entropy``
(``log_softmax`` for the step) measured in the same interleaved rounds.

Each row: forward + backward of the summed loss of ``rows x vocabulary`` float32 logits
(``randn``: at this scale the supports are longest, tens of words at 1.5 and hundreds at
1.3), per round ``time / cross_entropy's time``, shown as the median and range over the
rounds; the entmax package's losses with ``k=100`` for comparison. Peak memory: what one
call adds to the process's resident peak, in row-sized buffers (``rows x vocabulary``
float32), each function in a fresh process. The decoding step: ``log alpha-entmax`` of 40
rows (beam 5 x 8 sentences), as a model trained with ``--criterion entmax_loss`` decodes,
against ``log_softmax`` of the same logits: ``randn`` ones, and with ``--checkpoint`` every
step's logits of that model's beam search over the first 8 test sentences of ``--data``
(their mean support shown).

    python benchmarks/bench_output_layer.py --out results/bench [--threads 1,2] [--repeats 5]
        [--checkpoint CHECKPOINT --data DATA_BIN]
"""

import json
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional

import torch

from sparse_attn_experiments.provenance import git_commit, provenance_header
from sparse_attn_experiments.timing import interleaved_samples, paired_ratios, spread
from sparse_attn_plugin import losses as L
from sparse_attn_plugin.checkpoints import (
    CheckpointError,
    load_model,
    read_checkpoint_lazily,
    updates_of,
)
from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.errors import SettingsError
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic
from sparse_attn_plugin.markdown import markdown_table
from sparse_attn_plugin.modules.output_normalizer import OutputEntmax

#: (rows, vocabulary): a Multi30k-sized batch and a WMT-sized one.
SHAPES = ((1800, 9708), (4096, 32000))
#: One decoding step's rows (beam 5 x 8 sentences) over the first shape's vocabulary.
STEP_ROWS = 40
#: Issue 53's targets, as the most time over cross-entropy's (log_softmax's for the step).
TARGETS = {"sparsemax_loss": 2.0, "entmax15_loss": 2.0, "entmax_bisect_loss 1.3": 3.0,
           "log entmax1.5 step": 1.5}


def losses() -> Dict[str, Callable]:
    """Every timed loss of ``(logits, target)``, cross-entropy first."""
    found = {"cross_entropy": partial(torch.nn.functional.cross_entropy, reduction="sum"),
             "sparsemax_loss": partial(L.sparsemax_loss, reduction="sum"),
             "entmax15_loss": partial(L.entmax15_loss, reduction="sum"),
             "entmax_bisect_loss 1.3": partial(L.entmax_bisect_loss, alpha=1.3,
                                               reduction="sum")}
    try:
        import entmax
    except ImportError:
        return found
    found["entmax package: entmax15_loss k=100"] = lambda x, y: entmax.entmax15_loss(
        x, y, k=100).sum()
    found["entmax package: sparsemax_loss k=100"] = lambda x, y: entmax.sparsemax_loss(
        x, y, k=100).sum()
    return found


def logits_and_target(rows: int, vocabulary: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, vocabulary, generator=generator),
            torch.randint(0, vocabulary, (rows,), generator=generator))


def fwd_bwd(loss: Callable, logits: torch.Tensor, target: torch.Tensor) -> None:
    leaf = logits.detach().requires_grad_()
    loss(leaf, target).backward()


def time_losses(logits: torch.Tensor, target: torch.Tensor, rounds: int) -> Dict[str, dict]:
    """Each loss's per-round ratio to cross-entropy's time."""
    calls = {name: partial(fwd_bwd, loss, logits, target) for name, loss in losses().items()}
    for call in calls.values():
        call()
    return paired_ratios(interleaved_samples(calls, rounds), "cross_entropy")


def steps(alpha: float = 1.5) -> Dict[str, Callable]:
    """A decoding's log-probabilities over a list of steps' logits: log_softmax first, then
    what a model trained with ``--criterion entmax_loss --loss-alpha alpha`` decodes with
    (one normaliser for the whole decoding, as a model holds one)."""
    def each(normalise, logits: List[torch.Tensor]) -> None:
        for one in logits:
            normalise(one)
    return {"log_softmax step": partial(each, partial(torch.log_softmax, dim=-1)),
            f"log entmax{alpha:g} step": partial(each, OutputEntmax(alpha).log_normalize)}


def time_steps(logits: List[torch.Tensor], rounds: int, alpha: float = 1.5) -> Dict[str, dict]:
    """Each step function's per-round ratio to log_softmax's time over ``logits``, and the
    mean support of the sparse one."""
    calls = {name: partial(step, logits) for name, step in steps(alpha).items()}
    found = paired_ratios(interleaved_samples(calls, rounds, sample_s=0.05), "log_softmax step")
    with torch.no_grad():
        sizes = torch.cat([OutputEntmax(alpha).normalize(one).gt(0).sum(-1).flatten()
                           for one in logits])
    found[f"log entmax{alpha:g} step"]["mean_support"] = sizes.double().mean().item()
    return found


class CheckpointLogits(NamedTuple):
    """What a trained model's output layer sees: teacher-forced ``logits`` ``(rows, V)`` of
    test sentences and their ``target`` words, every beam step's logits ``steps``, the
    model's ``alpha`` and its training ``updates``."""

    logits: torch.Tensor
    target: torch.Tensor
    steps: List[torch.Tensor]
    alpha: float
    updates: int


def checkpoint_logits(checkpoint: Path, data: Path, rows: int) -> CheckpointLogits:
    """The output layer's logits of the model of ``checkpoint`` (trained with ``--criterion
    entmax_loss``) on the test set of ``data``: teacher-forced over about ``rows`` target
    words, and at every step of beam search (beam 5) over the first 8 sentences."""
    from argparse import Namespace
    model, task = load_model(checkpoint, data)
    normaliser = getattr(model, "output_entmax", None)
    if normaliser is None:
        raise SettingsError(f"--checkpoint {checkpoint}: not trained with --criterion "
                            f"entmax_loss")
    task.load_dataset("test")
    dataset = task.dataset("test")
    taken, words = [], 0
    while words < rows and len(taken) < len(dataset):
        taken.append(dataset[len(taken)])
        words += len(taken[-1]["target"])
    sample = dataset.collater(taken)
    with torch.no_grad():
        logits = model(**sample["net_input"])[0]
    real = sample["target"].ne(task.target_dictionary.pad())
    captured = []
    log_normalize = OutputEntmax.log_normalize

    def capture(self, logits):
        captured.append(logits.detach().reshape(-1, logits.size(-1)).clone())
        return log_normalize(self, logits)
    OutputEntmax.log_normalize = capture
    try:
        with torch.no_grad():
            generator = task.build_generator([model], Namespace(beam=5))
            generator.generate([model], dataset.collater(taken[:STEP_ROWS // 5]))
    finally:
        OutputEntmax.log_normalize = log_normalize
    return CheckpointLogits(logits[real][:rows].contiguous(), sample["target"][real][:rows],
                            captured, normaliser.alpha,
                            updates_of(read_checkpoint_lazily(checkpoint)))


def peak_buffers(name: str, rows: int, vocabulary: int) -> float:
    """What one forward + backward of loss ``name`` adds to a fresh process's resident peak,
    in row-sized float32 buffers."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"import bench_output_layer as b; print(b.peak_in_process({name!r}, {rows}, "
            f"{vocabulary}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return float(done.stdout.strip().splitlines()[-1])


def resident_peak_kb() -> int:
    """This process's resident peak (Linux's ``VmHWM``: unlike ``ru_maxrss``, not inherited
    from the parent that forked it)."""
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("VmHWM:")))


def peak_in_process(name: str, rows: int, vocabulary: int) -> float:
    torch.set_num_threads(1)
    logits, target = logits_and_target(rows, vocabulary)
    loss = losses()[name]
    fwd_bwd(loss, logits[:8], target[:8])          # imports and first-call allocations
    before = resident_peak_kb()
    fwd_bwd(loss, logits, target)
    return (resident_peak_kb() - before) * 1024 / (rows * vocabulary * 4)


def render(results: dict, command: str, rounds: int, trained: str = "") -> str:
    lines = ["# Sparse output layers against cross-entropy (cpu)", "",
             provenance_header(command), __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"{rounds} interleaved rounds; ratios below 1 are faster than cross-entropy."
             f"{trained}", ""]
    for threads, shapes in results.items():
        lines += [f"## {threads} thread{'s' if threads != '1' else ''}", ""]
        for shape, rows in shapes.items():
            table = []
            for name, row in rows.items():
                if name in ("cross_entropy", "log_softmax step"):
                    continue
                target = TARGETS.get(name)
                verdict = "" if target is None else (
                    f"≤ {target:.1f} ({'met' if row['median'] <= target else 'missed'})")
                peak = row.get("peak_buffers")
                if "mean_support" in row:
                    name = f"{name} (mean support {row['mean_support']:.1f})"
                table.append([name, spread(row["rounds"]), verdict,
                              "" if peak is None else f"{peak:.1f}"])
            base = "log_softmax" if "step" in shape else "cross_entropy"
            seconds = rows["log_softmax step" if "step" in shape else "cross_entropy"]
            lines += [f"### {shape} ({base}: {seconds['seconds']['median'] * 1e3:.1f} ms)", "",
                      markdown_table(["function", f"time ÷ {base}", "target",
                                      "peak row-sized buffers"], table), ""]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = CommandParser(prog="bench_output_layer.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--shapes", default=",".join(f"{r}x{v}" for r, v in SHAPES))
    parser.add_argument("--checkpoint", type=Path,
                        help="a model trained with --criterion entmax_loss: time its beam "
                             "search's steps too (needs --data)")
    parser.add_argument("--data", type=Path, help="the checkpoint's binarized corpus")
    args = parser.parse_args(argv)
    if (args.checkpoint is None) != (args.data is None):
        parser.error("--checkpoint and --data go together")
    if args.checkpoint is not None and not args.checkpoint.is_file():
        parser.error(f"--checkpoint {args.checkpoint}: no such file")
    try:
        shapes = [tuple(int(n) for n in s.split("x")) for s in args.shapes.split(",")]
        threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        parser.error("--shapes takes ROWSxVOCABULARY,... and --threads numbers, e.g. 1,2")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: not a directory")
    command = "python benchmarks/bench_output_layer.py " + " ".join(argv or sys.argv[1:])
    trained = None
    if args.checkpoint is not None:
        try:
            trained = checkpoint_logits(args.checkpoint, args.data, shapes[0][0])
        except (CheckpointError, SettingsError) as error:
            parser.error(str(error))
    results = {}
    for count in threads:
        torch.set_num_threads(count)
        found = {}
        for rows, vocabulary in shapes:
            found[f"{rows} x {vocabulary}"] = time_losses(
                *logits_and_target(rows, vocabulary), args.repeats)
            print(json.dumps({k: round(v["median"], 2) for k, v in
                              found[f"{rows} x {vocabulary}"].items()}), flush=True)
        if trained is not None:
            found[f"{args.checkpoint.name}'s teacher-forced output, "
                  f"{' x '.join(map(str, trained.logits.shape))}"] = time_losses(
                trained.logits, trained.target, args.repeats)
        logits, _ = logits_and_target(STEP_ROWS, shapes[0][1])
        found[f"decoding step {STEP_ROWS} x {shapes[0][1]}, randn"] = time_steps(
            [logits], args.repeats)
        if trained is not None:
            found[f"decoding steps of {args.checkpoint.name}'s beam search, "
                  f"{len(trained.steps)} steps"] = time_steps(trained.steps, args.repeats,
                                                              trained.alpha)
        results[str(count)] = found
    first = results[str(threads[0])]
    for rows, vocabulary in shapes:
        for name, row in first[f"{rows} x {vocabulary}"].items():
            row["peak_buffers"] = peak_buffers(name, rows, vocabulary)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "output_layer.json",
                      {"command": command, "commit": git_commit(), "results": results})
    said = ""
    if trained is not None:
        with torch.no_grad():
            sizes = OutputEntmax(trained.alpha).normalize(trained.logits).gt(0).sum(-1)
        said = (f" The checkpoint: {trained.updates} updates of training with --criterion "
                f"entmax_loss --loss-alpha {trained.alpha:g}; the supports of its "
                f"teacher-forced output: {int(sizes.median())} words at the median, "
                f"{int(sizes.max())} at most.")
    write_text_atomic(args.out / "output_layer.md",
                      render(results, command, args.repeats, said))
    print(f"wrote {args.out / 'output_layer.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
