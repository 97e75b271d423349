"""``sparse-attn-score``: BLEU, chrF, METEOR, REP and DROP of a translation in one command.

    sparse-attn-score --hyp hyp.txt --ref ref.txt --src src.txt \
        --metrics bleu,chrf,meteor,rep,drop --aligner MODEL_DIR --lang en
    sparse-attn-score --generate-output gen.out --remove-bpe subword_nmt --json scores.json
    sparse-attn-score --hyp sparse.txt --ref ref.txt --baseline softmax.txt  # paired test

Every input is read and checked before anything is scored or written: a missing,
empty or non-UTF-8 file, or files whose line counts differ, stop with one line
naming the files, and no output file is created.
"""

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import List, NamedTuple, Optional

from ..command_line import CommandParser
from ..files import InputError, read_lines, write_text_atomic
from . import scoring
from .aligner import MANIFEST, SYMMETRIZATIONS, Aligner
from .drop import DROP_SYMMETRIZATION, PUBLISHED_SYMMETRIZATION
from .generate_output import read_generate_output
from .meteor import Meteor
from .scoring import METRICS, metric_names
from .significance import RESAMPLES, paired_bootstrap
from .text import remove_bpe

#: What is scored when ``--metrics`` is not given: the metrics that need nothing but the
#: hypotheses and references.
DEFAULT_METRICS = ("BLEU", "chrF", "REP")


class Inputs(NamedTuple):
    """What is scored, de-BPE'd and equal in length: the system's hypotheses, the
    references, the sources (or None) and a baseline's hypotheses (or None)."""

    hypotheses: List[str]
    references: List[str]
    sources: Optional[List[str]]
    baseline: Optional[List[str]]


def _baseline(args, references) -> Optional[List[str]]:
    """``--baseline``'s hypotheses, read in the form the system's come in."""
    if not args.baseline:
        return None
    if "BLEU" not in args.metrics:
        raise InputError("--baseline compares BLEU: add BLEU to --metrics")
    if not args.generate_output:
        return read_lines(args.baseline, nonempty=True)
    out = read_generate_output(read_lines(args.baseline, nonempty=True))
    if out.references != references:
        raise InputError(f"{args.baseline} and {args.generate_output} translate different "
                         "sentences (their T lines differ)")
    return out.hypotheses


def load_inputs(args) -> Inputs:
    """The inputs, checked before anything is scored; InputError naming what is wrong."""
    if args.generate_output:
        out = read_generate_output(read_lines(args.generate_output, nonempty=True))
        hyps, refs, srcs = out.hypotheses, out.references, out.sources
        named = {"hypotheses (H)": hyps, "references (T)": refs}
    else:
        if not (args.hyp and args.ref):
            raise InputError("give --hyp and --ref, or --generate-output")
        hyps, refs = read_lines(args.hyp, nonempty=True), read_lines(args.ref, nonempty=True)
        srcs = read_lines(args.src, nonempty=True) if args.src else None
        named = {str(args.hyp): hyps, str(args.ref): refs}
        if srcs is not None:
            named[str(args.src)] = srcs
    baseline = _baseline(args, refs)
    if baseline is not None:
        named[str(args.baseline)] = baseline
    counts = {name: len(lines) for name, lines in named.items()}
    if len(set(counts.values())) > 1:
        raise InputError("line counts differ: "
                         + ", ".join(f"{name} has {n}" for name, n in counts.items()))
    if "DROP" in args.metrics and (srcs is None or not args.aligner):
        raise InputError("DROP needs the sources (--src, or S lines) and --aligner MODEL_DIR "
                         "(train one with sparse-attn-align train)")
    if args.aligner and not (args.aligner / MANIFEST).is_file():
        raise InputError(f"{args.aligner}: not an aligner model (sparse-attn-align train --out)")
    def clean(lines):
        return None if lines is None else [remove_bpe(line, args.remove_bpe) for line in lines]

    return Inputs(clean(hyps), clean(refs), clean(srcs), clean(baseline))


def score(args, inputs: Inputs):
    """{metric: {"score": float, ...}} and per-sentence columns; BLEU's entry holds the
    paired bootstrap against the baseline where there is one."""
    hyps, refs, srcs = inputs.hypotheses, inputs.references, inputs.sources
    meteor = Meteor(args.lang) if "METEOR" in args.metrics else None
    bleu_options = {"tokenize": args.tokenize, "lowercase": args.lowercase}
    with meteor or nullcontext():
        result = scoring.score(
            hyps, refs, srcs, args.metrics, meteor=meteor,
            bleu_options=bleu_options,
            aligner=Aligner.load(args.aligner) if "DROP" in args.metrics else None,
            symmetrizations=[args.symmetrize])
    scores, per_sentence = {}, {}
    if result.bleu:
        scores["bleu"] = {"score": result.bleu.score, "signature": result.bleu.signature,
                          "details": result.bleu.details}
        if inputs.baseline is not None:
            scores["bleu"]["paired_bootstrap"] = paired_bootstrap(
                hyps, inputs.baseline, refs, args.resamples, **bleu_options).record()
    if result.chrf:
        scores["chrf"] = {"score": result.chrf.score, "signature": result.chrf.signature}
    if result.meteor:
        scores["meteor"] = {"score": result.meteor.corpus, "language": args.lang}
        per_sentence["meteor"] = result.meteor.sentences
    if result.rep:
        scores["rep"] = {"score": result.rep.score,
                         "reference_tokens": result.rep.reference_tokens}
        per_sentence["rep"] = result.rep.sentences
    if result.drop:
        scores["drop"] = {"score": result.drop.score, "symmetrize": result.drop.symmetrize,
                          "aligned_source_words": result.drop.aligned}
        per_sentence["drop"] = [f"{dropped}/{aligned}"
                                for dropped, aligned in result.drop.sentences]
    return scores, per_sentence


