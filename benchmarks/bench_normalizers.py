"""Speed of each attention normaliser, as a ratio to softmax timed in the same run.

What is timed: the normaliser module alone (scores in, weights out) on attention
shapes ``(batch, heads, queries, keys)`` of a small translation model, with random
key padding (10-20% of each batch row's keys are ``-inf``; ``--causal`` also masks
the future on square shapes), in two modes:

* train: forward + backward of a random upstream gradient, to the scores and,
  for ``entmax_alpha``, to its alpha parameter (module in training mode);
* infer: forward only under ``torch.inference_mode()``, module in eval mode.

Beside our normaliser modules (their rows named by ``--attn-fn``), each exact algorithm
they choose among and the entmax package's functions are timed in the same rounds:
``sparsemax [sort]`` is ``entmax.sparsemax``, ``[our sort]`` our sort (the eager rule's
below ``dispatch.NEWTON_FROM`` scores), ``[newton]`` our safeguarded Newton solver
(``normalizers/entmax_newton.py``), ``entmax_alpha [bisect]`` the package's
``entmax_bisect`` (25 halvings) with the same learned per-head alphas.

After warm-up calls, the normalisers take turns in rounds (so drift in machine
load hits all of them alike) and the median over rounds is kept. Each cell is a
THROUGHPUT ratio, ``softmax time / normaliser time``: 1.0 is as fast as softmax,
0.5 is half as fast. The paper column (Zhao et al. 2019, Table 4) holds end-to-end
tokens/s ratios of whole fp16 models on a GPU: the attention normaliser is only
a part of that time there, so those ratios are not directly comparable to these.

    python benchmarks/bench_normalizers.py --out results/bench [--device cpu]
"""

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path

import torch
from entmax import entmax15, entmax_bisect, sparsemax

from sparse_attn_experiments.provenance import (
    describe_machine,
    git_commit,
    provenance_header,
)
from sparse_attn_experiments.timing import (
    add_timing_args,
    ratios_to,
    start_timing,
    warmed_medians,
)
from sparse_attn_plugin.files import write_text_atomic
from sparse_attn_plugin.markdown import markdown_table
from sparse_attn_plugin.normalizers import (
    COMPILED,
    CONSTRAINED,
    NAMES,
    NormalizerOptions,
    build_normalizer,
)
from sparse_attn_plugin.normalizers.entmax_family import ENTMAX15, SPARSEMAX
from sparse_attn_plugin.normalizers.entmax_newton import entmax15_newton, sparsemax_newton
from sparse_attn_plugin.normalizers.fused_triton import have_triton

#: The normalisers timed here. Hard retrieval replaces the weighted sum as well, so
#: its module alone is not what a model runs: benchmarks/bench_hard_attention.py
#: times the whole attention operation instead; the constrained ones also take bounds
#: and benchmarks/bench_constrained.py times them.
NORMALIZERS = tuple(name for name in NAMES if name not in ("hard", *CONSTRAINED))
#: (label, batch, heads, queries, keys): encoder/decoder batches, one beam-search step.
SHAPES = [("32x4x40x40", 32, 4, 40, 40), ("32x4x100x100", 32, 4, 100, 100),
          ("160x4x1x40 (decode step, beam 5)", 160, 4, 1, 40),
          ("640x4x1x30 (decode step, beam 5, 128 sentences)", 640, 4, 1, 30),
          ("20x4x1x12 (decode step, beam 5, 4 sentences)", 20, 4, 1, 12)]
#: Zhao et al. 2019 Table 4: GPU end-to-end tokens/s ratios to softmax (train, infer).
PAPER = {"softmax": (1.0, 1.0), "topk": (0.98, 0.94), "sparsemax": (0.80, 0.43),
         "entmax15": (0.82, 0.70), "entmax_alpha": (0.27, 0.09)}
MODES = {"train": "Training: forward + backward", "infer": "Inference: forward only"}


