"""``sparse-attn-score``: BLEU, chrF, METEOR, REP and DROP of a translation in one command.

    sparse-attn-score --hyp hyp.txt --ref ref.txt --src src.txt \
        --metrics bleu,chrf,meteor,rep,drop --aligner MODEL_DIR --lang en
    sparse-attn-score --generate-output gen.out --remove-bpe subword_nmt --json scores.json
    sparse-attn-score --hyp sparse.txt --ref ref.txt --baseline softmax.txt  # paired test

Every input and output is checked before anything is scored or written: a missing,
empty or non-UTF-8 file, files whose line counts differ, fairseq output with a sentence
or a reference missing, an output in a folder that does not exist or over an input,
stop with one line naming the file, and no output file is created or replaced.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import List, NamedTuple, Optional

from sacrebleu.metrics import BLEU

from ..command_line import CommandParser
from ..files import check_outputs, write_texts_atomic
from ..reading import InputError, read_lines
from .aligner import MANIFEST, Aligner
from .generate_output import GenerateOutput, read_generate_output, unknown_words
from .metric import Setting
from .scoring import METRICS, Scorer, metric_names
from .significance import RESAMPLES, paired_bootstrap
from .text import remove_bpe

#: What is scored when ``--metrics`` is not given: the metrics that need nothing but the
#: hypotheses and references.
DEFAULT_METRICS = ("BLEU", "chrF", "REP")

#: ``--tokenize``'s choices: sacreBLEU's tokenizers.
TOKENIZERS = tuple(BLEU.TOKENIZERS)


class Inputs(NamedTuple):
    """What is scored, de-BPE'd and equal in length: the system's hypotheses, the
    references, the sources (or None) and a baseline's hypotheses (or None); and the
    warnings to print before scoring."""

    hypotheses: List[str]
    references: List[str]
    sources: Optional[List[str]]
    baseline: Optional[List[str]]
    warnings: List[str]


def _hypotheses(path) -> List[str]:
    """Translations, one a line; a blank line is an empty translation."""
    return read_lines(path, nonempty=True, blank=True)


def _generate_output(path, args) -> GenerateOutput:
    """fairseq's output in ``path``; without T- lines only where ``--ref`` is given; with
    its closing lines unless ``--ref`` (whose count must be the sentences') or
    ``--partial`` is given."""
    return read_generate_output(read_lines(path, nonempty=True), str(path),
                                references=not args.ref,
                                closed=not (args.ref or args.partial))


def _baseline(args, system: Optional[GenerateOutput]) -> Optional[List[str]]:
    """``--baseline``'s hypotheses, read in the form the system's come in: fairseq
    output must translate the system's sentences (same T- lines, or S- lines where
    either has no T- lines)."""
    if not args.baseline:
        return None
    if "BLEU" not in args.metrics:
        raise InputError("--baseline compares BLEU: add BLEU to --metrics")
    if system is None:
        return _hypotheses(args.baseline)
    out = _generate_output(args.baseline, args)
    kind, theirs, ours = (("T", out.references, system.references)
                          if None not in (out.references, system.references)
                          else ("S", out.sources, system.sources))
    if theirs != ours:
        raise InputError(f"{args.baseline} and {args.generate_output} translate different "
                         f"sentences (their {kind} lines differ)")
    return out.hypotheses


def _given_or_lines(path, texts: Optional[List[str]], kind: str, name) -> tuple:
    """One side of fairseq output ``name``: the file ``path`` where given (its ``kind``-
    lines, ``texts``, are then not scored: a note says so), else ``texts``; and the
    notes."""
    if path is None:
        return texts, []
    note = [f"{path} is read in place of the {kind}- lines of {name}"] if texts else []
    return read_lines(path, nonempty=True), note


def _unknown_words(references: List[str], name) -> List[str]:
    """A warning where fairseq's T- lines hold ``<<unk>>``, with what to do about it."""
    warning = unknown_words(references, name)
    return [f"{warning}; to score against the real text, add --ref FILE (docs/scoring.md)"
            ] if warning else []


