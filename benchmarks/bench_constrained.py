"""Speed of constrained softmax and constrained sparsemax, as a ratio to softmax.

What is timed: the normaliser alone (scores and upper bounds in, weights out) on
the attention shapes of Malaviya et al. (2018)'s LSTM decoder (one step of a batch,
and one step of beam search) and on a transformer's cross-attention, with random key
padding (10-20% of each source's keys are ``-inf``) and random bounds shaped like the
ones a fertility model produces, ``u = max(0, f - beta)`` for fertilities ``f`` in
{1, 2, 3} and a random cumulative attention ``beta`` (so some bounds are 0), with a
``+inf`` sink bound at each source's last unmasked key. Two modes:

* train: forward + backward of a random upstream gradient, to the scores and, for
  the constrained transforms, to the bounds;
* infer: forward only under ``torch.inference_mode()``.

After warm-up calls the transforms take turns in rounds and the median over rounds
is kept. Each cell is a THROUGHPUT ratio, ``softmax time / transform time``: 1.0 is
as fast as softmax, 0.5 half as fast. Sparsemax (unconstrained) is timed alongside
for reference.

Then what a user waits for: beam-5 generation with the paper's LSTM
(``sparse_lstm_malaviya``, 2x500, a 24k-word vocabulary as joint BPE 32k gives on
IWSLT14) and with a small one, decoding with softmax, sparsemax, and csoftmax /
csparsemax as Malaviya et al. ran them (sink token, exhaustion c = 0.2, PREDICTED
fertilities: the tagger runs once per sentence). Every hypothesis is forced to the same
length so each model does the same work; weights are random, which does not change
the cost once lengths are fixed. Reported as ``transform time / softmax time``, against
the target of at most 1.5 for csparsemax.

    python benchmarks/bench_constrained.py --out results/bench [--device cpu] [--quick]
"""

import argparse
import json
import math
import shlex
import sys
import tempfile
import time
from pathlib import Path

import torch
from fairseq import options, tasks

from sparse_attn_experiments.pipeline import PLUGIN_DIR
from sparse_attn_experiments.provenance import (
    describe_machine,
    git_commit,
    provenance_header,
)
from sparse_attn_experiments.timing import (
    add_timing_args,
    generation_seconds,
    interleaved_medians,
    ratios_to,
    start_timing,
    warmed_medians,
)
from sparse_attn_plugin import register
from sparse_attn_plugin.files import write_text_atomic
from sparse_attn_plugin.markdown import markdown_table
from sparse_attn_plugin.normalizers import Softmax, Sparsemax
from sparse_attn_plugin.normalizers.constrained import CSoftmax, CSparsemax

#: name -> (module factory, takes upper bounds)
METHODS = {"softmax": (Softmax, False), "sparsemax": (Sparsemax, False),
           "csoftmax": (CSoftmax, True), "csparsemax": (CSparsemax, True)}
#: (label, shape, sources): the scores' shape, and how many distinct sources (padding
#: patterns) its leading dimension holds; the keys are always the last dimension.
SHAPES = [("LSTM step 64x40", (64, 40), 64),
          ("LSTM beam step 160x40 (beam 5 x 32)", (160, 40), 32),
          ("cross-attention 32x4x40x40", (32, 4, 40, 40), 32)]
MODES = {"train": "Training: forward + backward", "infer": "Inference: forward only"}

#: Generation: model size -> (flags, target vocabulary).
LSTM_SIZES = {
    "paper": (["--arch", "sparse_lstm_malaviya"], 24000),
    "small": (["--arch", "sparse_lstm", "--encoder-embed-dim", "64",
               "--encoder-hidden-size", "128", "--fertility-predictor-embed-dim", "32",
               "--fertility-predictor-hidden-size", "32"], 8000),
}
CONSTRAINED_FLAGS = ["--sink-token", "--exhaustion-c", "0.2", "--fertility", "predicted"]
#: Generation: decoding -> its attention flags.
DECODINGS = {"softmax": ["--attn-fn", "softmax"], "sparsemax": ["--attn-fn", "sparsemax"],
             "csoftmax": ["--attn-fn", "csoftmax", *CONSTRAINED_FLAGS],
             "csparsemax": ["--attn-fn", "csparsemax", *CONSTRAINED_FLAGS]}
BEAM = 5
#: The issue's target: csparsemax generation takes at most this times softmax's time.
TARGET = ("csparsemax", 1.5)


