"""Tokenise text the way a corpus was prepared, so that a system's detokenised output can
be scored against the corpus's tokenised references.

    python -m sparse_attn_data.tokenize --like iwslt14_de_en --lang en hyp.detok.en hyp.tok.en
    python -m sparse_attn_data.tokenize --like data-bin/mine < hyp.txt > hyp.tok

``--like`` is a recipe's name or a folder a recipe prepared; the steps are the recipe's own
(:func:`sparse_attn_data.recipe.normalize`), without cleaning or subwords. IN and OUT
default to ``-``; OUT is written all or nothing. docs/scoring.md, "Scoring your own output".
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

import argparse
import dataclasses
import importlib
import json
import pkgutil
import sys
from pathlib import Path
from typing import Dict, List

from sparse_attn_plugin.command_line import CommandParser
from sparse_attn_plugin.files import write_lines
from sparse_attn_plugin.reading import InputError, decode_lines, read_lines

from . import recipe as recipes
from .recipe import Recipe

PROG = "python -m sparse_attn_data.tokenize"


def corpus_recipes() -> Dict[str, Recipe]:
    """Every corpus recipe of this package by name (the modules with a ``RECIPE``)."""
    import sparse_attn_data

    found = {}
    for info in pkgutil.iter_modules(sparse_attn_data.__path__):
        if info.name == Path(__file__).stem:
            continue
        recipe = getattr(importlib.import_module(f"sparse_attn_data.{info.name}"), "RECIPE",
                         None)
        if isinstance(recipe, Recipe):
            found[recipe.name] = recipe
    return found


def prepared_recipe(folder: Path) -> Recipe:
    """The recipe ``folder/PREPARED.json`` says prepared ``folder``: a corpus recipe by
    name, or the recipe ``python -m sparse_attn_data.parallel`` built from its command line
    (its settings as recorded, a setting it did not record at its default)."""
    from . import parallel

    path = folder / "PREPARED.json"
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))["settings"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(f"{path}: not a prepared corpus's record ({err})") from None
    if "tokenize" not in settings:  # a corpus recipe records its name and no text settings
        known = corpus_recipes()
        if settings.get("corpus") not in known:
            raise InputError(f"{path}: prepared by an unknown recipe "
                             f"{settings.get('corpus')!r}")
        return known[settings["corpus"]]
    parser = parallel.build_command()
    options = {action.dest: parser.get_default(action.dest) for action in parser._actions}
    options.update(settings, name=settings.get("corpus", folder.name))
    return dataclasses.replace(parallel.recipe_of(argparse.Namespace(**options)),
                               name=str(folder))


def recipe_like(like: str) -> Recipe:
    """The recipe ``--like`` names: a corpus recipe, or a prepared folder's."""
    known = corpus_recipes()
    if like in known:
        return known[like]
    if (Path(like) / "PREPARED.json").is_file():
        return prepared_recipe(Path(like))
    raise InputError(f"--like {like}: neither a corpus recipe ({', '.join(sorted(known))}) "
                     f"nor a prepared folder (no {Path(like) / 'PREPARED.json'})")


def tokenize_like(recipe: Recipe, lines: List[str], lang: str, workers: int = 1) -> List[str]:
    """``lines`` through the ``lang`` side of ``recipe``'s text stage; ValueError where the
    recipe does not tokenise or ``lang`` is not one of its languages."""
    if lang not in (recipe.src, recipe.tgt):
        raise ValueError(f"--lang {lang}: the languages of {recipe.name} are {recipe.src} "
                         f"and {recipe.tgt}")
    if not recipe.tokenize:
        raise ValueError(f"{recipe.name} tokenises nothing ({recipe.title} is used as it was "
                         "published, tokenised already): there is no tokenisation of it to "
                         "repeat")
    return recipes.normalize(recipe, lines, lang, workers)


def build_parser() -> CommandParser:
    p = CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--like", required=True, metavar="CORPUS",
                   help="a corpus recipe's name (e.g. iwslt14_de_en) or a prepared folder "
                        "(DEST/NAME with PREPARED.json)")
    p.add_argument("--lang", help="which side's steps: one of the corpus's languages "
                                  "(default its target language)")
    p.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    p.add_argument("input", nargs="?", default="-", metavar="IN",
                   help="text to tokenise, one sentence a line (default -: standard input)")
    p.add_argument("output", nargs="?", default="-", metavar="OUT",
                   help="where the tokenised lines go (default -: standard output)")
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.fail(f"--workers must be at least 1, not {args.workers}")
    try:
        recipe = recipe_like(args.like)
        lang = args.lang or recipe.tgt
        lines = (decode_lines(sys.stdin.buffer.read(), "<stdin>", nonempty=True)
                 if args.input == "-" else read_lines(args.input, nonempty=True))
        tokenized = tokenize_like(recipe, lines, lang, args.workers)
        if args.output == "-":
            sys.stdout.writelines(line + "\n" for line in tokenized)
        else:
            write_lines(args.output, tokenized)
    except (InputError, ValueError, OSError) as err:
        parser.fail(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
