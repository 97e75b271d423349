"""Attention in one call against PyTorch's ``scaled_dot_product_attention``: every kind of
``functional.attention``, fused (the Triton kernels, on CUDA) and eager (scores, the
normaliser, ``p v``), as speed ratios to SDPA measured in the same interleaved rounds.

Each shape is timed for forward + backward (a training batch: self-attention, causal for the
decoder's, with padded keys) and for the forward of a decoding step (one query per beam
hypothesis against a cache of keys). ``speed ÷ SDPA`` is SDPA's time over the row's, the
median and range of the per-round ratios (above 1: faster than SDPA). The fused kernels run
on CUDA only: on the CPU their rows say so, and the eager rows and SDPA are timed (the
rehearsal of the GPU report's part).

    python benchmarks/bench_fused_attention.py --out results/bench [--device cuda]
        [--dtype float16] [--repeats 7] [--quick]
"""

import shlex
import sys
from functools import partial
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from sparse_attn_experiments.provenance import git_commit, provenance_header
from sparse_attn_experiments.timing import (
    add_timing_args,
    device_clock,
    interleaved_samples,
    paired_ratios,
    spread,
    start_timing,
)
from sparse_attn_plugin import functional
from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic
from sparse_attn_plugin.markdown import markdown_table
from sparse_attn_plugin.normalizers.fused_attention import KINDS

#: (name, batch, heads, queries, keys, head dim, forward + backward?): the IWSLT and WMT
#: base transformers' training batches (4096 tokens) and a decoding step each (beam 5 x 32
#: sentences, one query against 30 cached keys).
SHAPES = (("IWSLT base, training", 128, 4, 32, 32, 128, True),
          ("WMT base, training", 128, 8, 32, 32, 64, True),
          ("IWSLT base, decoding step", 160, 4, 1, 30, 128, False),
          ("WMT base, decoding step", 160, 8, 1, 30, 64, False))
QUICK = {"batch": 4, "heads": 2}
#: Each kind's own argument; entmax_alpha learns one alpha per head.
OPTIONS = {"topk": {"k_top": 8}}
#: Issue 54's targets on an H100 (speed ÷ SDPA, fused training rows).
TARGETS = {"entmax_alpha": 0.8, **{kind: 0.9 for kind in KINDS if kind != "softmax"}}


def tensors(batch, heads, len_q, len_k, dim, dtype, device, generator):
    q, k, v = (torch.randn(batch, heads, length, dim, generator=generator).to(device, dtype)
               for length in (len_q, len_k, len_k))
    lengths = torch.randint(len_k // 2, len_k + 1, (batch, 1), generator=generator)
    return q, k, v, (torch.arange(len_k) >= lengths).to(device)


def calls(shape, dtype, device, generator, fused: bool) -> Dict[str, Callable[[], object]]:
    """SDPA first, then each kind eager and (``fused``) fused, for one shape."""
    _, batch, heads, len_q, len_k, dim, training = shape
    q, k, v, padded = tensors(batch, heads, len_q, len_k, dim, dtype, device, generator)
    causal = training and len_q == len_k
    visible = ~padded[:, None, None, :]
    if causal:
        visible = visible & torch.ones(len_q, len_k, dtype=torch.bool, device=device).tril()

    def run(attend):
        if not training:
            with torch.no_grad():
                return attend(q, k, v)
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        out = attend(*leaves)
        out.backward(torch.ones_like(out))
        return out

    found = {"sdpa": partial(run, partial(torch.nn.functional.scaled_dot_product_attention,
                                          attn_mask=visible))}
    for kind in KINDS:
        options = dict(OPTIONS.get(kind, {}))
        if kind == "entmax_alpha":
            options["alpha"] = torch.full((heads, 1, 1), 1.5, device=device,
                                          dtype=torch.float32, requires_grad=training)
        impls = ("torch", "triton") if fused else ("torch",)
        for impl in impls:
            found[f"{kind} {'fused' if impl == 'triton' else 'eager'}"] = partial(
                run, partial(functional.attention, kind=kind, key_padding_mask=padded,
                             causal=causal, impl=impl, **options))
    return found


def render(results: dict, command: str, args, fused: bool) -> str:
    lines = ["# Attention in one call against scaled_dot_product_attention", "",
             provenance_header(command),
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Device `{args.device}`, dtype `{args.dtype}`, {args.repeats} interleaved rounds."
             + ("" if fused else " The fused kernels need CUDA: not timed here."), ""]
    for name, rows in results.items():
        table = []
        for row, found in rows.items():
            if row == "sdpa":
                continue
            kind, how = row.rsplit(" ", 1)
            target = TARGETS.get(kind) if how == "fused" and "training" in name else None
            verdict = "" if target is None else (
                f"≥ {target} ({'met' if found['median'] >= target else 'missed'})")
            table.append([row, spread(found["rounds"]), verdict])
        seconds = rows["sdpa"]["seconds"]["median"] * 1e3
        lines += [f"## {name} (SDPA {seconds:.3f} ms)", "",
                  markdown_table(["attention", "speed ÷ SDPA", "target"], table), ""]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    parser = CommandParser(prog="bench_fused_attention.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write DIR/fused_attention.md and .json")
    add_timing_args(parser, "attention call")
    parser.add_argument("--quick", action="store_true", help="small batches, 2 rounds (tests)")
    args = parser.parse_args(argv)
    if args.repeats < 2:
        parser.error("--repeats must be at least 2 (a spread)")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: not a directory")
    args.repeats = 2 if args.quick else args.repeats
    dtype, sync, generator = start_timing(args)
    fused = args.device == "cuda"
    results = {}
    for shape in SHAPES:
        if args.quick:
            shape = (shape[0], QUICK["batch"], QUICK["heads"], *shape[3:])
        timed = calls(shape, dtype, args.device, generator, fused)
        for call in timed.values():
            call()
        samples = interleaved_samples(timed, args.repeats, args.sample_s, sync,
                                      device_clock(args.device))
        results[shape[0]] = paired_ratios(samples, "sdpa", speed=True)
    command = "python benchmarks/bench_fused_attention.py " + shlex.join(argv)
    text = render(results, command, args, fused)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.out / "fused_attention.json",
                          {"command": command, "commit": git_commit(), "device": args.device,
                           "dtype": args.dtype, "results": results})
        write_text_atomic(args.out / "fused_attention.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