def load_inputs(args) -> Inputs:
    """The inputs, checked before anything is scored; InputError naming what is wrong."""
    system = None
    if args.generate_output:
        if args.hyp:
            raise InputError("give --hyp or --generate-output, not both")
        system, name = _generate_output(args.generate_output, args), args.generate_output
        hyps = system.hypotheses
        refs, ref_notes = _given_or_lines(args.ref, system.references, "T", name)
        srcs, src_notes = _given_or_lines(args.src, system.sources, "S", name)
        warnings = ref_notes + src_notes + ([] if args.ref else _unknown_words(refs, name))
        named = {str(name): hyps}
        named.update((str(path), lines) for path, lines in ((args.ref, refs), (args.src, srcs))
                     if path)
    else:
        if not (args.hyp and args.ref):
            raise InputError("give --hyp and --ref, or --generate-output")
        hyps, refs = _hypotheses(args.hyp), read_lines(args.ref, nonempty=True)
        srcs = read_lines(args.src, nonempty=True) if args.src else None
        named, warnings = {str(args.hyp): hyps, str(args.ref): refs}, []
        if srcs is not None:
            named[str(args.src)] = srcs
    baseline = _baseline(args, system)
    if baseline is not None:
        named[str(args.baseline)] = baseline
    counts = {name: len(lines) for name, lines in named.items()}
    if len(set(counts.values())) > 1:
        raise InputError("line counts differ: "
                         + ", ".join(f"{name} has {n}" for name, n in counts.items()))
    needing = [name for name in args.metrics if METRICS[name].needs_sources]
    if needing and srcs is None:
        raise InputError(f"{needing[0]} needs the sources (--src, or S lines)")
    if args.aligner and not (args.aligner / MANIFEST).is_file():
        raise InputError(f"{args.aligner}: not an aligner model (sparse-attn-align train --out)")
    def clean(lines):
        return None if lines is None else [remove_bpe(line, args.remove_bpe) for line in lines]

    return Inputs(clean(hyps), clean(refs), clean(srcs), clean(baseline), warnings)


def _option(flag: str) -> str:
    """The attribute argparse stores ``flag`` under."""
    return flag.lstrip("-").replace("-", "_")


def scorer_of(args) -> Scorer:
    """The scorer of ``--metrics``: the aligner ``--aligner`` names (loaded when first
    needed), each metric's options from its own flags, BLEU's from ``--tokenize`` and
    ``--lowercase``."""
    aligner = args.aligner
    options = {metric.key: {option: getattr(args, _option(flag))
                            for flag, option, _ in metric.arguments}
               for metric in METRICS.values()}
    setting = Setting(aligner=(lambda: Aligner.load(aligner)) if aligner else None,
                      options=options)
    return Scorer(args.metrics, setting,
                  {"tokenize": args.tokenize, "lowercase": args.lowercase})


def score(args, inputs: Inputs, scorer: Scorer):
    """{metric: {"score": float, ...}} and per-sentence columns; BLEU's entry holds the
    paired bootstrap against the baseline where there is one."""
    hyps, refs = inputs.hypotheses, inputs.references
    with scorer:
        result = scorer.score(hyps, refs, inputs.sources)
    scores = result.entries()
    if "bleu" in scores and inputs.baseline is not None:
        scores["bleu"]["paired_bootstrap"] = paired_bootstrap(
            hyps, inputs.baseline, refs, args.resamples, **scorer.bleu_options).record()
    return scores, result.sentences()


def _detail(entry: dict) -> str:
    """What the table says beside a metric's score: its signature or its settings."""
    if "signature" in entry:
        return entry["signature"]
    if "language" in entry:
        return f"lang {entry['language']}"
    if "symmetrize" in entry:
        return f"symmetrize {entry['symmetrize']}"
    if "reference_tokens" in entry:
        return f"{entry['reference_tokens']} ref tokens"
    return ""


