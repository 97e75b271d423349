"""End to end: a model trained with ``--criterion entmax_loss`` against the same model
trained with ``cross_entropy``, on a real corpus (Multi30k De-En: about 10k joined BPE
words), as ratios measured in the same interleaved rounds.

Training: the tiny transformer of results/multi30k (2+2 layers, 64-dim, batches of 1024
tokens), built in this process as fairseq-train builds it, forward + backward of the same
training batches; the ratio is ``cross-entropy's time / the row's`` (words/s, the same
words). Decoding: fairseq's ``SequenceGenerator``, beam 5, test sentences in batches of
64, every hypothesis forced to the same length (the models are untrained: their logits are
what training starts from), as ``sentences/s ÷ cross-entropy's``.

    python benchmarks/bench_entmax_loss_training.py --data data-bin/multi30k_de_en \\
        --out results/bench [--rounds 5] [--threads 2]
"""

import sys
from argparse import Namespace
from functools import partial
from pathlib import Path
from typing import List, Optional

import torch

from sparse_attn_experiments.comparison.models import ARCHITECTURES
from sparse_attn_experiments.provenance import git_commit, provenance_header
from sparse_attn_experiments.timing import interleaved_samples, paired_ratios, spread
from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic
from sparse_attn_plugin.markdown import markdown_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_training import in_process, train_step  # noqa: E402

#: Each row's criterion flags; the first is the denominator.
ROWS = {"cross_entropy": ["--criterion", "cross_entropy"],
        "entmax_loss 1.5": ["--criterion", "entmax_loss", "--loss-alpha", "1.5"],
        "entmax_loss 2 (sparsemax)": ["--criterion", "entmax_loss", "--loss-alpha", "2"],
        "entmax_loss 1.3": ["--criterion", "entmax_loss", "--loss-alpha", "1.3"]}
#: Issue 53's targets: training words/s and decoding sentences/s at least this share of
#: cross-entropy's (for --loss-alpha 1.5).
TARGETS = {"entmax_loss 1.5": 0.8}
BATCHES, BEAM, DECODE_BATCH, LENGTH = 8, 5, 64, 20


def model_flags() -> List[str]:
    """The tiny architecture's flags less its criterion (each row names its own)."""
    flags, dropped = [], {"--criterion", "--label-smoothing"}
    given = list(ARCHITECTURES["tiny"].flags)
    while given:
        flag = given.pop(0)
        if flag in dropped:
            given.pop(0)
        else:
            flags.append(flag)
    return flags


def decode_calls(built, task):
    """One ``generate`` over the test batches per row, by the search each model's task
    builds (an entmax-loss model's finishes hypotheses whose EOS has probability 0)."""
    task.load_dataset("test")
    dataset = task.dataset("test")
    size = min(len(dataset), 4 * DECODE_BATCH)
    batches = [dataset.collater([dataset[i] for i in range(start, min(start + DECODE_BATCH,
                                                                      size))])
               for start in range(0, size, DECODE_BATCH)]
    calls = {}
    for name, (network, _) in built.items():
        network.eval()
        settings = Namespace(beam=BEAM, min_len=LENGTH, max_len_a=0, max_len_b=LENGTH)
        generator = task.build_generator([network], settings)
        calls[name] = partial(_generate, generator, batches)
    return calls, sum(b["nsentences"] for b in batches)


def _generate(generator, batches):
    with torch.inference_mode():
        for sample in batches:
            generator.generate(None, sample)


def main(argv: Optional[List[str]] = None) -> int:
    parser = CommandParser(prog="bench_entmax_loss_training.py",
                           description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path,
                        help="a binarized corpus (python -m sparse_attn_data.multi30k_de_en)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if not (args.data / "dict.en.txt").is_file() and not list(args.data.glob("dict.*.txt")):
        parser.error(f"--data {args.data}: no fairseq dictionary there (binarize a corpus "
                     "first)")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: not a directory")
    torch.set_num_threads(args.threads)
    command = "python benchmarks/bench_entmax_loss_training.py " + " ".join(argv or sys.argv[1:])
    built, samples, task = in_process(args.data, model_flags(), ROWS, BATCHES)
    train = {name: partial(train_step, *built[name], samples) for name in built}
    for call in train.values():
        call()
    training = paired_ratios(interleaved_samples(train, args.rounds), "cross_entropy",
                             speed=True)
    decode, sentences = decode_calls(built, task)
    for call in decode.values():
        call()
    decoding = paired_ratios(interleaved_samples(decode, args.rounds), "cross_entropy",
                             speed=True)
    rows = []
    for name in ROWS:
        target = TARGETS.get(name)
        verdict = "" if target is None else " ".join(
            f"≥ {target} ({'met' if part[name]['median'] >= target else 'missed'})"
            for part in (training, decoding))
        rows.append([name, spread(training[name]["rounds"]), spread(decoding[name]["rounds"]),
                     verdict])
    words = sum(int(s["ntokens"]) for s in samples)
    text = "\n".join([
        "# Training and decoding with the entmax loss against cross-entropy (cpu)", "",
        provenance_header(command), __doc__.split("\n\n")[1].replace("\n", " "), "",
        f"{args.rounds} interleaved rounds, {args.threads} threads; {BATCHES} training "
        f"batches ({words} target words) per sample, cross-entropy "
        f"{training['cross_entropy']['seconds']['median'] * 1e3 / BATCHES:.1f} ms a batch; "
        f"{sentences} test sentences decoded per sample at {LENGTH} tokens, cross-entropy "
        f"{decoding['cross_entropy']['seconds']['median']:.2f} s.", "",
        markdown_table(["criterion", "training words/s ÷ cross_entropy",
                        "decoding sentences/s ÷ cross_entropy", "targets (train, decode)"],
                       rows), ""])
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "entmax_loss_training.json",
                      {"command": command, "commit": git_commit(), "training": training,
                       "decoding": decoding})
    write_text_atomic(args.out / "entmax_loss_training.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