def table(scores) -> str:
    rows = [f"{'metric':<8} {'score':>8}  details"]
    for name, entry in scores.items():
        if "signature" in entry:
            detail = entry["signature"]
        elif "language" in entry:
            detail = f"lang {entry['language']}"
        elif "symmetrize" in entry:
            detail = f"symmetrize {entry['symmetrize']}"
        else:
            detail = f"{entry['reference_tokens']} ref tokens"
        rows.append(f"{metric_names([name])[0]:<8} {entry['score']:>8.2f}  {detail}")
        if "paired_bootstrap" in entry:
            paired = entry["paired_bootstrap"]
            rows.append(f"{'vs base':<8} {paired['difference']:>+8.2f}  [{paired['low']:+.2f}, "
                        f"{paired['high']:+.2f}] 95% interval, p {paired['p']:.3f} (paired "
                        f"bootstrap, {paired['resamples']} resamples)")
    return "\n".join(rows)


def parse_metrics(text):
    try:
        return metric_names(text.split(","))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser():
    p = CommandParser(prog="sparse-attn-score", description=__doc__.split("\n\n")[0])
    p.add_argument("--hyp", type=Path, help="hypotheses, one per line")
    p.add_argument("--ref", type=Path, help="references, one per line")
    p.add_argument("--src", type=Path, help="sources, one per line (checked for line count)")
    p.add_argument("--generate-output", type=Path, help="fairseq-generate output (S/T/H lines)")
    p.add_argument("--baseline", type=Path,
                   help="another system's translations of the same sentences, in the form of "
                        "the scored ones (lines like --hyp, or fairseq-generate output like "
                        "--generate-output): prints BLEU's difference to it with a paired "
                        "bootstrap 95%% interval and p-value (Koehn 2004)")
    p.add_argument("--resamples", type=int, default=RESAMPLES,
                   help=f"--baseline's bootstrap draws (default {RESAMPLES})")
    p.add_argument("--metrics", type=parse_metrics, default=list(DEFAULT_METRICS),
                   help=f"comma-separated, any case, from {', '.join(METRICS)} "
                        f"(default {','.join(DEFAULT_METRICS)})")
    p.add_argument("--lang", default="en", help="METEOR language preset: en, de or other")
    p.add_argument("--tokenize", default="none",
                   help="sacrebleu tokenizer: none (tokenised text, as the papers) or 13a")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU and chrF")
    p.add_argument("--remove-bpe", nargs="?", const="subword_nmt", default=None,
                   metavar="SCHEME", help="undo BPE first: subword_nmt (default) or sentencepiece")
    p.add_argument("--aligner", type=Path, help="DROP's word aligner (sparse-attn-align train)")
    p.add_argument("--symmetrize", choices=SYMMETRIZATIONS, default=DROP_SYMMETRIZATION,
                   help=f"DROP's alignment symmetrisation (default {DROP_SYMMETRIZATION}, "
                        "which tracks true drops best; the paper's is "
                        f"{PUBLISHED_SYMMETRIZATION}, see docs/scoring.md)")
    p.add_argument("--json", type=Path, help="write the scores as JSON (- for stdout)")
    p.add_argument("--per-sentence", type=Path,
                   help="write per-sentence REP, METEOR and DROP (dropped/aligned) as TSV")
    return p


def run(argv=None) -> dict:
    """The command without its exit status: read, score, print the table, write the
    files asked for; the scores (``{metric: {"score": float, ...}}``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.resamples < 1:
        parser.fail(f"--resamples must be positive, not {args.resamples}")
    try:
        inputs = load_inputs(args)
        scores, per_sentence = score(args, inputs)
    except (InputError, ValueError, RuntimeError) as err:
        parser.fail(err)
    print(table(scores))
    try:
        if args.json:
            text = json.dumps(scores, indent=2) + "\n"
            if str(args.json) == "-":
                sys.stdout.write(text)
            else:
                write_text_atomic(args.json, text)
        if args.per_sentence:
            columns = list(per_sentence)
            lines = ["id\t" + "\t".join(columns)]
            lines += [f"{i}\t" + "\t".join(str(per_sentence[c][i]) for c in columns)
                      for i in range(len(inputs.hypotheses))]
            write_text_atomic(args.per_sentence, "\n".join(lines) + "\n")
    except OSError as err:
        parser.fail(err)
    return scores


def main(argv=None) -> int:
    """``sparse-attn-score``: exit status 0 once the scores are printed and written."""
    run(argv)
    return 0


if __name__ == "__main__":
    main()
