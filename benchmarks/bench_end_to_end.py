"""End to end against fairseq's own transformer: training and generation speed of
``sparse_transformer`` with softmax and with every normaliser, as ratios measured in one
run, each naming its denominator and printed with its spread.

Rows, every one built from the same seed (so from the same initial weights):

* ``fairseq transformer``: fairseq's ``transformer`` (``transformer_iwslt_de_en`` at the
  IWSLT size), the limit: its encoder and training-time decoder self-attention run
  fairseq's fused attention;
* ``softmax``: ``sparse_transformer --attn-fn softmax``, our path (the ``Normalizer``
  wrapper, its guards and dispatch), which must be within noise of fairseq's;
* each normaliser with the default flags (its name alone: no ``--attn-impl``) and with
  each explicit implementation that runs on the device (``NAME [torch]``,
  ``NAME [compiled]``, on CUDA ``NAME [triton]``); hard retrieval in decoder self- and
  cross-attention.

Three measurements, in ``--rounds`` interleaved rounds (7 by default; round 1 runs every
row once, round 2 every row again, ...), each ratio the median of the per-round ratios (a
row divided by its denominator measured in the same round) with their minimum and maximum;
on CUDA a timed sample is the device's time between two CUDA events:

* training in this process: milliseconds per batch, forward + backward of the same
  batches (``--fp16`` makes the models half precision as fairseq-train does);
* ``fairseq-train`` words/s (median of its logging intervals, the first left out);
* ``fairseq-generate`` sentences/s, beam 5, every hypothesis forced to the same length
  (``--min-len`` = ``--max-len-b``, ``--max-len-a 0``): one checkpoint, our softmax's,
  decoded per row with ``--model-overrides``, and for fairseq's row a copy of it that
  records fairseq's architecture (whose hypotheses must equal our softmax's). With
  ``--in-process``, fairseq's beam search in this process instead, on models prepared as
  fairseq-generate prepares them (``prepare_for_inference_``).

On CUDA each row's kernel launches per decoding step are counted too, by torch's profiler
over one in-process decode.

    python benchmarks/bench_end_to_end.py --out .work/bench_end_to_end [--device cuda --fp16]
        [--models iwslt,demo] [--rounds 7]
"""

import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import torch

from sparse_attn_data.synthetic import binarize, write_corpus
from sparse_attn_experiments import pipeline
from sparse_attn_experiments.provenance import (
    describe_machine,
    git_commit,
    provenance_header,
)
from sparse_attn_experiments.timing import (
    decode_batches,
    device_clock,
    forced_steps,
    interleaved_samples,
    kernel_launches,
    prepare_for_inference,
    spread,
    summary,
)
from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic
from sparse_attn_plugin.markdown import markdown_table
from sparse_attn_plugin.normalizers import COMPILED, CONSTRAINED, IMPLS, NAMES
from sparse_attn_plugin.normalizers.fused_triton import have_triton

# bench_training (a script beside this one) also when this file is imported by its path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_training import MODELS, generate_flags, in_process, train_step  # noqa: E402

FAIRSEQ, SOFTMAX = "fairseq transformer", "softmax"
BEAM = 5  # as generate_flags' --beam
HARD = "hard (decoder self + cross)"
#: The denominators a ratio may have, as its column names them.
OVER_FAIRSEQ, OVER_SOFTMAX, OVER_TORCH = "÷ fairseq transformer", "÷ our softmax", "÷ its [torch]"
#: The issue's GPU targets for the default flags, ratios to our softmax: training, generation.
GPU_TARGETS = {"train": 0.95, "generate": 0.9}
GPU_TRAIN_TARGET_ALPHA = 0.9


@dataclass(frozen=True)
class Row:
    """One row: its label, the model's attention settings (``--attn-fn``-style flags in
    training, ``--model-overrides`` in decoding), whether it is fairseq's own transformer,
    its normaliser and its ``--attn-impl`` (None: the default flags)."""

    label: str
    settings: Dict[str, str] = field(default_factory=dict)
    fairseq: bool = False
    name: str = SOFTMAX
    impl: Optional[str] = None