def table(scores) -> str:
    names = {metric.key: name for name, metric in METRICS.items()}
    rows = [f"{'metric':<8} {'score':>8}  details"]
    for key, entry in scores.items():
        rows.append(f"{names[key]:<8} {entry['score']:>8.2f}  {_detail(entry)}".rstrip())
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
    p.add_argument("--ref", type=Path,
                   help="references, one per line (with --generate-output: read in place "
                        "of its T- lines, which fairseq-interactive lacks)")
    p.add_argument("--src", type=Path, help="sources, one per line (checked for line count; "
                                            "with --generate-output: in place of its S- lines)")
    p.add_argument("--generate-output", type=Path,
                   help="fairseq-generate output (S/T/H lines, every sentence id from 0)")
    p.add_argument("--partial", action="store_true",
                   help="score a --generate-output that lacks fairseq-generate's closing lines "
                        "('Translated N sentences', 'Generate ... with beam='), as a file cut "
                        "on purpose; refused otherwise")
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
    p.add_argument("--tokenize", default="none", choices=TOKENIZERS, metavar="TOKENIZER",
                   help="sacrebleu tokenizer: none (tokenised text, as the papers), 13a "
                        f"(detokenised text), or one of {', '.join(TOKENIZERS)}")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU and chrF")
    p.add_argument("--remove-bpe", nargs="?", const="subword_nmt", default=None,
                   metavar="SCHEME", help="undo BPE first: subword_nmt (default) or sentencepiece")
    p.add_argument("--aligner", type=Path,
                   help="a word aligner (sparse-attn-align train), for the metrics that "
                        "read one")
    for metric in METRICS.values():
        for flag, _, keywords in metric.arguments:
            p.add_argument(flag, **keywords)
    p.add_argument("--json", type=Path,
                   help="write the scores as JSON (- for stdout, the table going to stderr)")
    p.add_argument("--per-sentence", type=Path,
                   help="write the per-sentence scores ("
                        + ", ".join(name for name, metric in METRICS.items() if metric.sentences)
                        + ") as TSV. Outputs go in folders that exist, never over an input, "
                        "and are written all or none")
    return p


def _to_stdout(path) -> bool:
    return str(path) == "-"


def check_output_paths(args) -> None:
    """Refuse outputs that cannot be written or would overwrite an input, before any
    work (:func:`check_outputs`)."""
    check_outputs({"--json": None if _to_stdout(args.json) else args.json,
                   "--per-sentence": args.per_sentence},
                  {"--hyp": args.hyp, "--ref": args.ref, "--src": args.src,
                   "--generate-output": args.generate_output, "--baseline": args.baseline})


def per_sentence_table(per_sentence, count: int) -> str:
    """The per-sentence scores as TSV: a header, then one row per sentence id."""
    columns = list(per_sentence)
    rows = ["id\t" + "\t".join(columns)]
    rows += [f"{i}\t" + "\t".join(str(per_sentence[c][i]) for c in columns)
             for i in range(count)]
    return "\n".join(rows) + "\n"


def run(argv=None) -> dict:
    """The command without its exit status: check the outputs, read, score, write the
    files asked for (all or none), print the table (on stderr where the JSON goes to
    stdout); the scores (``{metric: {"score": float, ...}}``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.resamples < 1:
        parser.fail(f"--resamples must be positive, not {args.resamples}")
    try:
        check_output_paths(args)
        inputs = load_inputs(args)
        scorer = scorer_of(args)
        problem = scorer.check()
        if problem:
            raise InputError(problem)
        for warning in inputs.warnings:
            print(f"{parser.prog}: warning: {warning}", file=sys.stderr)
        scores, per_sentence = score(args, inputs, scorer)
        text = json.dumps(scores, indent=2) + "\n"
        files = {}
        if args.json and not _to_stdout(args.json):
            files[args.json] = text
        if args.per_sentence:
            files[args.per_sentence] = per_sentence_table(per_sentence, len(inputs.hypotheses))
        write_texts_atomic(files)
    except (ValueError, RuntimeError, OSError) as err:  # InputError, OutputError too
        parser.fail(err)
    json_to_stdout = args.json and _to_stdout(args.json)
    print(table(scores), file=sys.stderr if json_to_stdout else sys.stdout)
    if json_to_stdout:
        sys.stdout.write(text)
    return scores


def main(argv=None) -> int:
    """``sparse-attn-score``: exit status 0 once the scores are printed and written."""
    run(argv)
    return 0


if __name__ == "__main__":
    main()
