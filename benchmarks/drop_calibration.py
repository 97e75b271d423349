"""Which alignment symmetrisation measures DROP faithfully? Measured on the synthetic
corpus, whose gold word alignments give the true drop rate.

A fast_align model is trained on the synthetic training pairs; for each
symmetrisation we report its alignment error rate against the gold test alignments
and the DROP it measures for hypotheses made by deleting reference words, next to
the true DROP computed from the gold alignments with the same definition
(``100 * sum |R \\ M| / sum |R|``: R = source words aligned to the reference, M = those
with at least one aligned word left in the hypothesis).

    python benchmarks/drop_calibration.py --out results/evaluation
"""

import argparse
import random
import sys
import tempfile
from pathlib import Path

from sparse_attn_data.synthetic import write_corpus
from sparse_attn_experiments.provenance import provenance_header
from sparse_attn_plugin.evaluation.aligner import (
    SYMMETRIZATIONS,
    aer,
    parse_pharaoh,
    train_aligner,
)
from sparse_attn_plugin.evaluation.drop import corpus_drop
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic
from sparse_attn_plugin.markdown import markdown_table


def delete_reference_words(refs, golds, fraction, seed=0):
    """Hypotheses with each reference word deleted with probability ``fraction``, and
    the true DROP: source words whose every gold-aligned word was deleted."""
    rng = random.Random(seed)
    hyps, dropped, aligned = [], 0, 0
    for ref, links in zip(refs, golds):
        words = ref.split()
        keep = [rng.random() >= fraction for _ in words]
        hyps.append(" ".join(w for w, k in zip(words, keep) if k))
        by_source = {}
        for i, j in links:
            by_source.setdefault(i, []).append(j)
        aligned += len(by_source)
        dropped += sum(not any(keep[j] for j in js) for js in by_source.values())
    return hyps, 100.0 * dropped / aligned


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train", type=int, default=20000, help="aligner training pairs")
    parser.add_argument("--test", type=int, default=1000, help="test pairs")
    parser.add_argument("--delete", type=float, default=0.15, help="reference words deleted")
    args = parser.parse_args(argv)
    if min(args.train, args.test) < 1 or not 0 < args.delete < 1:
        parser.error("--train and --test must be positive, --delete in (0, 1)")

    with tempfile.TemporaryDirectory() as tmp:
        write_corpus(Path(tmp), train=args.train, valid=1, test=args.test)
        train_src, train_tgt, src, ref, gold = [
            (Path(tmp) / name).read_text().splitlines()
            for name in ("train.src", "train.tgt", "test.src", "test.tgt", "test.align")]
    golds = [parse_pharaoh(line) for line in gold]
    aligner = train_aligner(train_src, train_tgt)
    hyps, true_drop = delete_reference_words(ref, golds, args.delete)
    rows, record = [], {"true_drop": true_drop, "by_symmetrization": {}}
    for sym in SYMMETRIZATIONS:
        error = aer(aligner.align_batch(src, ref, sym), golds)
        drop = corpus_drop(aligner, src, hyps, ref, symmetrize=sym).score
        record["by_symmetrization"][sym] = {"aer": error, "drop": drop}
        rows.append([sym, f"{error:.3f}", f"{drop:.2f}", f"{drop - true_drop:+.2f}"])
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python benchmarks/drop_calibration.py", *given])
    report = (f"# DROP calibration on the synthetic corpus\n\n{provenance_header(command)}\n"
              f"Aligner: fast_align (sil-thot), 5 iterations per direction, trained on "
              f"{args.train} synthetic pairs. Test: {args.test} pairs; hypotheses delete each "
              f"reference word with probability {args.delete}. **True DROP: {true_drop:.2f}** "
              "(from the gold alignments).\n\n"
              + markdown_table(["symmetrisation", "AER vs gold", "DROP measured",
                                "error vs true"], rows))
    write_text_atomic(args.out / "drop_calibration.md", report)
    write_json_atomic(args.out / "drop_calibration.json", record | {"settings": vars(args)
                                                                    | {"out": str(args.out)}})
    print(report)


if __name__ == "__main__":
    main()
