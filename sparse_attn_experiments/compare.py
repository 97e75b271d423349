"""``sparse-attn-compare``: kinds of attention trained and scored side by side on one
corpus; ``make demo`` is this command on the bundled synthetic corpus.

Every row (a kind of attention, :mod:`.comparison.models`) trains with the same
architecture, data, seed and stopping rule, translates every test split with beam 5, and
is scored and paired with softmax (:mod:`.comparison.run`, :mod:`.comparison.paired`).
The report, its record, figures and translations go to ``--out`` (``WORK_DIR/report`` by
default: a user's run never rewrites ``results/``); a run resumes row by row. Flags, the
report and resuming: README.md, "Comparing kinds of attention on a corpus".

    sparse-attn-compare --data data-bin/multi30k_de_en
    sparse-attn-compare --data DIR --rows softmax,entmax15 --smoke   # a quick check
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

import argparse
import json
import logging
import shlex
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from sparse_attn_plugin.command_line import CommandParser, show_progress
from sparse_attn_plugin.errors import SparseAttnError
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic

from .comparison.corpus import (
    REMOVE_BPE,
    Corpus,
    CorpusError,
    open_corpus,
    synthetic_corpus,
    synthetic_corpus_at,
)
from .comparison.lenpen import parse_grid, tune_rows
from .comparison.models import ARCHITECTURES, Architecture, title
from .comparison.paired import UNTESTED, pair_with_softmax
from .comparison.passed_flags import FlagError, check_rows, split
from .comparison.report import figures, record_figures, render
from .comparison.run import Schedule, run_row
from .comparison.scorers import comparison_scorer
from .comparison.switch import choices, switch_rows
from .comparison.translations import keep
from .pipeline import STOPPED, FairseqFailed

# Named by __spec__: under `python -m` this module is __main__, outside the progress loggers.
logger = logging.getLogger(__spec__.name)

#: The stopping rule without ``--data`` (the demo's synthetic corpus: about 240 updates
#: an epoch; softmax's validation loss flattens after about 800 updates; its speed on a
#: CPU: results/demo/) and with it; ``--model paper``'s, as README's training loop (5
#: epochs without a better validation loss, no time budget);
#: ``--smoke`` stops every row at 200 updates or after 5 minutes of training.
SCHEDULES = {
    "synthetic": Schedule(patience=3, minutes=1.5, max_update=3000, validate_every=100),
    "data": Schedule(patience=5, minutes=30, max_update=30000),
    "paper": Schedule(patience=5, minutes=None, max_update=100000),
    "smoke": Schedule(patience=1000, minutes=5, max_update=200, validate_every=50),
}
SMOKE = SCHEDULES["smoke"]
#: How the help names each schedule.
_SCHEDULE_NAMES = {"synthetic": "synthetic", "data": "--data", "paper": "--model paper",
                   "smoke": "--smoke"}


def _defaults(field: str) -> str:
    """Every schedule's ``field`` for the help: ``synthetic 3000, --data 30000, ...``
    (none: no time budget; validation after every epoch)."""
    def value(schedule):
        given = getattr(schedule, field)
        return f"{given:g}" if given is not None else (
            "every epoch" if field == "validate_every" else "none")

    return ", ".join(f"{_SCHEDULE_NAMES[name]} {value(schedule)}"
                     for name, schedule in SCHEDULES.items())


def build_parser() -> CommandParser:
    parser = CommandParser(prog="sparse-attn-compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="a binarised corpus (sparse_attn_data's recipes "
                        "or python -m sparse_attn_data.parallel); default: the synthetic corpus")
    parser.add_argument("--model", choices=ARCHITECTURES,
                        help="the architecture every row shares (default: tiny on the "
                             "synthetic corpus, small with --data; paper: fairseq's "
                             "transformer_iwslt_de_en with its IWSLT14 recipe, for a GPU)")
    parser.add_argument("--rows", help="comma-separated kinds of attention (default: every "
                        "row of the architecture: "
                        + "; ".join(f"{name}: {', '.join(a.rows)}"
                                    for name, a in ARCHITECTURES.items()) + ")")
    parser.add_argument("--out", type=Path, help="the folder the report goes to, created "
                        "with its parents where missing (default: WORK_DIR/report, not "
                        "committed; the project's own tables are published with --out "
                        "results/...)")
    parser.add_argument("--work-dir", type=Path, help="checkpoints and logs, not committed, "
                        "created where missing (default: .work/compare/NAME)")
    parser.add_argument("--patience", type=int,
                        help="stop a row after this many validations without a better loss "
                             f"(default: {_defaults('patience')})")
    parser.add_argument("--minutes-per-row", type=float,
                        help="training time budget of each row (default: "
                             f"{_defaults('minutes')})")
    parser.add_argument("--max-updates", type=int, help="update cap of each row (default: "
                        f"{_defaults('max_update')})")
    parser.add_argument("--validate-every", type=int, metavar="UPDATES",
                        help="validate every this many updates (default: "
                             f"{_defaults('validate_every')})")
    parser.add_argument("--redraw", action="store_true",
                        help="draw the figures the record alone gives (comparison.png, "
                             "training-curves.png, alphas.png) again from --out's "
                             "comparison.json with this code, and nothing else: no "
                             "training, no translation; the report and the record stay")
    parser.add_argument("--smoke", action="store_true", help=f"a check that everything "
                        f"runs: each row stops after {SMOKE.max_update} updates or "
                        f"{SMOKE.minutes:g} minutes of training, whichever comes first, "
                        f"validation every {SMOKE.validate_every}; on a busy machine rows "
                        "may stop at different points, and the report then gives their "
                        "differences to softmax without a test; the report says it is a "
                        "smoke run")
    parser.add_argument("--decode-with", metavar="NAME",
                        help="also translate the test splits with every row's best "
                             "checkpoint decoded with normaliser NAME at every site (any "
                             "--attn-fn name that fits every site): the report adds each "
                             "row's BLEU so decoded and its paired difference to the row's "
                             "own decoding, which says whether a gap to softmax comes from "
                             "training or from decoding")
    parser.add_argument("--tune-lenpen", metavar="GRID",
                        help="comma-separated length penalties (fairseq-generate --lenpen, "
                             "e.g. 1,1.5,2,3): every row's best checkpoint translates the "
                             "valid split at each and the test splits at its best; the "
                             "report adds each row's BLEU there, paired with softmax's at "
                             "its own, which says whether a gap to softmax is where beam "
                             "search ends sentences")
    parser.add_argument("--train-flags", metavar="FLAGS",
                        help="fairseq-train flags for every row, after the comparison's own, "
                             "e.g. --fp16 or \"--update-freq 2\" (split as a shell splits "
                             "words; a flag the comparison sets itself is refused)")
    parser.add_argument("--generate-flags", metavar="FLAGS",
                        help="fairseq-generate flags for every translation, after the "
                             "comparison's own, e.g. --fp16 (as --train-flags)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--remove-bpe", choices=REMOVE_BPE,
                        help="subword scheme to merge before scoring (default: the one "
                             "PREPARED.json records, else the folder's subword model)")
    parser.add_argument("--train-size", type=int, default=20000,
                        help="synthetic corpus: training sentence pairs")
    parser.add_argument("--eval-size", type=int, default=500,
                        help="synthetic corpus: validation and test sentence pairs (each)")
    return parser


#: The options whose value is fairseq flags, which may start with a dash.
PASSED = ("--train-flags", "--generate-flags")


def joined(argv, parser: CommandParser):
    """``argv`` with ``--train-flags X`` as ``--train-flags=X``: argparse takes a value
    that starts with a dash (``--fp16``) for an option of its own. An option of this
    command after it is left as it is (argparse then says the value is missing)."""
    out = list(argv)
    for i in reversed(range(len(out) - 1)):
        if out[i] in PASSED and out[i + 1].split("=")[0] not in parser._option_string_actions:
            out[i:i + 2] = [f"{out[i]}={out[i + 1]}"]
    return out


def schedule_of(args, model: str) -> Schedule:
    base = SCHEDULES["smoke" if args.smoke else "paper" if model == "paper"
                     else "data" if args.data else "synthetic"]
    return Schedule(
        patience=args.patience or base.patience,
        minutes=args.minutes_per_row or base.minutes,
        max_update=args.max_updates or base.max_update,
        validate_every=args.validate_every or base.validate_every)


def recorded_rows(out: Path) -> dict:
    """The rows an earlier comparison wrote to ``out``, by name (none if it wrote none);
    ValueError naming the file where ``comparison.json`` is not one this command wrote."""
    path = out / "comparison.json"
    if not path.exists():
        return {}
    try:
        return {row["attention"]: row for row in json.loads(path.read_text())["rows"]}
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is not a comparison sparse-attn-compare wrote "
                         f"({type(err).__name__}: {err}); move it away or choose another "
                         "--out") from None


def trained(row: dict, schedule: Schedule) -> str:
    """A finished row as the progress says it: ``BLEU 12.34 after 153 of 200 updates,
    epoch 2 (time budget ended)``."""
    epoch = f", epoch {row['epochs']}" if row.get("epochs") else ""
    return (f"BLEU {row['bleu']['test']:.2f} after {row['updates']} of "
            f"{schedule.max_update} updates{epoch} ({STOPPED[row['stopped']]})")


def _stop(signum, frame):
    raise SystemExit(128 + signum)


def stopping(schedule: Schedule) -> str:
    """When a row's training stops, as the report's settings say it."""
    limits = [f"{schedule.patience} validations without a better loss",
              *([f"{schedule.minutes:g} minutes of training"] if schedule.minutes else []),
              f"{schedule.max_update} updates"]
    return f"{', '.join(limits[:-1])} or {limits[-1]}, whichever comes first"


def model_of(args) -> str:
    """The architecture a comparison's rows share: ``--model``, else tiny on the synthetic
    corpus and small with ``--data``."""
    return args.model or ("small" if args.data else "tiny")


def redraw(parser: CommandParser, out: Optional[Path]) -> int:
    """``--redraw``: :func:`.comparison.report.record_figures` from ``out/comparison.json``,
    its rows titled as the command it records names them."""
    if out is None:
        parser.fail("--redraw needs --out, the folder whose comparison.json to draw")
    try:
        record = json.loads((out / "comparison.json").read_text())
        made = parser.parse_args(joined(shlex.split(record["command"])[1:], parser))
        architecture = ARCHITECTURES[model_of(made)]
        titles = {row["attention"]: title(architecture, row["attention"])
                  for row in record["rows"]}
        drawn = record_figures(record["rows"], titles, record["corpus"], record["tests"], out)
    except (OSError, ValueError, KeyError, TypeError) as err:
        parser.fail(f"--redraw: {out / 'comparison.json'} is no comparison this command "
                    f"wrote ({type(err).__name__}: {err})")
    print("\n".join(map(str, drawn)))
    return 0


class Refusal(SparseAttnError, ValueError):
    """A comparison this command will not run as asked; the message is one line."""


@dataclass(frozen=True)
class Request:
    """A comparison's command line, checked: the rows, where they train and report, how
    long, the flags passed on and the rows ``out`` already holds. ``corpus`` is None for
    the synthetic corpus, which :func:`run` makes."""

    args: argparse.Namespace
    given: List[str]
    model: str
    names: List[str]
    grid: Optional[List[str]]
    corpus: Optional[Corpus]
    work: Path
    out: Path
    schedule: Schedule
    passed: Tuple[List[str], List[str]]
    recorded: dict

    @property
    def architecture(self) -> Architecture:
        return ARCHITECTURES[self.model]


def checked_names(args, model: str) -> List[str]:
    """The rows ``--rows`` names (default: the architecture's); Refusal for a name the
    architecture lacks, or a ``--decode-with`` normaliser no site takes."""
    architecture = ARCHITECTURES[model]
    names = [n for n in (args.rows or ",".join(architecture.rows)).split(",") if n]
    unknown = [n for n in names if n not in architecture.rows]
    if unknown or not names:
        raise Refusal(f"unknown --rows {unknown} for --model {model}; choose from "
                      f"{', '.join(architecture.rows)}")
    usable = choices(architecture) if args.decode_with else []
    if args.decode_with and args.decode_with not in usable:
        raise Refusal(f"unknown --decode-with {args.decode_with!r} for --model {model}; "
                      f"choose from {', '.join(usable)}")
    return names


def checked_numbers(args) -> Optional[List[str]]:
    """The ``--tune-lenpen`` grid (None without it); Refusal for a grid that is not one,
    or a count or budget that is not positive."""
    try:
        grid = parse_grid(args.tune_lenpen) if args.tune_lenpen is not None else None
    except ValueError as err:
        raise Refusal(f"--tune-lenpen takes comma-separated numbers, e.g. 1,1.5,2: {err}") from None
    numbers = [args.patience, args.minutes_per_row, args.max_updates, args.validate_every,
               args.train_size, args.eval_size]
    if any(n is not None and n <= 0 for n in numbers):
        raise Refusal("--patience, --minutes-per-row, --max-updates, --validate-every, "
                      "--train-size and --eval-size must be positive")
    return grid


def checked_corpus(args, architecture: Architecture, names: List[str]) -> Optional[Corpus]:
    """The ``--data`` corpus (None: the synthetic one); CorpusError for a folder that
    is none, Refusal where rows train on fertility files it lacks."""
    corpus = open_corpus(args.data, args.remove_bpe) if args.data else None
    needing = [n for n in names if architecture.rows[n].needs_fertilities]
    if corpus and needing and not corpus.has_fertilities():
        raise Refusal(f"rows {', '.join(needing)} train on fertility files, and {args.data} "
                      "has none: prepare it with --fertility")
    return corpus


def checked_args(args, given: List[str]) -> Request:
    """``args`` checked in the order a user meets the problems, before anything runs;
    the project's errors (:data:`REFUSED`) say the first one."""
    model = model_of(args)
    names = checked_names(args, model)
    grid = checked_numbers(args)
    corpus = checked_corpus(args, ARCHITECTURES[model], names)
    work = args.work_dir or Path(".work") / "compare" / (args.data.name if args.data
                                                         else "demo")
    out = args.out or work / "report"
    schedule = schedule_of(args, model)
    passed = (split("--train-flags", args.train_flags),
              split("--generate-flags", args.generate_flags))
    if any(passed):
        check_rows(passed, ARCHITECTURES[model], model, names, schedule, args.seed,
                   corpus or synthetic_corpus_at(work / "corpus"), grid is not None)
    try:
        recorded = recorded_rows(out)
    except ValueError as err:
        raise Refusal(str(err)) from None
    return Request(args, given, model, names, grid, corpus, work, out, schedule, passed,
                   recorded)


@dataclass
class Compared:
    """What :func:`run` left: the corpus the rows trained on, their records, their
    translations kept in ``out`` and when the run started."""

    corpus: Corpus
    rows: List[dict]
    translated: List[str]
    started: float


def trained_rows(request: Request, corpus: Corpus) -> List[dict]:
    """Train, translate and score every row of ``request`` on ``corpus`` in turn,
    saying each one's outcome."""
    rows = []
    with comparison_scorer(corpus) as scorer:
        for i, name in enumerate(request.names, 1):
            logger.info(f"{i}/{len(request.names)} {name}: train, translate, score")
            rows.append(run_row(name, request.architecture, corpus, request.schedule,
                                request.work / request.model, request.args.seed, scorer,
                                request.recorded.get(name), request.passed))
            logger.info(f"    {trained(rows[-1], request.schedule)}")
    return rows


def run(request: Request) -> Compared:
    """Train and score every row, decode with ``--decode-with`` and tune the length
    penalty where asked, pair each row with softmax and keep the translations in
    ``out``; a fairseq command that fails (--fp16 without a GPU) is one line."""
    show_progress("compare")
    signal.signal(signal.SIGTERM, _stop)  # `kill` stops the training under way too
    started = time.time()
    args, work = request.args, request.work / request.model
    corpus = request.corpus
    if corpus is None:
        logger.info(f"synthetic corpus ({args.train_size} training pairs) -> {request.work}")
        corpus = synthetic_corpus(request.work / "corpus", args.train_size, args.eval_size)
    rows = trained_rows(request, corpus)
    switch_rows(rows, args.decode_with, work, corpus)
    tune_rows(rows, request.grid, work, corpus)
    try:
        pair_with_softmax(rows, work, request.out, corpus.tests)
    except ValueError as err:  # before anything is written to --out
        raise Refusal(str(err)) from None
    for row in rows:
        if UNTESTED in row:
            logger.info(f"no paired test for {row['attention']}: {row[UNTESTED]['why']}")
    return Compared(corpus, rows, keep(request.names, work, request.out, corpus.tests),
                    started)


def settings_of(request: Request) -> str:
    """The report's settings: architecture, stopping rule, validation, seed, beam and
    the flags passed on to fairseq."""
    schedule = request.schedule
    return (f"{request.architecture.summary} (`--model {request.model}` in "
            "`sparse_attn_experiments/comparison/models.py`); training stops after "
            f"{stopping(schedule)}; validation "
            + (f"every {schedule.validate_every} updates" if schedule.validate_every
               else "after every epoch") + f"; seed {request.args.seed}; beam 5"
            + "".join(f"; every {what} also gets `{shlex.join(flags)}`"
                      for what, flags in zip(("fairseq-train", "fairseq-generate"),
                                             request.passed) if flags))


def report(request: Request, compared: Compared) -> None:
    """Draw the figures, write ``comparison.json`` and ``README.md`` to ``out`` and
    print the report."""
    out, corpus, rows = request.out, compared.corpus, compared.rows
    command = " ".join(["sparse-attn-compare", *map(shlex.quote, request.given)])
    settings = settings_of(request)
    titles = {name: title(request.architecture, name) for name in request.names}
    drawn = figures(rows, titles, request.work / request.model, corpus, out)
    text = render(rows, titles, corpus, settings, command, [p.name for p in drawn],
                  compared.translated, request.args.smoke)
    write_json_atomic(out / "comparison.json", {
        "corpus": corpus.title, "tests": corpus.tests, "rows": rows, "settings": settings,
        "command": command, "smoke": request.args.smoke})
    write_text_atomic(out / "README.md", text)
    print(text)
    logger.info(f"done in {time.time() - compared.started:.0f} s; wrote {out / 'README.md'}")


#: The project's errors a comparison stops with in one line.
REFUSED = (Refusal, CorpusError, FlagError, FairseqFailed)


def main(argv=None):
    parser = build_parser()
    given = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = parser.parse_args(joined(given, parser))
    if args.redraw:
        return redraw(parser, args.out)
    try:
        request = checked_args(args, given)
        report(request, run(request))
    except REFUSED as err:
        parser.fail(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
