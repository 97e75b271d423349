"""The preparation pipeline every corpus shares, and its command line.

A :class:`Recipe` says what is particular to a corpus (its archives, how to read them, its
published preprocessing); :func:`prepare` runs the stages ``orig/``, ``raw/``, ``tok/``,
``subword/`` and ``DEST/NAME``, each skipped when its outputs exist
(:mod:`sparse_attn_data.steps`); docs/corpora.md, "What a recipe does, stage by stage".
"""

import dataclasses
import json
import logging
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from sparse_attn_plugin.command_line import CommandParser, show_progress
from sparse_attn_plugin.errors import SparseAttnError
from sparse_attn_plugin.evaluation.aligner import SINK, train_aligner
from sparse_attn_plugin.evaluation.fertilities import (
    aligner_fertilities,
    fertility_text,
    guided_fertilities,
    guided_text,
)
from sparse_attn_plugin.files import (
    atomic_outputs,
    atomic_path,
    remove_leftovers,
    remove_leftovers_of,
    write_lines,
    write_text_atomic,
)
from sparse_attn_plugin.reading import read_lines

from . import subwords, text
from .binarize import fairseq_preprocess
from .download import RAW_DIR_ENV, Source, fetch, raw_dir_from
from .steps import PrepError, run_step

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
#: The corpus as text: ``{part: (source lines, target lines)}``.
Parts = Dict[str, Tuple[List[str], List[str]]]