def make_rows(names: List[str], impls: List[str]) -> List[Row]:
    rows = [Row(FAIRSEQ, fairseq=True), Row(SOFTMAX, {"attn_fn": SOFTMAX})]
    for name in names:
        if name == "hard":
            rows.append(Row(HARD, {"decoder_self_attn_fn": "hard",
                                   "decoder_cross_attn_fn": "hard"}, name="hard"))
            continue
        rows.append(Row(name, {"attn_fn": name}, name=name))
        rows += [Row(f"{name} [{impl}]", {"attn_fn": name, "attn_impl": impl}, name=name,
                     impl=impl) for impl in impls if name in COMPILED]
    return rows


def fairseq_arch(model: str) -> str:
    """fairseq's own architecture of the same size as ``model``'s."""
    flags = MODELS[model][0]
    return flags[flags.index("--arch") + 1].removeprefix("sparse_")


def model_tokens(model: str) -> int:
    flags = MODELS[model][0]
    return int(flags[flags.index("--max-tokens") + 1])


def row_flags(row: Row, model: str) -> List[str]:
    """The row's training flags after the model's."""
    if row.fairseq:
        return ["--arch", fairseq_arch(model)]
    return [f for key, value in row.settings.items() for f in (f"--{key.replace('_', '-')}", value)]


def row_overrides(row: Row) -> List[str]:
    """fairseq-generate flags that decode our softmax checkpoint as this row (fairseq's
    transformer decodes :func:`as_fairseq_transformer`'s copy instead)."""
    if row.fairseq or row.label == SOFTMAX:
        return []
    return ["--model-overrides", repr(row.settings)]


def as_fairseq_transformer(checkpoint: Path, copy: Path, arch: str) -> Path:
    """A copy of our softmax ``checkpoint`` whose recorded architecture is fairseq's
    ``arch``: the same weights (a softmax model has no parameter of its own), loaded by
    fairseq as its ``TransformerModel``. (``--model-overrides`` cannot do this: fairseq
    sets an overridden ``_name`` on the task's and every other section's settings too.)"""
    state = torch.load(checkpoint, weights_only=False)
    own = [k for k in state["model"] if ".normalizer." in k]
    if own:
        raise ValueError(f"{checkpoint}: not a softmax checkpoint ({own[0]})")
    state["cfg"]["model"].arch = state["cfg"]["model"]._name = arch
    torch.save(state, copy)
    return copy


def torch_row(row: Row, rows: List[Row]) -> Optional[Row]:
    """The ``[torch]`` row of a default-flags row whose normaliser has implementations."""
    if row.impl is not None or row.name not in COMPILED:
        return None
    return next((r for r in rows if r.name == row.name and r.impl == "torch"), None)


# --- the measurements ------------------------------------------------------------------------