def make_inputs(shape, sources, dtype, device, gen):
    """Scores with padded keys, and fertility-like bounds with a sink per source."""
    lead, src = shape[0], shape[-1]
    per_source = lead // sources                 # beam hypotheses sharing one source
    lo, hi = math.ceil(0.1 * src), max(math.ceil(0.1 * src), math.floor(0.2 * src))
    pad = torch.randint(lo, hi + 1, (sources,), generator=gen).repeat_interleave(per_source)
    length = src - pad                                               # (lead,)
    view = (lead,) + (1,) * (len(shape) - 1)
    keys = torch.arange(src)
    masked = keys >= length.view(view)
    sink = keys == (length - 1).view(view)
    scores = torch.randn(shape, generator=gen).masked_fill(masked, float("-inf"))
    fertility = torch.randint(1, 4, (sources, src), generator=gen).float()
    fertility = fertility.repeat_interleave(per_source, 0).view((lead,) + (1,) * (len(shape) - 2)
                                                                 + (src,))
    coverage = torch.rand(shape, generator=gen) * 1.2 * fertility    # beta, sometimes > f
    upper = (fertility - coverage).clamp_min(0.0).masked_fill(sink, float("inf"))
    return (scores.to(device=device, dtype=dtype), upper.to(device=device, dtype=dtype))


def bench_shape(scores, upper, mode, args, sync):
    """Median seconds per call of every transform on ``scores`` in ``mode``."""
    calls = {}
    for name, (factory, bounded) in METHODS.items():
        module = factory().to(scores.device)
        if mode == "train":
            x = scores.detach().requires_grad_(True)
            u = upper.detach().requires_grad_(True)
            inputs = (x, u) if bounded else (x,)
            upstream = torch.randn(scores.shape, device=scores.device)
            calls[name] = (lambda m=module, i=inputs, g=upstream:
                           torch.autograd.grad(m(*i), i, g))
        else:
            module.eval()
            inputs = (scores, upper) if bounded else (scores,)
            calls[name] = lambda m=module, i=inputs: m(*i)
    return warmed_medians(calls, mode, args.warmup, args.repeats, args.sample_s, sync)


def write_dictionaries(folder: Path, vocab: int) -> Path:
    """Source and target dictionaries of ``vocab`` made-up words: all a model needs."""
    words = "".join(f"w{i} 1\n" for i in range(vocab))
    for lang in ("src", "tgt"):
        write_text_atomic(folder / f"dict.{lang}.txt", words)
    return folder


def build_lstms(data: Path, size: str, device: str, seed: int):
    """(task, {decoding: model}) for one model size."""
    flags, _ = LSTM_SIZES[size]
    register()  # imported before fairseq, the plugin registers only when asked
    models = {}
    for name, attention in DECODINGS.items():
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, [
            str(data), "--user-dir", str(PLUGIN_DIR), "--task", "sparse_translation",
            "--source-lang", "src", "--target-lang", "tgt", *flags, *attention])
        task = tasks.setup_task(args)
        torch.manual_seed(seed)
        models[name] = task.build_model(args).to(device).eval()
    return task, models


def source_batches(task, sentences, batch_size, length, device, gen):
    """Batches of random source sentences of 80-100% of ``length`` tokens (+ EOS), left
    padded as fairseq batches them."""
    dictionary = task.source_dictionary
    batches = []
    for start in range(0, sentences, batch_size):
        count = min(batch_size, sentences - start)
        lengths = torch.randint(int(0.8 * length), length + 1, (count,), generator=gen) + 1
        tokens = torch.full((count, int(lengths.max())), dictionary.pad())
        for row, n in enumerate(lengths.tolist()):
            words = torch.randint(dictionary.nspecial, len(dictionary), (n - 1,), generator=gen)
            tokens[row, -n:] = torch.cat([words, torch.tensor([dictionary.eos()])])
        batches.append({"net_input": {"src_tokens": tokens.to(device),
                                      "src_lengths": lengths.to(device)},
                        "nsentences": count})
    return batches


def bench_generation(args, sync):
    """Per model size: seconds to decode the same sentences with each attention."""
    gen = torch.Generator().manual_seed(args.seed)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            data = write_dictionaries(Path(tmp) / size, LSTM_SIZES[size][1])
            task, models = build_lstms(data, size, args.device, args.seed)
            batches = source_batches(task, args.sentences, args.batch_size, args.length,
                                     args.device, gen)
            for model in models.values():  # warm-up
                generation_seconds(task, model, batches[0], BEAM, 2, sync)
            medians = interleaved_medians(
                {name: (lambda m=model, t=task, b=batches: sum(
                    generation_seconds(t, m, sample, BEAM, args.length, sync) for sample in b))
                 for name, model in models.items()}, args.generation_rounds)
            results[size] = ratios_to(medians)
    return results


