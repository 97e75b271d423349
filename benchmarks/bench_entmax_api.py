"""Speed of every function of the entmax package against its drop-in here, as a time ratio
measured in the same rounds.

For each public function of entmax 1.3 (``entmax_compat.EQUIVALENTS``, its modules left out:
they call the same functions), the package's function and ``sparse_attn_plugin.entmax_compat``'s
take turns in interleaved rounds, forward + backward of a random upstream gradient (to the
scores; a loss's mean). Each cell is ``our time / entmax's time`` per round, shown as the
median and the range over the rounds: below 1 is faster here. Shapes: the rows of an
attention layer and of a decoding step (``rows x keys``) and of an output layer (``rows x
vocabulary``).

    python benchmarks/bench_entmax_api.py --out results/bench [--threads 1] [--repeats 5]
"""

import inspect
import shlex
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import entmax
import torch

from sparse_attn_experiments.provenance import describe_machine, git_commit, provenance_header
from sparse_attn_experiments.timing import add_timing_args, interleaved_samples, start_timing
from sparse_attn_plugin import entmax_compat
from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic
from sparse_attn_plugin.markdown import markdown_table

#: The functions timed: entmax's public functions (not its modules), in its order.
FUNCTIONS = tuple(name for name in entmax_compat.EQUIVALENTS if name[0].islower())
#: The alphas at which the functions that take one are timed (entmax's defaults otherwise):
#: below 2, and above it, where the supports are a few entries.
ALPHAS = {"entmax_bisect": (1.3, 3.0, 5.0), "entmax_bisect_loss": (1.3, 3.0, 5.0)}
#: Each timed case, ``(row label, function name, settings)``, in entmax's order.
CASES = [(f"{name} alpha {alpha:g}" if name in ALPHAS else name, name,
          {"alpha": alpha} if name in ALPHAS else {})
         for name in FUNCTIONS for alpha in ALPHAS.get(name, (None,))]
#: (layer, rows, columns): the rows of an attention layer's scores, of one decoding step's
#: (beam 5 x 8 sentences x 4 heads; small enough for the eager sort on a CPU) and of an
#: output layer's.
SHAPES = [("attention", 2048, 64), ("decode step", 160, 40), ("output", 256, 8000)]
QUICK_SHAPE = (8, 16)


def is_loss(name: str) -> bool:
    return "target" in inspect.signature(getattr(entmax, name)).parameters


def call(function, name: str, settings: dict, scores: torch.Tensor, target: torch.Tensor,
         upstream: torch.Tensor):
    """One forward + backward of ``function`` (entmax's or ours) on fresh leaf scores."""
    x = scores.detach().requires_grad_()
    if is_loss(name):
        function(x, target, **settings).mean().backward()
    else:
        (function(x, **settings) * upstream).sum().backward()


def bench_shape(scores, target, upstream, args, sync):
    """Per case, ``our time / entmax's`` in each round."""
    ratios = {}
    for label, name, settings in CASES:
        calls = {side: partial(call, getattr(module, name), name, settings, scores, target,
                               upstream)
                 for side, module in (("entmax", entmax), ("ours", entmax_compat))}
        for fn in calls.values():
            for _ in range(args.warmup):
                fn()
        samples = interleaved_samples(calls, args.repeats, args.sample_s, sync)
        ratios[label] = [o / e for o, e in zip(samples["ours"], samples["entmax"])]
    return ratios


def cell(values) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}–{max(values):.2f}]"


def markdown(results, args, command) -> str:
    rows = [[f"`entmax.{name}`" + (f" alpha {settings['alpha']:g}" if settings else ""),
             f"`{entmax_compat.EQUIVALENTS[name]}`",
             *(cell(by_label[label]) for by_label in results.values())]
            for label, name, settings in CASES]
    return "\n".join([
        "# The entmax package's functions and their drop-ins: time ratio", "",
        provenance_header(command),
        f"Device `{args.device}`, dtype `{args.dtype}`, {args.repeats} interleaved rounds. "
        "Each cell is `our time / entmax's time` for forward + backward (below 1: faster "
        "here), the median and `[min–max]` of the per-round ratios; ours is called through "
        "`sparse_attn_plugin.entmax_compat`, as code switching from entmax would. "
        "The `*_bisect` functions of entmax halve their bracket 50 times (its default), "
        "ours are exact.", "",
        markdown_table(["entmax", "ours", *results], rows), ""])


def parse_args(argv):
    parser = CommandParser(description=__doc__.split("\n\n")[0], command="bench_entmax_api.py")
    parser.add_argument("--out", type=Path, help="write DIR/entmax_api.md and .json")
    add_timing_args(parser, "function")
    parser.add_argument("--quick", action="store_true", help="2 rounds, small shapes (tests)")
    args = parser.parse_args(argv)
    args.repeats = 2 if args.quick else args.repeats
    if args.repeats < 2 or args.dtype != "float32":
        parser.fail("--repeats must be at least 2 (a spread), and --dtype float32 (entmax's "
                     "bisection is not meant for half precision)")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = parse_args(argv)
    command = "python benchmarks/bench_entmax_api.py " + shlex.join(argv)
    dtype, sync, generator = start_timing(args)
    started, results = time.perf_counter(), {}
    for layer, rows, cols in SHAPES:
        rows, cols = QUICK_SHAPE if args.quick else (rows, cols)
        label = f"{layer} {rows}x{cols}"
        scores = torch.randn(rows, cols, generator=generator, dtype=dtype).to(args.device)
        upstream = torch.randn(rows, cols, generator=generator, dtype=dtype).to(args.device)
        target = torch.randint(cols, (rows,), generator=generator).to(args.device)
        results[label] = bench_shape(scores, target, upstream, args, sync)
    text = markdown(results, args, command)
    print(text)
    if args.out:
        record = {"command": command, "commit": git_commit(), "machine": describe_machine(),
                  "settings": {k: str(v) if isinstance(v, Path) else v
                               for k, v in vars(args).items()},
                  "elapsed_s": time.perf_counter() - started,
                  "time_ratio_per_round": results}
        write_text_atomic(args.out / "entmax_api.md", text)
        write_json_atomic(args.out / "entmax_api.json", record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