def same_state(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def train_in_process(data, model, rows, args, flags):
    """Milliseconds per training batch of every row in every round, whether fairseq's
    transformer and our softmax start from identical weights, and the target tokens per
    batch."""
    built, samples, _ = in_process(data, flags, {r.label: row_flags(r, model) for r in rows},
                                   args.batches, args.device, args.fp16)
    identical = same_state(built[FAIRSEQ][0], built[SOFTMAX][0])
    tokens = sum(sample["ntokens"] for sample in samples) / len(samples)

    def step(label):
        train_step(*built[label], samples)

    for label in built:  # compiles, and lets the default implementation settle
        step(label)
        step(label)
    seconds = interleaved_samples({label: (lambda x=label: step(x)) for label in built},
                                  args.rounds, clock=device_clock(args.device))
    built.clear()  # free the models before the next measurement
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return {label: [1e3 * s / args.batches for s in runs] for label, runs in seconds.items()}, \
        identical, tokens


def decoders(data, model, rows, args, flags):
    """Per row, a decode in this process by fairseq's beam search (beam 5, batches of 128
    test sentences, every hypothesis forced to ``--length`` tokens) that returns the best
    hypotheses (token ids), the rows' models built from one seed and prepared as
    fairseq-generate prepares them; and the sentences and decoding steps of a decode."""
    from fairseq.sequence_generator import SequenceGenerator

    built, _, task = in_process(data, flags, {r.label: row_flags(r, model) for r in rows}, 0,
                                args.device, args.fp16)
    batches = decode_batches(task, 128, args.device)
    sentences = sum(batch["nsentences"] for batch in batches)
    generators = {label: SequenceGenerator([prepare_for_inference(network, BEAM)],
                                           task.target_dictionary, beam_size=BEAM,
                                           min_len=args.length, max_len_a=0,
                                           max_len_b=args.length)
                  for label, (network, _) in built.items()}

    def decode(label):
        with torch.inference_mode():
            return [hypo[0]["tokens"].tolist() for batch in batches
                    for hypo in generators[label].generate(None, batch)]

    return ({label: (lambda x=label: decode(x)) for label in generators}, sentences,
            len(batches) * forced_steps(args.length))


def launches_per_step(decode, steps, device):
    """Kernel launches per decoding step of each of ``decode`` (decoded before: warm), by
    one more decode under torch's profiler; None on the CPU, which launches none."""
    if device != "cuda":
        return dict.fromkeys(decode)
    return {label: kernel_launches(run) / steps for label, run in decode.items()}


def generate_in_process(data, model, rows, args, flags):
    """Sentences/s of every row in every round decoded in this process (:func:`decoders`),
    each row's hypotheses of an untimed first decode, and its kernel launches per decoding
    step (:func:`launches_per_step`)."""
    decode, sentences, steps = decoders(data, model, rows, args, flags)
    hypotheses = {label: run() for label, run in decode.items()}  # untimed: compiles, settles
    seconds = interleaved_samples(decode, args.rounds, clock=device_clock(args.device))
    return ({label: [sentences / s for s in runs] for label, runs in seconds.items()},
            hypotheses, launches_per_step(decode, steps, args.device))


def launches_in_process(data, model, rows, args, flags):
    """Kernel launches per decoding step of every row decoded in this process on CUDA
    (after an untimed decode each), for the rows that fairseq-generate timed."""
    decode, _, steps = decoders(data, model, rows, args, flags)
    for run in decode.values():
        run()
    return launches_per_step(decode, steps, args.device)


def rotated(rows, r):
    return rows[r % len(rows):] + rows[:r % len(rows)]


def fairseq_train(data, model, rows, args, flags, work, checkpoint):
    """fairseq-train words/s of every row in every round; our softmax's first run saves
    ``checkpoint``, the one every row decodes."""
    words = {r.label: [None] * args.rounds for r in rows}
    for r in range(args.rounds):
        for row in rotated(rows, r):
            keep = r == 0 and row.label == SOFTMAX
            run_dir = work / f"{model}-train-{rows.index(row)}"
            trained = pipeline.train(
                data, run_dir, [*flags, *row_flags(row, model), *([] if keep else ["--no-save"])],
                args.updates or MODELS[model][1], desc=f"{model} round {r + 1} {row.label}",
                skip_first_interval=True, env=args.env)
            words[row.label][r] = trained.words_per_second
            if keep:
                shutil.copy(trained.checkpoint, checkpoint)
            shutil.rmtree(run_dir, ignore_errors=True)
    return words


def fairseq_generate(data, model, rows, args, checkpoint, work):
    """fairseq-generate sentences/s of every row in every round (after ``--gen-warmup``
    untimed decodes each), and each row's hypotheses of the first round."""
    flags = [*generate_flags(args.length), *args.device_flags]
    fairseq_copy = as_fairseq_transformer(checkpoint, work / f"{model}-as-fairseq.pt",
                                          fairseq_arch(model))
    speed = {r.label: [None] * args.rounds for r in rows}
    hypotheses = {}
    for r in range(-args.gen_warmup, args.rounds):
        for row in rotated(rows, r):
            log = work / f"{model}-generate-{rows.index(row)}.log"
            out = pipeline.generate(data, fairseq_copy if row.fairseq else checkpoint,
                                    [*flags, *row_overrides(row)], log, env=args.env)
            if r >= 0:
                speed[row.label][r] = out.sentences_per_second
                hypotheses.setdefault(row.label, out.output.hypotheses)
    return speed, hypotheses


# --- ratios, spreads, verdicts ---------------------------------------------------------------

def paired(values, base, faster_is_smaller):
    """Median, minimum and maximum of the per-round speed ratios ``row / base`` (for
    times: ``base / row``), or None where a round has no value."""
    if base is None or None in values or None in base:
        return None
    return summary([b / v if faster_is_smaller else v / b for v, b in zip(values, base)])


def ratios(samples, rows, faster_is_smaller):
    """Per row: its ratios to fairseq's transformer, to our softmax and (default flags of a
    normaliser with implementations) to its ``[torch]`` row."""
    out = {}
    for row in rows:
        values = samples[row.label]
        torch_of = torch_row(row, rows)
        out[row.label] = {
            OVER_FAIRSEQ: paired(values, samples[FAIRSEQ], faster_is_smaller),
            OVER_SOFTMAX: paired(values, samples[SOFTMAX], faster_is_smaller),
            OVER_TORCH: paired(values, samples[torch_of.label], faster_is_smaller)
            if torch_of else None}
    return out


def target(row: Row, measure: str, device: str):
    """``(denominator, threshold, strict)`` of the issue's target for this row and
    measure (``train`` or ``generate``) on ``device``, or None. Strict: the whole range
    must reach the threshold; otherwise (``not slower beyond the spread``) only its top."""
    if row.label == SOFTMAX:
        return OVER_FAIRSEQ, 1.0, False
    if row.fairseq or row.impl is not None:
        return None
    if device == "cuda":
        threshold = GPU_TARGETS[measure]
        if measure == "train" and row.name == "entmax_alpha":
            threshold = GPU_TRAIN_TARGET_ALPHA
        return OVER_SOFTMAX, threshold, True
    if row.name in COMPILED:
        return OVER_TORCH, 1.0, False
    return None


def verdict(stats, threshold, strict) -> str:
    """``meets`` when the whole range reaches ``threshold``; ``below`` when none of it
    does; in between ``within spread`` (strict) or ``meets (within spread)``."""
    if stats is None:
        return "n/a"
    if stats["min"] >= threshold:
        return "meets"
    if stats["max"] < threshold:
        return "below"
    return "within spread" if strict else "meets (within spread)"


def judge(row, measure, device, by_denominator):
    aim = target(row, measure, device)
    if aim is None:
        return None
    denominator, threshold, strict = aim
    text = f"≥ {threshold:g} {denominator}" + ("" if strict else " (not below beyond spread)")
    return {"target": text, "verdict": verdict(by_denominator[denominator], threshold, strict)}


# --- report ------------------------------------------------------------------------------------

def value_cell(values, digits=1):
    return "n/a" if None in values else spread(values, digits)


def ratio_cell(stats):
    return "-" if stats is None else spread(stats["rounds"])


def model_tables(model, result, rows, args):
    parts = []
    checks = result["checks"]
    parts.append(
        f"## {model} model\n\n"
        f"fairseq's `{fairseq_arch(model)}` and our `sparse_transformer --attn-fn softmax` "
        f"built from the same seed: initial weights "
        f"{'identical' if checks['initial_weights_identical'] else 'DIFFERENT'}. "
        + ("Decoded from those weights" if args.in_process
           else "Our softmax checkpoint decoded as fairseq's transformer")
        + f": {checks['identical_hypotheses']} of {checks['sentences']} hypotheses identical "
        "to our softmax's.\n")
    decoded_by = "in process" if args.in_process else "fairseq-generate"
    for measure, title, unit in (("train", "training", "ms per batch (in process)"),
                                 ("generate", "generation", f"sentences/s ({decoded_by})")):
        table = []
        for row in rows:
            record = result["rows"][row.label]
            key = "train_ms_per_batch" if measure == "train" else "sentences_per_second"
            cells = [row.label, value_cell(record[key])]
            cells += [ratio_cell(record["ratios"][measure][d])
                      for d in (OVER_FAIRSEQ, OVER_SOFTMAX, OVER_TORCH)]
            if measure == "train":
                cells.append(value_cell(record["words_per_second"], 0) if args.in_process
                             else ratio_cell(record["ratios"]["words"][OVER_SOFTMAX]))
            elif args.device == "cuda":
                cells.append(f"{record['kernel_launches_per_step']:.1f}")
            judged = record["targets"][measure]
            cells += [judged["target"], judged["verdict"]] if judged else ["-", "-"]
            table.append(cells)
        headers = ["row", unit, f"speed {OVER_FAIRSEQ}", f"speed {OVER_SOFTMAX}",
                   f"speed {OVER_TORCH}"]
        if measure == "train":
            headers.append("target words/s (in process)" if args.in_process
                           else f"fairseq-train words/s {OVER_SOFTMAX}")
        elif args.device == "cuda":
            headers.append("kernel launches per step")
        parts.append(f"### {model} model: {title}\n\n"
                     + markdown_table([*headers, "target", "verdict"], table))
    return parts


def measured_by_fairseq(args, updates, tokens):
    return (f"fairseq-train words/s over {updates} updates (the first logging interval left "
            f"out); tokens per training batch {tokens}. Generation: fairseq-generate of "
            f"{args.test_size} sentences, beam 5, batch 128, every hypothesis forced to "
            f"{args.length} tokens, our softmax's checkpoint decoded per row with "
            "`--model-overrides` (for fairseq's transformer: a copy of it recording fairseq's "
            f"architecture), after {args.gen_warmup} untimed decode(s) per row (on-disk "
            "compile caches warm). ")


def measured_in_process(args, tokens):
    return (f"words/s are target tokens per batch over its time (tokens per training batch "
            f"{tokens}). Generation (`--in-process`, no fairseq command started): fairseq's "
            f"beam search in this process over {args.test_size} test sentences, beam 5, "
            f"batches of 128, every hypothesis forced to {args.length} tokens, each row's "
            "model built from the same seed (untrained: with the length forced, decoding "
            "does the same work whatever the weights) and prepared as fairseq-generate "
            "prepares it (`prepare_for_inference_`), after one untimed decode per row. ")


def launches_text(args):
    where = ("one more decode of the row" if args.in_process else
             "one decode in this process of the row's model built from the same seed and "
             "prepared as fairseq-generate prepares it")
    return (f"Kernel launches per step: the kernels torch's profiler lists on the device over "
            f"{where}, the encoder's included, divided by its decoding steps (each batch's "
            f"{args.length} tokens and EOS). ")


def render(results, rows, args, command):
    fp16 = ", `--fp16`" if args.fp16 else ""
    updates = ", ".join(f"{m} {args.updates or MODELS[m][1]}" for m in results)
    tokens = ", ".join(f"{m} {args.max_tokens or model_tokens(m)}" for m in results)
    parts = [
        "# End to end against fairseq's transformer: training and generation speed\n",
        provenance_header(command),
        f"Device `{args.device}`{fp16}; {args.rounds} interleaved rounds (round 1 runs every "
        "row once, round 2 every row again, ...)"
        + (", each sample timed in this process the device's time between two CUDA events"
           if args.device == "cuda" else "") + ". Every cell is `median [min–max]` over the "
        "rounds; a ratio is a speed ratio (above 1: the row is faster), the median and range "
        "of the per-round ratios, each round's row divided by its denominator measured in the "
        "same round, and its column names the denominator: `fairseq transformer` is "
        "fairseq's own `transformer` (its fused attention), `our softmax` is "
        "`sparse_transformer --attn-fn softmax` (the Normalizer wrapper), `its [torch]` the "
        "same normaliser with `--attn-impl torch`. A normaliser's name alone is the default "
        "flags (no `--attn-impl`); `NAME [impl]` is `--attn-impl impl`.\n",
        f"Training: {args.batches} batches (forward + backward) per timed sample, built in "
        "this process as fairseq-train builds them (two untimed steps each first); "
        + (measured_in_process(args, tokens) if args.in_process
           else measured_by_fairseq(args, updates, tokens))
        + (launches_text(args) if args.device == "cuda" else "")
        + "Targets: our softmax not below fairseq's transformer beyond the spread; on a GPU "
        f"the default flags of every normaliser at least {GPU_TARGETS['train']} of our "
        f"softmax in training ({GPU_TRAIN_TARGET_ALPHA} for learned alpha) and "
        f"{GPU_TARGETS['generate']} in generation; on a CPU the default flags not slower "
        "than `--attn-impl torch` beyond the spread. `meets` only where the whole range "
        "reaches the target.\n"]
    for model, result in results.items():
        parts += model_tables(model, result, rows, args)
    return "\n".join(parts)


# --- command line --------------------------------------------------------------------------

def parse_args(argv):
    cuda = torch.cuda.is_available()
    parser = CommandParser(description=__doc__.split("\n\n")[0],
                           command="bench_end_to_end.py")
    parser.add_argument("--out", type=Path, required=True,
                        help="write DIR/end_to_end.md and DIR/end_to_end.json")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if cuda else "cpu")
    parser.add_argument("--fp16", action="store_true", help="half precision (CUDA only)")
    parser.add_argument("--models", default="iwslt,demo",
                        help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--attn-fns", default=",".join(
        n for n in NAMES if n not in (SOFTMAX, *CONSTRAINED)),
        help="normalisers beside fairseq's transformer and our softmax")
    parser.add_argument("--attn-impls", help="explicit --attn-impl rows (default: torch, "
                                             "compiled, and triton on CUDA with Triton)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=8,
                        help="training batches per timed in-process sample")
    parser.add_argument("--max-tokens", type=int, help="tokens per training batch "
                                                       "(default: the model's)")
    parser.add_argument("--updates", type=int,
                        help="fairseq-train updates per run (default: iwslt 20, demo 60)")
    parser.add_argument("--length", type=int, default=25, help="generated tokens per sentence")
    parser.add_argument("--test-size", type=int, default=200)
    parser.add_argument("--gen-warmup", type=int, default=1,
                        help="untimed fairseq-generate runs per row before the rounds")
    parser.add_argument("--threads", type=int,
                        help="CPU threads of this process and of fairseq's commands (default: "
                             "torch's; on a shared machine 1 is steadier)")
    parser.add_argument("--work-dir", type=Path, help="default: a temporary directory")
    parser.add_argument("--in-process", action="store_true",
                        help="measure training words/s and generation sentences/s in this "
                             "process only, no fairseq-train or fairseq-generate command "
                             "(their start-up, 40 or more per model, would not fit a short "
                             "GPU lease)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run for tests: 2 rounds, 10 updates, 2 batches, 16 "
                             "sentences of 5 tokens, no warm-up decode")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.updates, args.batches = 2, 10, 2
        args.test_size, args.length, args.gen_warmup = 16, 5, 0
    if args.attn_impls is None:
        args.attn_impls = "torch,compiled" + (",triton" if args.device == "cuda"
                                              and have_triton() else "")
    args.model_list = args.models.split(",")
    args.names = args.attn_fns.split(",") if args.attn_fns else []
    args.impls = args.attn_impls.split(",") if args.attn_impls else []
    bad = [m for m in args.model_list if m not in MODELS]
    bad += [n for n in args.names if n not in NAMES or n in (SOFTMAX, *CONSTRAINED)]
    bad += [i for i in args.impls if i not in IMPLS or i == "auto"]
    if bad:
        parser.error(f"unknown or unusable model, normaliser or implementation: {', '.join(bad)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    if args.fp16 and args.device != "cuda":
        parser.error("--fp16 needs --device cuda")
    if "triton" in args.impls and args.device != "cuda":
        parser.error("--attn-impls triton needs --device cuda")
    if min(args.rounds, args.batches, args.length, args.test_size, args.threads or 1) < 1 \
            or args.gen_warmup < 0:
        parser.error("--rounds, --batches, --length, --test-size and --threads must be "
                     "positive")
    if args.updates is not None and args.updates < 10:
        parser.error("--updates must be at least 10 (speed is read every 5 updates)")
    args.device_flags = (["--cpu"] if args.device == "cpu" else []) + (
        ["--fp16"] if args.fp16 else [])
    args.env = None
    if args.threads:
        torch.set_num_threads(args.threads)
        args.env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
                        MKL_NUM_THREADS=str(args.threads))
    return args


