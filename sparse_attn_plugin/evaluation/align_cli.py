"""``sparse-attn-align``: train the fast_align word aligner, align files, write fertilities.

    sparse-attn-align train --src train.de --tgt train.en --out aligner/ [--sink]
    sparse-attn-align align --model aligner/ --src test.de --tgt test.en --out test.align
    sparse-attn-align fertility --model aligner/ --src train.de --tgt train.en \\
        --out-fert train.fert --out-guided guided.tsv [--slack 0]

Files hold one whitespace-tokenised sentence per line; ``align`` writes Pharaoh ``i-j``
lines, ``fertility`` one count per source token and the GUIDED table. The formats, the sink
and the checks: docs/scoring.md, "The word aligner".
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

from ..command_line import CommandParser
from ..files import atomic_outputs, check_outputs, write_text_atomic
from ..reading import InputError, read_lines
from .aligner import (
    ALIGN_SYMMETRIZATION,
    FERTILITY_SYMMETRIZATION,
    SYMMETRIZATIONS,
    Aligner,
    AlignerError,
    check_model_destination,
    format_pharaoh,
    train_aligner,
)
from .drop import DROP_SYMMETRIZATION
from .fertilities import aligner_fertilities, fertility_text, guided_fertilities, guided_text

PROG = "sparse-attn-align"


def read_parallel(src_path, tgt_path):
    """Lines of two files that must have as many lines as each other."""
    src, tgt = read_lines(src_path, nonempty=True), read_lines(tgt_path, nonempty=True)
    if len(src) != len(tgt):
        raise InputError(f"line counts differ: {src_path} has {len(src)} lines, "
                         f"{tgt_path} has {len(tgt)}")
    return src, tgt


def cmd_train(args):
    check_model_destination(args.out)
    src, tgt = read_parallel(args.src, args.tgt)
    start = time.time()
    aligner = train_aligner(src, tgt, iterations=args.iterations, sink=args.sink,
                            progress=not args.quiet)
    aligner.save(args.out)
    m = aligner.manifest
    print(f"aligner trained on {m['pairs']} pairs ({m['iterations']} iterations per direction"
          f"{', with ' + m['sink_token'] if m['sink'] else ''}) in {time.time() - start:.1f}s; "
          f"vocabulary {m['src_vocab_size']} source / {m['tgt_vocab_size']} target; "
          f"saved to {args.out}", file=sys.stderr)


def cmd_align(args):
    check_outputs({"--out": args.out}, {"--src": args.src, "--tgt": args.tgt})
    src, tgt = read_parallel(args.src, args.tgt)
    links = Aligner.load(args.model).align_batch(src, tgt, args.symmetrize)
    write_text_atomic(args.out, "".join(format_pharaoh(lk) + "\n" for lk in links))
    print(f"{len(links)} alignments ({args.symmetrize}) written to {args.out}",
          file=sys.stderr)


def cmd_fertility(args):
    if args.slack < 0:
        raise InputError(f"--slack must be non-negative, not {args.slack}")
    check_outputs({"--out-fert": args.out_fert, "--out-guided": args.out_guided},
                  {"--src": args.src, "--tgt": args.tgt})
    src, tgt = read_parallel(args.src, args.tgt)
    raw = aligner_fertilities(Aligner.load(args.model), src, tgt, args.symmetrize)
    table = guided_fertilities(src, raw)
    with atomic_outputs([args.out_fert, args.out_guided]) as (fert, guided):
        fert.write_text(fertility_text(raw, args.slack), encoding="utf-8")
        guided.write_text(guided_text(table), encoding="utf-8")
    print(f"fertilities of {len(raw)} sentences ({args.symmetrize}, slack {args.slack}) "
          f"written to {args.out_fert}; GUIDED table of {len(table)} types to "
          f"{args.out_guided}", file=sys.stderr)


def build_parser():
    parser = CommandParser(prog=PROG, description=__doc__.replace("``", ""),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train both fast_align directions and save the model")
    p.add_argument("--src", type=Path, required=True, help="source sentences, one per line")
    p.add_argument("--tgt", type=Path, required=True, help="target sentences, one per line")
    p.add_argument("--out", type=Path, required=True, help="model directory to write")
    p.add_argument("--sink", action="store_true",
                   help="append <SINK> to every source sentence (Malaviya et al. 2018)")
    p.add_argument("--iterations", type=int, default=5, help="EM iterations (default 5)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("align", help="write Pharaoh alignments of a parallel text")
    p.add_argument("--model", type=Path, required=True, help="directory written by train")
    p.add_argument("--src", type=Path, required=True)
    p.add_argument("--tgt", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="Pharaoh file to write")
    p.add_argument("--symmetrize", choices=SYMMETRIZATIONS, default=ALIGN_SYMMETRIZATION,
                   help=f"default {ALIGN_SYMMETRIZATION} (Koehn et al. 2003); DROP counts "
                        f"{DROP_SYMMETRIZATION} links by default: --symmetrize "
                        f"{DROP_SYMMETRIZATION} shows those")
    p.set_defaults(func=cmd_align)

    p = sub.add_parser("fertility", help="write per-token fertilities and the GUIDED table")
    p.add_argument("--model", type=Path, required=True, help="directory written by train")
    p.add_argument("--src", type=Path, required=True)
    p.add_argument("--tgt", type=Path, required=True)
    p.add_argument("--out-fert", type=Path, required=True,
                   help="one line per sentence, one int per source token")
    p.add_argument("--out-guided", type=Path, required=True,
                   help="word<TAB>fertility per source word type")
    p.add_argument("--slack", type=int, default=0,
                   help="added to every per-token fertility (default 0)")
    p.add_argument("--symmetrize", choices=SYMMETRIZATIONS, default=FERTILITY_SYMMETRIZATION,
                   help=f"default {FERTILITY_SYMMETRIZATION}: one link per target word")
    p.set_defaults(func=cmd_fertility)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "iterations", 1) < 1:
        parser.fail(f"--iterations must be at least 1, not {args.iterations}")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = _show_warning
        try:
            args.func(args)
        except (InputError, AlignerError, ValueError, OSError) as err:
            parser.fail(err)
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"{PROG}: warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    main()
