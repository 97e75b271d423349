"""How long scoring takes: seconds per 10k sentences for each metric, and for
training the DROP word aligner on 100k sentence pairs.

Inputs are the synthetic corpus's references and hypotheses made from them by
deleting about 15% of their words (so every metric has real work to do). Unlike
attention speed, which is always a ratio to softmax, these are wall-clock seconds
on the machine named in the output: they tell a user what scoring a test set costs.

    python benchmarks/bench_metrics.py --out results/bench
"""

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from sparse_attn_data.synthetic import write_corpus
from sparse_attn_experiments.provenance import provenance_header
from sparse_attn_plugin.evaluation import Meteor, corpus_bleu, corpus_chrf, corpus_rep
from sparse_attn_plugin.evaluation.aligner import train_aligner
from sparse_attn_plugin.evaluation.drop import (
    DROP_SYMMETRIZATION,
    PUBLISHED_SYMMETRIZATION,
    corpus_drop,
)
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic
from sparse_attn_plugin.markdown import markdown_table


def delete_words(lines, fraction, seed=0):
    rng = random.Random(seed)
    return [" ".join(w for w in line.split() if rng.random() >= fraction) for line in lines]


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=10000, help="sentences scored")
    parser.add_argument("--align-pairs", type=int, default=100000, help="aligner training pairs")
    args = parser.parse_args(argv)
    if min(args.sentences, args.align_pairs) < 1:
        parser.error("--sentences and --align-pairs must be positive")

    with tempfile.TemporaryDirectory() as tmp:
        write_corpus(Path(tmp), train=args.align_pairs, valid=1, test=args.sentences)
        train_src, train_tgt, src, refs = [
            (Path(tmp) / name).read_text().splitlines()
            for name in ("train.src", "train.tgt", "test.src", "test.tgt")]
    hyps = delete_words(refs, 0.15)

    seconds = {}
    seconds["BLEU"], _ = timed(lambda: corpus_bleu(hyps, refs))
    seconds["chrF"], _ = timed(lambda: corpus_chrf(hyps, refs))
    seconds["REP"], _ = timed(lambda: corpus_rep(hyps, refs))
    meteor = None

    def start_meteor():  # the jar loads lazily: start-up ends with its first answer
        nonlocal meteor
        meteor = Meteor("other")
        meteor.score(hyps[:1], refs[:1])

    seconds["METEOR start-up (once per process)"], _ = timed(start_meteor)
    seconds["METEOR (after start-up)"], _ = timed(lambda: meteor.score(hyps, refs))
    meteor.close()
    seconds[f"aligner training ({args.align_pairs} pairs, both directions)"], aligner = timed(
        lambda: train_aligner(train_src, train_tgt))
    for name, which in ((DROP_SYMMETRIZATION, "the default"),
                        (PUBLISHED_SYMMETRIZATION, "the paper's")):
        seconds[f"DROP, {name} ({which}; force-align source-reference and "
                "source-hypothesis)"], _ = timed(
            lambda name=name: corpus_drop(aligner, src, hyps, refs, name))

    per_10k = 10000 / args.sentences
    rows = [[name, f"{s:.1f}" if "training" in name or "start-up" in name
             else f"{s * per_10k:.1f}"] for name, s in seconds.items()]
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python benchmarks/bench_metrics.py", *given])
    report = (f"# Scoring cost\n\n{provenance_header(command)}\n"
              f"{args.sentences} synthetic test sentences (hypotheses: references with 15% of "
              "words deleted). Metric rows are seconds per 10k sentences; training and start-up "
              "rows are seconds once. METEOR uses the `other` preset (exact matches; the `en` "
              "preset's start-up also loads the English paraphrase table); DROP is timed "
              f"with {DROP_SYMMETRIZATION} alignments, its default, and with the paper's "
              f"{PUBLISHED_SYMMETRIZATION}.\n\n"
              + markdown_table(["step", "seconds"], rows))
    write_text_atomic(args.out / "metrics.md", report)
    write_json_atomic(args.out / "metrics.json", {"seconds": seconds, "settings": vars(args)
                                                  | {"out": str(args.out)}})
    print(report)


if __name__ == "__main__":
    main()