def markdown(results, labels, args, command):
    lines = ["# Constrained attention speed: throughput ratio to softmax", "",
             provenance_header(command),
             f"Device `{args.device}`, dtype `{args.dtype}`, median of {args.repeats} "
             "interleaved rounds. Cells are `softmax time / transform time` for the "
             "transform alone (scores and bounds in, weights out): 1.0 is as fast as "
             "softmax. Keys are the last dimension (40 source positions, 10-20% padded); "
             "bounds are `max(0, f - beta)` with fertilities f in {1, 2, 3}, random "
             "cumulative attention beta and a `+inf` sink at each source's last key. "
             "Training includes the backward pass to the scores and the bounds.", ""]
    for mode, title in MODES.items():
        rows = [[name] + [f"{results[mode][lab][name]['throughput_ratio']:.2f}" for lab in labels]
                for name in METHODS]
        lines += [f"## {title}", "", markdown_table(["transform", *labels], rows)]
    rows = [[title.split(":")[0]] + [f"{1e6 * results[mode][lab]['softmax']['median_s']:.1f}"
                                     for lab in labels] for mode, title in MODES.items()]
    lines += ["## Softmax time per call (microseconds), the reference", "",
              markdown_table(["mode", *labels], rows)]
    generation = results.get("generation")
    if generation:
        lines += [f"## Beam-{BEAM} generation with the LSTM: time ratio to softmax", "",
                  f"{args.sentences} random source sentences of {int(0.8 * args.length)}-"
                  f"{args.length} tokens in batches of {args.batch_size}, every hypothesis "
                  f"forced to {args.length} tokens, median of {args.generation_rounds} "
                  "interleaved rounds; cells are `decoding time / softmax decoding time` "
                  "(lower is faster). csoftmax and csparsemax run as in the paper: sink, "
                  "exhaustion c = 0.2, PREDICTED fertilities. "
                  + "; ".join(f"`{size}`: `{' '.join(LSTM_SIZES[size][0])}`, "
                              f"{LSTM_SIZES[size][1]} target words" for size in generation)
                  + ".", ""]
        rows = []
        for name in DECODINGS:
            verdict = ""
            if name == TARGET[0]:
                met = all(generation[size][name]["time_ratio"] <= TARGET[1]
                          for size in generation)
                verdict = f" (target <= {TARGET[1]}: {'met' if met else 'MISSED'})"
            rows.append([name + verdict] + [f"{generation[size][name]['time_ratio']:.2f}"
                                            for size in generation])
        rows.append(["softmax seconds per round"] + [
            f"{generation[size]['softmax']['median_s']:.2f}" for size in generation])
        lines.append(markdown_table(["decoding", *generation], rows))
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(".work/bench"),
                   help="write DIR/constrained.md and .json (default .work/bench; the "
                        "project publishes with --out results/bench)")
    add_timing_args(p, "transform")
    p.add_argument("--sizes", default="paper,small",
                   help=f"LSTM sizes to decode with, of {', '.join(LSTM_SIZES)}; 'none' to skip")
    p.add_argument("--sentences", type=int, default=64, help="sentences decoded per round")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--length", type=int, default=25, help="tokens per sentence, both sides")
    p.add_argument("--generation-rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true",
                   help="2 rounds, 1 warm-up call; generation: the small LSTM, 4 sentences "
                        "of 6 tokens, 1 round (tests)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.warmup, args.sample_s = 2, 1, 0.0
        args.sizes, args.sentences, args.batch_size, args.length = "small", 4, 4, 6
        args.generation_rounds = 1
    args.sizes = [] if args.sizes == "none" else args.sizes.split(",")
    unknown = [size for size in args.sizes if size not in LSTM_SIZES]
    if unknown:
        p.error(f"unknown --sizes {', '.join(unknown)}; choose from {', '.join(LSTM_SIZES)} "
                "or none")
    if min(args.repeats, args.sentences, args.batch_size, args.generation_rounds) < 1:
        p.error("--repeats, --sentences, --batch-size and --generation-rounds must be "
                "at least 1")
    if args.length < 2:
        p.error("--length must be at least 2")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = parse_args(argv)
    command = "python benchmarks/bench_constrained.py " + shlex.join(argv)
    dtype, sync, gen = start_timing(args)
    started = time.perf_counter()
    results, labels = {mode: {} for mode in MODES}, []
    for label, shape, sources in SHAPES:
        labels.append(label)
        scores, upper = make_inputs(shape, sources, dtype, args.device, gen)
        for mode in MODES:
            medians = bench_shape(scores, upper, mode, args, sync)
            results[mode][label] = ratios_to(medians)
    if args.sizes:
        results["generation"] = bench_generation(args, sync)
    elapsed = time.perf_counter() - started
    text = markdown(results, labels, args, command)
    print(text)
    print(f"benchmark took {elapsed:.1f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"command": command, "commit": git_commit(), "machine": describe_machine(),
              "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "shapes": labels, "elapsed_s": elapsed, "results": results}
    write_text_atomic(args.out / "constrained.md", text)
    write_text_atomic(args.out / "constrained.json", json.dumps(record, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
