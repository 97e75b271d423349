"""Your own parallel text through the corpus recipes' pipeline (:mod:`sparse_attn_data.recipe`):
plain UTF-8 files ``PREFIX.SRC`` and ``PREFIX.TGT``, one sentence a line, prepared into
``DEST/NAME`` for fairseq with the preprocessing chosen on the command line; docs/corpora.md,
"Your own parallel text".

    python -m sparse_attn_data.parallel --src SRC --tgt TGT --train PREFIX --valid PREFIX
        --test PREFIX [--test PREFIX2 ...] --name NAME
        [--no-tokenize] [--moses 2019|2017] [--lowercase] [--normalize-punctuation]
        [--aggressive-dashes] [--clean MIN MAX RATIO] [the recipes' options: --subwords,
        --bpe-merges, --sink, --fertility, --joined-dictionary, --workers, ...]
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

import argparse
import dataclasses
import os
from pathlib import Path
from typing import List, Optional, Tuple

from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.reading import InputError, read_lines

from . import text
from .download import checksum_of
from .recipe import Parts, Recipe, build_parser, parse, run
from .steps import PrepError

PROG = "python -m sparse_attn_data.parallel"
#: The defaults of what the command line does not decide.
DEFAULTS = Recipe(name="", title="your parallel text", src="", tgt="", sources=(),
                  read=None, merges=10000, clean=None)


def read_pair(prefix: str, src: str, tgt: str) -> Tuple[List[str], List[str]]:
    """The lines of ``PREFIX.SRC`` and ``PREFIX.TGT``; InputError naming the file when
    one is missing, unreadable or empty, PrepError naming both when their line counts differ."""
    paths = [Path(f"{prefix}.{lang}") for lang in (src, tgt)]
    sides = [read_lines(path, nonempty=True) for path in paths]
    if len(sides[0]) != len(sides[1]):
        raise PrepError(f"{paths[0]} has {len(sides[0])} lines but {paths[1]} has "
                        f"{len(sides[1])}")
    return sides[0], sides[1]


def recipe_of(args) -> Recipe:
    """The recipe the parsed command line describes; its ``read`` reads the prefixes'
    files (:func:`read_pair`) into the splits train, valid, test, test1, ..."""
    test_names = tuple(os.path.basename(prefix) for prefix in args.test)
    splits = dataclasses.replace(DEFAULTS, test_names=test_names).splits
    prefixes = dict(zip(splits, [args.train, args.valid, *args.test]))

    def read(archives, folder) -> Parts:
        return {split: read_pair(prefix, args.src, args.tgt)
                for split, prefix in prefixes.items()}

    settings = {"src": args.src, "tgt": args.tgt, "train": args.train, "valid": args.valid,
                "test": args.test, "tokenize": args.tokenize, "moses": args.moses,
                "lowercase": args.lowercase,
                "normalize_punctuation": args.normalize_punctuation,
                "aggressive_dashes": args.aggressive_dashes,
                "clean": list(args.clean) if args.clean else None}  # as JSON gives it back
    return dataclasses.replace(
        DEFAULTS, name=args.name, title=f"{args.src}-{args.tgt} parallel text",
        src=args.src, tgt=args.tgt, read=read, parts=splits, test_names=test_names,
        tokenize=args.tokenize, moses=args.moses, lowercase=args.lowercase,
        normalize_punctuation=args.normalize_punctuation,
        aggressive_dashes=args.aggressive_dashes, clean=args.clean, settings=settings)


def clean_limits(values: Optional[List[float]]) -> Optional[Tuple[int, int, float]]:
    """``--clean MIN MAX RATIO`` as :func:`sparse_attn_data.text.clean_pairs` takes it; ValueError
    for limits it cannot mean."""
    if values is None:
        return None
    low, high, ratio = values
    if not (low.is_integer() and high.is_integer() and 0 <= low <= high and ratio > 0):
        raise ValueError(f"--clean {low:g} {high:g} {ratio:g}: MIN and MAX must be whole "
                         "numbers with 0 <= MIN <= MAX, and RATIO positive")
    return int(low), int(high), ratio


def build_command(prog: str = PROG) -> CommandParser:
    """The recipes' options (:func:`sparse_attn_data.recipe.build_parser`) and the text's own."""
    p = build_parser(DEFAULTS, prog=prog, description=(
        "Prepare your own parallel text (PREFIX.SRC / PREFIX.TGT files) for fairseq the way "
        "the corpus recipes do: normalise, tokenise, clean, subwords, binarise."))
    files = p.add_argument_group("the text")
    files.add_argument("--src", required=True, help="source language (file suffix, Moses "
                                                    "language code)")
    files.add_argument("--tgt", required=True, help="target language")
    files.add_argument("--train", required=True, metavar="PREFIX",
                       help="training text: PREFIX.SRC and PREFIX.TGT")
    files.add_argument("--valid", required=True, metavar="PREFIX", help="validation text")
    files.add_argument("--test", required=True, metavar="PREFIX", action="append",
                       help="test text; repeat it for further test sets (test1, test2, ...)")
    steps = p.add_argument_group("preprocessing")
    steps.add_argument("--tokenize", action=argparse.BooleanOptionalAction, default=True,
                       help="Moses tokenisation (default); --no-tokenize for text tokenised "
                            "already")
    steps.add_argument("--moses", choices=text.MOSES_VERSIONS, default="2019",
                       help="the version of Moses' scripts to reproduce (default 2019)")
    steps.add_argument("--lowercase", action="store_true", help="lowercase every split")
    steps.add_argument("--normalize-punctuation", action="store_true",
                       help="Moses punctuation normalisation before tokenising")
    steps.add_argument("--aggressive-dashes", action="store_true",
                       help="split hyphens inside words (tokenizer.perl -a: @-@)")
    steps.add_argument("--clean", nargs=3, type=float, metavar=("MIN", "MAX", "RATIO"),
                       help="drop training pairs with a side under MIN or over MAX tokens or "
                            "more than RATIO times the other side's (e.g. 1 175 1.5; "
                            "default: keep every pair)")
    return p


def main(argv=None) -> Path:
    """Check the command line and read every file before anything is written, then
    prepare (:func:`sparse_attn_data.recipe.run`)."""
    parser = build_command()
    args = parse(parser, argv)
    if args.src == args.tgt:
        parser.error(f"--src and --tgt are both {args.src!r}")
    try:
        args.clean = clean_limits(args.clean)
    except ValueError as err:
        parser.error(str(err))
    recipe = recipe_of(args)
    try:
        parts = recipe.read({}, None)
    except (InputError, PrepError) as err:
        parser.fail(err)
    inputs = {f"{prefix}.{lang}": checksum_of(Path(f"{prefix}.{lang}"))
              for prefix in (args.train, args.valid, *args.test) for lang in (args.src, args.tgt)}
    return run(dataclasses.replace(recipe, read=lambda archives, folder: parts, inputs=inputs),
               args, parser)


if __name__ == "__main__":
    main()