def make_scores(batch, heads, tgt, src, causal, dtype, device, gen):
    """Random scores with -inf on 10-20% padded keys per batch row (and the future)."""
    scores = torch.randn(batch, heads, tgt, src, generator=gen)
    lo, hi = math.ceil(0.1 * src), max(math.ceil(0.1 * src), math.floor(0.2 * src))
    pad = torch.randint(lo, hi + 1, (batch,), generator=gen)
    mask = torch.arange(src) >= (src - pad)[:, None]            # (batch, src)
    mask = mask[:, None, None, :].expand(batch, 1, tgt, src)
    if causal and tgt == src:
        mask = mask | torch.ones(tgt, src, dtype=torch.bool).triu(1)
    return scores.masked_fill(mask, float("-inf")).to(device=device, dtype=dtype)


def implementations(heads, device):
    """Row label -> (function of the scores, its parameters): our modules with the default
    ``--attn-impl auto`` (``[default]``), computed eagerly (``--attn-impl torch``; the name
    alone), by compiled kernels (``[compiled]``) and on a GPU by the Triton kernels
    (``[triton]``), then each algorithm they choose among and the entmax package's, alphas
    all alike."""
    rows = {}
    fused = ("compiled", "triton") if torch.device(device).type == "cuda" and have_triton() \
        else ("compiled",)
    for name in NORMALIZERS:
        for impl in ("auto", "torch", *fused) if name in COMPILED else ("torch",):
            module = build_normalizer(name, heads, NormalizerOptions(attn_impl=impl)).to(device)
            label = {"torch": name, "auto": f"{name} [default]"}.get(impl, f"{name} [{impl}]")
            rows[label] = (module, list(module.parameters()))
    learned = rows["entmax_alpha"][0]

    def bisect(scores):
        alpha = learned.alpha().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        return entmax_bisect(scores, alpha, dim=-1, n_iter=25)

    return {**rows,
            "sparsemax [sort]": (lambda s: sparsemax(s, dim=-1), []),
            "sparsemax [our sort]": (SPARSEMAX.eager["sort"], []),
            "sparsemax [newton]": (sparsemax_newton, []),
            "entmax15 [sort]": (lambda s: entmax15(s, dim=-1), []),
            "entmax15 [our sort]": (ENTMAX15.eager["sort"], []),
            "entmax15 [newton]": (entmax15_newton, []),
            "entmax_alpha [bisect]": (bisect, list(learned.parameters()))}


def bench_shape(scores, mode, args, sync, first_calls=None):
    """Median seconds per call of every implementation on ``scores`` in ``mode``; with
    ``first_calls`` (a dict), also the seconds of each one's first call (compilation)."""
    calls = {}
    for label, (fn, params) in implementations(scores.size(1), scores.device).items():
        if isinstance(fn, torch.nn.Module):
            fn.train(mode == "train")
        if mode == "train":
            x = scores.detach().requires_grad_(True)
            with torch.no_grad():
                upstream = torch.randn_like(fn(x))
            calls[label] = (lambda f=fn, x=x, i=[x, *params], g=upstream:
                            torch.autograd.grad(f(x), i, g))
        else:
            calls[label] = lambda f=fn: f(scores)
        if first_calls is not None:
            sync()
            start = time.perf_counter()
            calls[label]()
            sync()
            first_calls[label] = time.perf_counter() - start
    return warmed_medians(calls, mode, args.warmup, args.repeats, args.sample_s, sync)