def run_model(data, model, rows, args, work):
    flags = [*MODELS[model][0], *(["--max-tokens", str(args.max_tokens)] if args.max_tokens
                                  else []), *args.device_flags]
    in_process_ms, identical, tokens = train_in_process(data, model, rows, args, flags)
    if args.in_process:
        words = {label: [1e3 * tokens / ms for ms in runs]
                 for label, runs in in_process_ms.items()}
        speed, hypotheses, launches = generate_in_process(data, model, rows, args, flags)
    else:
        checkpoint = work / f"{model}-softmax.pt"
        words = fairseq_train(data, model, rows, args, flags, work, checkpoint)
        speed, hypotheses = fairseq_generate(data, model, rows, args, checkpoint, work)
        launches = (launches_in_process(data, model, rows, args, flags)
                    if args.device == "cuda" else dict.fromkeys(speed))
    by_measure = {"train": ratios(in_process_ms, rows, True), "words": ratios(words, rows, False),
                  "generate": ratios(speed, rows, False)}
    same = sum(a == b for a, b in zip(hypotheses[FAIRSEQ], hypotheses[SOFTMAX]))
    result = {"checks": {"initial_weights_identical": identical, "identical_hypotheses": same,
                         "sentences": len(hypotheses[SOFTMAX])}, "rows": {}}
    for row in rows:
        result["rows"][row.label] = {
            "flags": row_flags(row, model), "decode_flags": row_overrides(row),
            "train_ms_per_batch": in_process_ms[row.label],
            "words_per_second": words[row.label],
            "sentences_per_second": speed[row.label],
            "kernel_launches_per_step": launches[row.label],
            "ratios": {m: by[row.label] for m, by in by_measure.items()},
            "targets": {m: judge(row, m, args.device, by_measure[m][row.label])
                        for m in ("train", "generate")}}
    return result


def publish(results, rows, args, command, started) -> str:
    """Write the report of the models measured so far (end_to_end.md and .json)."""
    report = render(results, rows, args, command)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                if k != "env"}
    write_text_atomic(args.out / "end_to_end.md", report)
    write_json_atomic(args.out / "end_to_end.json", {
        "command": command, "commit": git_commit(), "machine": describe_machine(),
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "settings": settings, "elapsed_s": time.time() - started, "results": results})
    return report


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = parse_args(argv)
    command = "python benchmarks/bench_end_to_end.py " + shlex.join(argv)
    rows = make_rows(args.names, args.impls)
    started = time.time()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        write_corpus(work / "raw", train=5000, valid=100, test=args.test_size)
        data = Path(binarize(work / "raw", work / "bin"))
        for model in args.model_list:  # each model's tables written as soon as measured
            results[model] = run_model(data, model, rows, args, work)
            print(f"{model}: done after {time.time() - started:.0f} s", file=sys.stderr)
            report = publish(results, rows, args, command, started)
    print(report)
    print(f"done in {time.time() - started:.0f} s")
    return results


if __name__ == "__main__":
    main()