@dataclass(frozen=True)
class Option:
    """A choice particular to one corpus: the flag ``--NAME`` (underscores as dashes),
    passed to its :attr:`Recipe.read` as the keyword argument ``NAME``. The first of
    ``choices`` is the default; ``expected`` gives a choice's own sentence counts (over
    :attr:`Recipe.expected`)."""

    name: str
    choices: Tuple[str, ...]
    help: str
    expected: Dict[str, Dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    """What is particular to one corpus; each field's comment says what it holds."""

    name: str  #: the default ``data-bin`` folder name
    title: str  #: the corpus, for messages
    src: str  #: language code (file suffix, sacremoses language)
    tgt: str
    sources: Tuple[Source, ...]  #: the archives to fetch
    #: ``read(archives, folder, **options) -> parts``: the text of each of :attr:`parts`
    #: from the fetched archives (``{filename: path}``), extracting into ``folder``,
    #: with the value chosen for each of :attr:`options` as a keyword.
    read: Callable[[Dict[str, Path], Path], Parts]
    merges: int  #: default BPE merges (or sentencepiece vocabulary size)
    subwords: str = "subword_nmt"  #: default scheme of :data:`subwords.SCHEMES`
    joined_dictionary: bool = False  #: one dictionary for both languages
    parts: Tuple[str, ...] = SPLITS  #: the names ``read`` returns, in order
    #: the corpus's names of its test sets when it has several: the first is binarised as
    #: ``test``, the others as ``test1``, ``test2``, ...; recorded in ``PREPARED.json``.
    test_names: Tuple[str, ...] = ()
    tokenize: bool = True  #: Moses-tokenise (False for corpora published tokenised)
    moses: str = "2019"  #: the version of Moses' scripts (:data:`text.MOSES_VERSIONS`)
    lowercase: bool = False  #: lowercase every split
    lowercase_first: bool = False  #: first (Multi30k's script), not last
    normalize_punctuation: bool = False  #: Moses punctuation normalisation first
    #: Moses ``remove-non-printing-char.perl`` after that; off where the published recipe
    #: leaves the characters to the tokeniser (IWSLT14's keeps U+200C as a token).
    remove_non_printing: bool = True
    aggressive_dashes: bool = False  #: split hyphens in words (``tokenizer.perl -a``)
    clean: Optional[Tuple[int, int, float]] = (1, 175, 1.5)  #: training pairs' (min, max, ratio)
    #: ``{lang: fn(lines) -> lines}`` applied before tokenising
    preprocess: Dict[str, Callable[[List[str]], List[str]]] = field(default_factory=dict)
    #: ``split(parts) -> {train, valid, test}`` after cleaning; None: the parts are splits
    split: Optional[Callable[[Parts], Parts]] = None
    expected: Dict[str, int] = field(default_factory=dict)  #: pairs per published split
    options: Tuple[Option, ...] = ()  #: the corpus's own command-line choices
    #: what else decides the prepared data, recorded in ``PREPARED.json`` (a recipe built
    #: from the command line, as :mod:`sparse_attn_data.parallel` builds one, records its
    #: inputs and preprocessing there)
    settings: Dict[str, object] = field(default_factory=dict)
    #: ``{path: SHA-256}`` of the files read where they are (not downloaded archives, which
    #: :attr:`sources` checksum), so that a re-run on changed files is refused
    inputs: Dict[str, str] = field(default_factory=dict)

    @property
    def splits(self) -> Tuple[str, ...]:
        """The binarised splits: train, valid, test and the further test sets."""
        return ("train", "valid", "test",
                *(f"test{k}" for k in range(1, len(self.test_names))))


# -- text files of a stage ----------------------------------------------------------------------
def stage_files(folder: Path, names: Sequence[str], recipe: Recipe) -> List[Path]:
    """``folder/{name}.{src}`` and ``folder/{name}.{tgt}`` for each name, in that order."""
    return [Path(folder) / f"{name}.{lang}" for name in names
            for lang in (recipe.src, recipe.tgt)]


def write_parts(parts: Parts, names: Sequence[str], paths: List[Path]) -> None:
    """Write ``parts[name]`` for each of ``names`` to ``paths`` (as :func:`stage_files`
    orders them); a missing part, an empty one or unequal sides raise PrepError."""
    for k, name in enumerate(names):
        if name not in parts:
            raise PrepError(f"the corpus reader returned no {name!r} part")
        src, tgt = parts[name]
        if len(src) != len(tgt):
            raise PrepError(f"{name}: {len(src)} source lines but {len(tgt)} target lines")
        if not src:
            raise PrepError(f"{name}: no sentences")
        write_lines(paths[2 * k], src)
        write_lines(paths[2 * k + 1], tgt)


def read_parts(folder: Path, names: Sequence[str], recipe: Recipe) -> Parts:
    return {name: (read_lines(Path(folder) / f"{name}.{recipe.src}"),
                   read_lines(Path(folder) / f"{name}.{recipe.tgt}")) for name in names}


# -- the stages ---------------------------------------------------------------------------------
def normalize(recipe: Recipe, lines: List[str], lang: str, workers: int = 1) -> List[str]:
    """One side through the published pipeline, in its order: Moses punctuation
    normalisation, non-printing characters removed, the corpus's own transforms, Moses
    tokenisation, lowercasing (first instead with :attr:`Recipe.lowercase_first`; each as
    the Perl scripts do it, :mod:`sparse_attn_data.text`)."""
    if recipe.lowercase_first:
        lines = text.lowercase(lines)
    if recipe.normalize_punctuation:
        lines = text.normalize_punctuation(lines, lang, recipe.moses, workers)
    if recipe.remove_non_printing:
        lines = text.remove_non_printing(lines)
    if lang in recipe.preprocess:
        lines = recipe.preprocess[lang](lines)
    if recipe.tokenize:
        lines = text.moses_tokenize(lines, lang, aggressive_dashes=recipe.aggressive_dashes,
                                    workers=workers, moses=recipe.moses)
    return text.lowercase(lines) if recipe.lowercase and not recipe.lowercase_first else lines


def tokenized_splits(recipe: Recipe, raw: Path, workers: int = 1) -> Parts:
    """Stage 3: normalised, tokenised parts, the training part cleaned, then split."""
    parts = {}
    for name, (src, tgt) in read_parts(raw, recipe.parts, recipe).items():
        src = normalize(recipe, src, recipe.src, workers)
        tgt = normalize(recipe, tgt, recipe.tgt, workers)
        if name == "train" and recipe.clean is not None:
            src, tgt = text.clean_pairs(src, tgt, *recipe.clean)
        parts[name] = (src, tgt)
    return recipe.split(parts) if recipe.split else parts


def segmented_splits(recipe: Recipe, tok: Path, model: Path, scheme: str, sink: bool,
                     workers: int = 1, max_train_subwords: Optional[int] = None) -> Parts:
    """Stage 4: every split in subwords, the training pairs longer than
    ``max_train_subwords`` on either side dropped (before the sink), ``<SINK>`` appended
    to sources with ``sink``."""
    parts = {}
    for name, (src, tgt) in read_parts(tok, recipe.splits, recipe).items():
        src = subwords.apply(scheme, model, src, f"{name}.{recipe.src}", workers)
        tgt = subwords.apply(scheme, model, tgt, f"{name}.{recipe.tgt}", workers)
        if name == "train" and max_train_subwords is not None:
            kept = [(s, t) for s, t in zip(src, tgt)
                    if max(len(s.split()), len(t.split())) <= max_train_subwords]
            src, tgt = [s for s, _ in kept], [t for _, t in kept]
        parts[name] = ([f"{line} {SINK}" for line in src] if sink else src, tgt)
    return parts


def write_fertilities(recipe: Recipe, folder: Path, sink: bool, tmps: List[Path]) -> None:
    """Stage 4b: train the word aligner (:mod:`sparse_attn_plugin.evaluation.aligner`,
    with its own sink) on the training split and write per-token fertilities of train
    and valid (``tmps[0:2]``) and the GUIDED table of the training split (``tmps[2]``).
    With ``sink`` in the data, the sink's own count is the target tokens the aligner
    links to nothing else: ``len(target) - sum(fertilities)``."""
    text = {}
    for split in ("train", "valid"):
        src = read_lines(folder / f"{split}.{recipe.src}")
        text[split] = ([line[: -len(SINK) - 1] for line in src] if sink else src,
                       read_lines(folder / f"{split}.{recipe.tgt}"))
    aligner = train_aligner(*text["train"], sink=True)
    for k, split in enumerate(("train", "valid")):
        sources, targets = text[split]
        counts = aligner_fertilities(aligner, sources, targets)
        if sink:
            counts = [c + [max(0, len(t.split()) - sum(c))] for c, t in zip(counts, targets)]
        write_text_atomic(tmps[k], fertility_text(counts))
        if split == "train":  # the table of the words, without the data's sink
            write_text_atomic(tmps[2], guided_text(guided_fertilities(
                sources, [c[:len(s.split())] for c, s in zip(counts, sources)])))


def binarize(recipe: Recipe, args, sub: Path, dest: Path, settings: dict) -> None:
    """Stage 5: ``DEST/NAME`` built under a temporary name, renamed when complete."""
    remove_leftovers_of(dest)
    with atomic_path(dest) as building:
        fairseq_preprocess(sub, recipe.src, recipe.tgt, building, recipe.splits,
                           joined=args.joined_dictionary, workers=args.workers)
        model = subwords.MODEL_FILE[args.subwords]
        shutil.copyfile(sub / model, building / model)
        if args.fertility:
            for split in ("train", "valid"):
                shutil.copyfile(sub / f"{split}.fert",
                                building / f"{split}.{recipe.src}-{recipe.tgt}.fert")
            shutil.copyfile(sub / "guided.tsv", building / "guided.tsv")
        counts = {split: len(read_lines(sub / f"{split}.{recipe.src}"))
                  for split in recipe.splits}
        prepared = {"settings": settings, "sentences": counts,
                    "expected": expected_of(recipe, args), "argv": args.argv}
        if recipe.inputs:
            prepared["inputs"] = recipe.inputs
        if recipe.test_names:
            prepared["test_sets"] = dict(zip(recipe.splits[2:], recipe.test_names))
        (building / "PREPARED.json").write_text(json.dumps(prepared, indent=1) + "\n")


# -- the pipeline -------------------------------------------------------------------------------
def chosen_options(recipe: Recipe, args) -> Dict[str, str]:
    """The value given for each of the recipe's :attr:`Recipe.options`."""
    return {option.name: getattr(args, option.name) for option in recipe.options}


def settings_of(recipe: Recipe, args) -> dict:
    """What decides the prepared data (compared with ``PREPARED.json`` on a re-run).
    Options at their defaults and no ``--max-train-subwords`` are left out, so that a
    folder prepared before they existed still counts as prepared."""
    defaults = {option.name: option.choices[0] for option in recipe.options}
    changed = {name: value for name, value in chosen_options(recipe, args).items()
               if value != defaults[name]}
    if args.max_train_subwords is not None:
        changed["max_train_subwords"] = args.max_train_subwords
    return {"corpus": recipe.name, "subwords": args.subwords, "size": args.size,
            "joined_dictionary": args.joined_dictionary, "sink": args.sink,
            "fertility": args.fertility, **recipe.settings, **changed}


def expected_of(recipe: Recipe, args) -> Dict[str, int]:
    """The published sentence counts of the splits with the chosen options."""
    expected = dict(recipe.expected)
    for option in recipe.options:
        expected.update(option.expected.get(getattr(args, option.name), {}))
    return expected


def prepare(recipe: Recipe, args) -> Path:
    """Run the pipeline with the parsed command-line ``args``; return ``DEST/NAME``."""
    dest, work = Path(args.dest_dir) / args.name, Path(args.work_dir) / args.name
    settings = settings_of(recipe, args)
    if (dest / "PREPARED.json").exists():
        prepared = json.loads((dest / "PREPARED.json").read_text())
        if prepared.get("settings") != settings:
            raise PrepError(f"{dest} was prepared with other settings "
                            f"({_difference(prepared.get('settings', {}), settings)}); "
                            "choose another --name or delete it")
        changed = _changed_inputs(prepared.get("inputs", recipe.inputs), recipe.inputs)
        if changed:
            raise PrepError(f"{dest} was prepared from other contents of {changed}; "
                            "choose another --name or delete it")
        if args.keep_intermediates:
            rebuild_intermediates(recipe, args, dest, work, settings, prepared["sentences"])
        else:
            logger.info(f"{dest} is prepared already: nothing to do")
        return dest
    if dest.exists():
        raise PrepError(f"{dest} exists but holds no PREPARED.json: delete it or choose "
                        "another --name")
    started = time.time()
    seconds: Dict[str, float] = {}

    def learn(tok, out):
        subwords.learn(args.subwords, read_parts(tok, ["train"], recipe)["train"], args.size,
                       out)

    archives, (raw, tok, sub) = text_stages(recipe, args, work, settings, seconds,
                                            f"learn {args.subwords} ({args.size})", learn)
    if args.fertility:
        step = timed_step(seconds)
        step("aligner fertilities", [sub / "train.fert", sub / "valid.fert", sub / "guided.tsv"],
             lambda tmps: write_fertilities(recipe, sub, args.sink, tmps))
    disk = {"archives": _size(*archives.values()), "intermediates": _size(raw, tok, sub)}
    begun = time.time()
    binarize(recipe, args, sub, dest, settings)
    seconds["binarise"] = round(time.time() - begun, 1)
    disk["data-bin"] = _size(dest)
    _update_json(dest / "PREPARED.json", seconds=seconds, bytes=disk)
    if not args.keep_intermediates:
        for folder in (raw, tok, sub):
            shutil.rmtree(folder, ignore_errors=True)
    counts = json.loads((dest / "PREPARED.json").read_text())["sentences"]
    expected = expected_of(recipe, args)
    made = [f"{split} {n} pairs" + (f" (published recipe: {expected[split]})"
                                    if split in expected else "")
            for split, n in counts.items()]
    logger.info(f"wrote {dest} in {time.time() - started:.0f} s: " + ", ".join(made))
    return dest


def timed_step(seconds: Dict[str, float]):
    """:func:`steps.run_step`, the seconds each step takes put in ``seconds`` by its name."""
    def step(name, outputs, make):
        begun = time.time()
        run_step(name, outputs, make)
        seconds[name] = round(time.time() - begun, 1)
    return step


def text_stages(recipe: Recipe, args, work: Path, settings: dict, seconds: Dict[str, float],
                model_step: str, make_model) -> Tuple[Dict[str, Path], Tuple[Path, Path, Path]]:
    """Stages 1-4 under ``work``, each skipped where done (:func:`steps.run_step`) and its
    seconds put in ``seconds``; the subword model made by ``make_model(tok_folder, path)``
    as the step named ``model_step``. The archives (``{filename: path}``) and the ``raw``,
    ``tok`` and ``subword`` folders."""
    step = timed_step(seconds)
    remove_leftovers(work)
    claim_work_folder(work, {"settings": settings, "inputs": recipe.inputs})
    raw_dir = raw_dir_from(args.raw_dir)
    begun = time.time()
    sources = recipe.sources if not args.no_checksums else tuple(
        dataclasses.replace(s, size=None, checksum=None) for s in recipe.sources)
    archives = {s.filename: fetch(s, work / "orig", raw_dir) for s in sources}
    seconds["fetch"] = round(time.time() - begun, 1)
    raw, tok, sub = work / "raw", work / "tok", work / "subword"
    step("raw text", stage_files(raw, recipe.parts, recipe),
         lambda tmps: write_parts(recipe.read(archives, work / "extracted",
                                              **chosen_options(recipe, args)),
                                  recipe.parts, tmps))
    shutil.rmtree(work / "extracted", ignore_errors=True)
    step("normalise, tokenise, clean, split", stage_files(tok, recipe.splits, recipe),
         lambda tmps: write_parts(tokenized_splits(recipe, raw, args.workers), recipe.splits,
                                  tmps))
    model = sub / subwords.MODEL_FILE[args.subwords]
    step(model_step, [model], lambda tmps: make_model(tok, tmps[0]))
    step("apply subwords", stage_files(sub, recipe.splits, recipe),
         lambda tmps: write_parts(segmented_splits(recipe, tok, model, args.subwords, args.sink,
                                                   args.workers, args.max_train_subwords),
                                  recipe.splits, tmps))
    return archives, (raw, tok, sub)


def rebuild_intermediates(recipe: Recipe, args, dest: Path, work: Path, settings: dict,
                          sentences: Dict[str, int]) -> None:
    """``--keep-intermediates`` on the finished ``dest``: stages 1-4 under ``work`` again,
    where their files are missing, with ``dest``'s own subword model (not learnt again),
    so that ``tok/`` (the text DROP's word aligner trains on) and ``subword/`` are the
    text ``dest`` was binarised from; no fertilities, and ``dest`` is left as it is.
    PrepError, and no intermediates left, where the rebuilt splits have other sentence
    counts than ``dest``'s (``sentences``: a corpus prepared by another version)."""
    model_file = subwords.MODEL_FILE[args.subwords]
    logger.info(f"{dest} is prepared already; its intermediates, where missing, are "
                f"rebuilt in {work}")
    _, folders = text_stages(recipe, args, work, settings, {}, f"the subword model of {dest}",
                             lambda tok, out: shutil.copyfile(dest / model_file, out))
    rebuilt = {split: len(read_lines(folders[2] / f"{split}.{recipe.src}"))
               for split in recipe.splits}
    if rebuilt != sentences:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        raise PrepError(f"{dest} holds {_counts(sentences)} sentence pairs but the rebuilt "
                        f"text {_counts(rebuilt)}: it was prepared by another version of the "
                        "recipe; prepare it again (delete it or choose another --name)")
    logger.info(f"kept in {work}: " + ", ".join(f"{f.name}/" for f in folders)
                + f" ({_counts(rebuilt)} pairs, as {dest})")


def _counts(sentences: Dict[str, int]) -> str:
    return ", ".join(f"{split} {n}" for split, n in sentences.items())


#: The stages whose files depend on the settings (``orig/`` holds only the archives).
INTERMEDIATES = ("raw", "tok", "subword")
#: What made the intermediates of ``WORK/NAME``: the settings and the inputs' digests.
WORK_STAMP = "SETTINGS.json"


def claim_work_folder(work: Path, made_with: dict) -> None:
    """Make ``work``'s intermediates safe to reuse for a run with ``made_with``: those an
    earlier run made with other settings or inputs (or that no stamp vouches for) are
    removed, so that no stage is skipped on another run's files; then stamp the folder."""
    stamp = work / WORK_STAMP
    found = [work / name for name in INTERMEDIATES if (work / name).exists()]
    recorded = json.loads(stamp.read_text()) if stamp.exists() else None
    if found and recorded != made_with:
        why = "made with other settings or inputs" if recorded else "of unknown settings"
        logger.info(f"removing the intermediates in {work}, {why}: "
                    + ", ".join(p.name for p in found))
        for folder in found:
            shutil.rmtree(folder)
    if recorded != made_with:
        with atomic_outputs([stamp]) as (tmp,):
            tmp.write_text(json.dumps(made_with, indent=1) + "\n")


def _changed_inputs(recorded: Dict[str, str], now: Dict[str, str]) -> str:
    """The input files whose digests differ between ``recorded`` and ``now``."""
    return ", ".join(sorted(path for path in set(recorded) | set(now)
                            if recorded.get(path) != now.get(path)))


def _size(*paths: Path) -> int:
    """Bytes in the files at or under ``paths``."""
    return sum(f.stat().st_size for p in map(Path, paths) if p.exists()
               for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())


def _update_json(path: Path, **entries) -> None:
    with atomic_outputs([path]) as (tmp,):
        tmp.write_text(json.dumps({**json.loads(path.read_text()), **entries}, indent=1) + "\n")


def _difference(old: dict, new: dict) -> str:
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return ", ".join(f"{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in keys)


# -- the command line ---------------------------------------------------------------------------
def build_parser(recipe: Recipe, prog: Optional[str] = None,
                 description: Optional[str] = None) -> CommandParser:
    """The options every preparation shares, with ``recipe``'s defaults. A recipe without
    :attr:`Recipe.sources` downloads nothing, so it has no ``--raw-dir`` or
    ``--no-checksums``; one without a :attr:`Recipe.name` needs ``--name``."""
    p = CommandParser(
        prog=prog or f"python -m sparse_attn_data.{recipe.name}",
        description=description or f"Prepare {recipe.title} for fairseq: download, clean, "
                                   "tokenise, subwords, binarise (see sparse_attn_data/recipe.py).")
    p.add_argument("--name", default=recipe.name or None, required=not recipe.name,
                   help="folder under --dest-dir"
                        + (f" (default {recipe.name})" if recipe.name else ""))
    p.add_argument("--dest-dir", default="data-bin", help="default data-bin")
    p.add_argument("--work-dir", default="data-work",
                   help="archives and intermediates, under NAME (default data-work)")
    if recipe.sources:
        p.add_argument("--raw-dir", help="offline: take the archives from this directory and "
                                         f"download nothing (or set {RAW_DIR_ENV})")
    else:  # nothing to fetch: prepare() sees the flags' no-op values
        p.set_defaults(raw_dir=None, no_checksums=False)
    p.add_argument("--subwords", choices=subwords.SCHEMES, default=recipe.subwords,
                   help="joint BPE with subword-nmt, a sentencepiece BPE model, or none "
                        f"(words); default {recipe.subwords}")
    p.add_argument("--bpe-merges", "--size", dest="size", type=int, default=recipe.merges,
                   help=f"merges (subword-nmt) or vocabulary size (sentencepiece); "
                        f"default {recipe.merges}")
    dictionaries = p.add_mutually_exclusive_group()
    dictionaries.add_argument("--joined-dictionary", dest="joined_dictionary",
                              action="store_true", default=recipe.joined_dictionary,
                              help="one dictionary for both languages"
                                   + (" (default)" if recipe.joined_dictionary else ""))
    dictionaries.add_argument("--separate-dictionaries", dest="joined_dictionary",
                              action="store_false", help="one dictionary per language"
                              + ("" if recipe.joined_dictionary else " (default)"))
    if recipe.sources:
        p.add_argument("--no-checksums", action="store_true",
                       help="accept archives whose size or checksum differs from the "
                            "published one (a host that re-packed them)")
    p.add_argument("--max-train-subwords", type=int, metavar="N",
                   help="drop the training pairs with more than N subwords on either side "
                        "(default: keep them; the word-level cleaning applies either way)")
    for option in recipe.options:
        p.add_argument("--" + option.name.replace("_", "-"), dest=option.name,
                       choices=option.choices, default=option.choices[0],
                       help=f"{option.help} (default {option.choices[0]})")
    p.add_argument("--sink", action="store_true", help=f"append {SINK} to every source "
                                                       "sentence")
    p.add_argument("--fertility", action="store_true",
                   help="train the word aligner and write per-token fertility files and "
                        "the GUIDED table next to the binarised data")
    p.add_argument("--keep-intermediates", action="store_true",
                   help="keep the raw, tokenised and subword text under --work-dir; for a "
                        "corpus prepared already, rebuild what is missing of them (the "
                        "prepared folder is left as it is)")
    p.add_argument("--workers", type=int, default=1,
                   help="processes for tokenising, subwords and fairseq-preprocess")
    return p


def parse(parser: CommandParser, argv=None):
    """``argv`` (default the command line's) parsed and checked; kept as ``args.argv``
    for ``PREPARED.json``."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = parser.parse_args(argv)
    args.argv = argv
    if args.size < 1:
        parser.error("--bpe-merges must be positive")
    if args.max_train_subwords is not None and args.max_train_subwords < 1:
        parser.error("--max-train-subwords must be positive")
    return args


def run(recipe: Recipe, args, parser: CommandParser) -> Path:
    """:func:`prepare`, its progress shown as ``[NAME] ...`` lines and its errors
    reported in one line by ``parser``."""
    show_progress(args.name)
    try:
        return prepare(recipe, args)
    except SparseAttnError as err:  # PrepError, unreadable text, an aligner that fails
        parser.fail(err)


def main(recipe: Recipe, argv=None) -> Path:
    parser = build_parser(recipe)
    return run(recipe, parse(parser, argv), parser)