def profile_ops(scores, top=6):
    """Markdown: each normaliser's top operators by share of self CPU time in
    forward + backward (where the time goes when a ratio is low)."""
    from torch.profiler import ProfilerActivity, profile

    parts = []
    for name, (fn, params) in implementations(scores.size(1), scores.device).items():
        x = scores.detach().requires_grad_(True)
        upstream = torch.randn_like(fn(x.detach()))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                torch.autograd.grad(fn(x), [x, *params], upstream)
        events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        total = sum(e.self_cpu_time_total for e in events) or 1
        rows = [[f"`{e.key}`", f"{100 * e.self_cpu_time_total / total:.0f}%", e.count // 5]
                for e in events[:top]]
        parts.append(f"### {name}\n\n" + markdown_table(
            ["operator", "share of self CPU time", "calls per step"], rows))
    return "\n".join(parts)


def markdown(results, labels, args, command, first_calls):
    lines = ["# Attention normaliser speed: throughput ratio to softmax", "",
             provenance_header(command),
             f"Device `{args.device}`, dtype `{args.dtype}`, median of {args.repeats} "
             "interleaved rounds. Cells are `softmax time / normaliser time` for the "
             "normaliser module alone (scores in, weights out; shapes are batch x heads x "
             "queries x keys, 10-20% of keys padded"
             + (", causal on square shapes" if args.causal else "") + "). The paper "
             "column is Zhao et al. (2019) Table 4: end-to-end tokens/s of whole fp16 "
             "models on a GPU, not directly comparable to these op-level ratios.", "",
             "A name alone is our module computed eagerly (`--attn-impl torch`), `[default]` "
             "with the default `--attn-impl auto` (Triton's kernels on a CUDA device, the "
             "eager ones elsewhere), `[compiled]` by torch.compile'd kernels (`--attn-impl "
             "compiled`), `[triton]` (on a GPU) by our Triton kernels (`--attn-impl "
             "triton`). `[sort]` and `[bisect]` are the entmax package's functions, "
             "`[our sort]` and `[newton]` our two eager algorithms called directly: the eager "
             "sparsemax and 1.5-entmax sort "
             "below 16,384 scores on a CPU and solve by Newton from there on "
             "(`normalizers/dispatch.py`; the shapes hold 204,800, 1,280,000, 25,600, 76,800 "
             "and 960 scores).", ""]
    for col, (mode, title) in enumerate(MODES.items()):
        lines += [f"## {title}", "", "| normaliser | " + " | ".join(labels)
                  + " | paper (GPU, end-to-end) |", "|---" * (len(labels) + 2) + "|"]
        for label in results[mode][labels[0]]:
            cells = [f"{results[mode][lab][label]['throughput_ratio']:.2f}" for lab in labels]
            paper = f"{PAPER[label][col]:.2f}" if label in PAPER else "-"
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {paper} |")
        lines.append("")
    lines += ["## Compilation", "", f"The first forward + backward call at {labels[0]}, "
              "compilation included (Inductor keeps compiled code on disk, so a later process "
              "pays less; inference and one-query decoding steps compile once more):", "",
              markdown_table(["implementation", "first call (s)", "later calls (ms)"],
                             [[label, f"{first_calls[label]:.1f}",
                               f"{1e3 * results['train'][labels[0]][label]['median_s']:.2f}"]
                              for label in first_calls
                              if label.endswith(("[compiled]", "[triton]"))]), ""]
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="write DIR/normalizers.md and .json")
    add_timing_args(p, "normaliser")
    p.add_argument("--causal", action="store_true", help="causal mask on square shapes")
    p.add_argument("--quick", action="store_true", help="2 rounds, no warm-up (tests)")
    p.add_argument("--profile", action="store_true",
                   help="also write where each normaliser spends its time (first shape)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.warmup, args.sample_s = 2, 0, 0.0
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = parse_args(argv)
    command = "python benchmarks/bench_normalizers.py " + shlex.join(argv)
    dtype, sync, gen = start_timing(args)
    started = time.perf_counter()
    results, labels, first_calls = {mode: {} for mode in MODES}, [], {}
    for label, *shape in SHAPES:
        label += " causal" if args.causal and shape[2] == shape[3] else ""
        labels.append(label)
        scores = make_scores(*shape, args.causal, dtype, args.device, gen)
        for mode in MODES:
            medians = bench_shape(scores, mode, args, sync,
                                  first_calls if not first_calls else None)
            results[mode][label] = ratios_to(medians)
    elapsed = time.perf_counter() - started
    text = markdown(results, labels, args, command, first_calls)
    if args.profile:
        scores = make_scores(*SHAPES[0][1:], False, dtype, args.device, gen)
        text += (f"\n## Where the time goes: forward + backward, {SHAPES[0][0]}\n\n"
                 + profile_ops(scores))
    print(text)
    print(f"benchmark took {elapsed:.1f} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {"command": command, "commit": git_commit(), "machine": describe_machine(),
                  "settings": {k: str(v) if isinstance(v, Path) else v
                               for k, v in vars(args).items()},
                  "shapes": labels, "elapsed_s": elapsed, "results": results,
                  "first_call_s": first_calls,
                  "paper_gpu_end_to_end": {n: dict(zip(MODES, r)) for n, r in PAPER.items()}}
        write_text_atomic(args.out / "normalizers.md", text)
        write_text_atomic(args.out / "normalizers.json", json.dumps(record, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
