"""Reproduce a paper's tables from its file in ``configs/``.

Trains every model the tables need with ``fairseq-train``, decodes every table row
with ``fairseq-generate`` (a row may switch the attention at decoding time with
``--model-overrides`` or add generation flags such as a coverage penalty), scores each
row with the config's metrics (BLEU, and chrF beside it, with sacrebleu; METEOR, REP and
DROP as ``sparse-attn-score`` computes them; decoding sentences/s and training words/s as
ratios to the table's first row; a table with seeds pooled as mean ± sd; each row's
BLEU against the first row's by paired bootstrap resampling), optionally
decoding the average of each training's last checkpoints, or the best by validation BLEU
of several averages and seeds, with the paper's batch per update on the GPUs it has
(``--update-freq`` scaled), and writes the tables with
the paper's figures beside ours: all in one report, and each in a file of its own. ``--smoke``
runs the same pipeline on the bundled synthetic corpus with the config's small
``smoke`` settings, in minutes on a CPU; its numbers show that the pipeline works, not
what the paper measured.

    sparse-attn-reproduce configs/xu2021_hard_attention.json [--smoke]

The config format is described in :mod:`.reproduction.config`.
"""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

import argparse
import importlib.util
import logging
import shlex
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Dict, List, Optional

from sparse_attn_data.synthetic import binarize, write_corpus
from sparse_attn_plugin.command_line import CommandParser, show_progress
from sparse_attn_plugin.errors import SparseAttnError
from sparse_attn_plugin.evaluation import corpus_bleu
from sparse_attn_plugin.evaluation.metric import Setting
from sparse_attn_plugin.evaluation.scoring import METRICS, Scorer, with_bleu
from sparse_attn_plugin.files import write_json_atomic, write_text_atomic

from . import pipeline
from .checkpoint_averaging import AveragingError, average_last
from .pipeline import device_flags
from .reproduction.batch import BatchError, keep_batch, where
from .reproduction.config import Config, ConfigError, load_config
from .reproduction.fertility_data import (
    Aligners,
    Corpus,
    FertilityData,
    aligner_fertility_data,
    fill_placeholders,
    gold_fertility_data,
    language_pair,
    target_tokens,
)
from .reproduction.paired import pair_with_first_rows
from .reproduction.plan import (
    averaging,
    averaging_problem,
    corpus_data,
    drop_settings,
    only_tables,
    options_of,
    override_flags,
    post_process_of,
    resolve_tables,
    slug,
    training_budget,
    training_length,
    with_flags,
)
from .reproduction.report import render, render_tables
from .reproduction.selection import best, choose_window

# Named by __spec__: under `python -m` this module is __main__, outside the progress loggers.
logger = logging.getLogger(__spec__.name)

SMOKE_CORPUS = {"train": 20000, "valid": 500, "test": 1000}


def run_scorer(config: Config, smoke: bool, corpus: Optional[str],
               aligners: Optional[Aligners]) -> Scorer:
    """The scorer of the run's metrics on ``corpus``: each metric's options from the
    config, BLEU's from its ``bleu``, and the word aligner of ``aligners`` on the text as
    fairseq-generate post-processes it (trained when a metric first needs it)."""
    settings = config.run_settings(smoke, corpus)
    post_process = post_process_of(settings.generate_flags)
    setting = Setting(aligner=lambda: aligners.load(post_process),
                      options={metric.key: options_of(config, smoke, metric, corpus)
                               for metric in METRICS.values()})
    return Scorer([name for name in with_bleu(config.metrics) if name in METRICS], setting,
                  settings.bleu)


def check_data(config: Config, datas: Dict[Optional[str], Path], smoke: bool) -> Optional[str]:
    """One line saying why this run's metrics or fertility sources cannot be had (what
    a metric needs, as it checks it; sil-thot; its corpora ``datas``), or None: checked
    before anything is trained, not after."""
    rows = [row for _, rows in resolve_tables(config, smoke) for row in rows]
    for corpus in datas:
        problem = run_scorer(config, smoke, corpus, None).check()
        if problem:
            return problem
    if any(r["source"] == "aligner" for r in rows) and importlib.util.find_spec("thot") is None:
        return "the aligner's fertilities need sil-thot: pip install sil-thot"
    for corpus, data in datas.items():
        try:
            src, tgt = language_pair(data)
        except RuntimeError as err:
            return str(err)
        gold = Path(data) / f"train.{src}-{tgt}.fert"
        if any(r["source"] == "gold" and r["corpus"] == corpus for r in rows) \
                and not gold.is_file():
            return (f"{gold} does not exist: gold fertilities come with the synthetic "
                    'corpus only; use "fertility_source": "aligner"')
    return None


def attention_parameters(checkpoint: Path) -> int:
    """Parameters of the attention sites (fairseq's ``self_attn`` and ``encoder_attn``
    modules) in a checkpoint."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    return sum(t.numel() for name, t in state.items()
               if ".self_attn." in name or ".encoder_attn." in name)


@dataclass
class CorpusData:
    """What a run prepares on one corpus before training: its fertility data by source,
    its word aligners and the scorer of its metrics."""

    data: Path
    fertility: Dict[str, FertilityData]
    aligners: Aligners
    scorer: Scorer


def prepare_corpus(config: Config, smoke: bool, corpus_name: Optional[str], data: Path,
                   work: Path, sources: List[str]) -> CorpusData:
    """Fertility data for ``sources`` and what the metrics need (an aligner, a running
    Meteor), on the corpus ``data``: before training, so that a problem shows in
    minutes, not after days."""
    corpus = Corpus(data, work)
    aligners = Aligners(corpus, work, drop_settings(config, smoke)["iterations"])
    fertility = {}
    for source in sources:
        logger.info(f"fertility data: {source} ({data})")
        fertility[source] = (gold_fertility_data(corpus, work) if source == "gold"
                             else aligner_fertility_data(corpus, aligners, work))
    scorer = run_scorer(config, smoke, corpus_name, aligners)
    scorer.prepare()
    return CorpusData(Path(data), fertility, aligners, scorer)


@dataclass
class Trained:
    """What the trainings of a run left: the checkpoint each decodes, the data it
    trained on and its measurements (``{"failed": why}`` for a may-diverge failure)."""

    checkpoints: Dict[str, Path]
    data: Dict[str, Path]
    records: Dict[str, dict]


def valid_bleu(config: Config, smoke: bool, corpus: Optional[str], data: Path, work: Path,
               name: str, checkpoint: Path) -> float:
    """BLEU of training ``name``'s ``checkpoint`` on the validation split, as the run
    decodes and scores."""
    settings = config.run_settings(smoke, corpus)
    log = work / f"select-{slug(name)}-{checkpoint.stem}.log"
    output = pipeline.generate(data, checkpoint, [*settings.generate_flags, "--gen-subset",
                                                  "valid", *device_flags()], log).output
    return corpus_bleu(output.hypotheses, output.references, **settings.bleu).score


def training_runs(rows: List[dict]) -> List[tuple]:
    """``(name, model, fertility source, corpus, seed)`` of every training the rows need
    (a row under ``select.seeds`` needs one per seed), each once."""
    return list(dict.fromkeys((name, r["model"], r["source"], r["corpus"], seed)
                              for r in rows for seed, name in r["candidates"].items()))


def plan(config: Config, rows: List[dict], datas: Dict[Optional[str], Path], smoke: bool,
         updates: Optional[int]) -> List[str]:
    """What the run will do, said before it trains: where it trains, each training, how
    long it lasts and the tokens it reads (its batch per update, or its corpus's target
    tokens per epoch), and how many decodings follow."""
    runs = training_runs(rows)
    lines = [f"plan: {len(runs)} trainings {where()}, then "
             f"{len({row['key'] for row in rows})} decodings"]
    for name, model, _, corpus, _ in runs:
        budget = training_budget(config, smoke, corpus, updates)
        if training_length(config, smoke, corpus, updates)[1] == "epochs":
            reads = f"{target_tokens(datas[corpus]):,} target tokens each"
        else:
            reads = keep_batch([*config.run_settings(smoke, corpus).train_flags,
                                *config.models[model]],
                               (config.paper_setting(smoke, "batch", corpus) or {}).get(
                                   "gpus"))[1]
        lines.append(f"  train {name!r}: {budget} of {reads}")
    return lines


def time_estimate(config: Config, runs: List[tuple], datas: Dict[str, Path], smoke: bool,
                  updates: Optional[int], updates_per_second: float,
                  words_per_second: float) -> str:
    """A line saying about how long the run's trainings take at the speed the first one
    shows on this machine: a training that ends by updates at its updates/s, one that
    ends by epochs at its target tokens/s over the epochs' target tokens."""
    seconds = 0.0
    for name, _, _, corpus, _ in runs:
        count, unit = training_length(config, smoke, corpus, updates)
        if unit == "epochs":
            seconds += count * target_tokens(datas[name]) / words_per_second
        else:
            seconds += count / updates_per_second
    took = ("under a minute" if seconds < 60 else f"about {seconds / 60:.0f} minutes"
            if seconds < 5400 else f"about {seconds / 3600:.1f} hours")
    return (f"estimate: the {len(runs)} trainings take {took} here, at the "
            f"{updates_per_second:.2f} updates/s and {words_per_second:,.0f} target tokens/s "
            "of the first one's first minute (an estimate: models and corpora differ in "
            "speed, and decoding and scoring come on top)")


def batch_problem(config: Config, rows: List[dict], smoke: bool) -> Optional[str]:
    """One line if a training cannot keep the paper's batch on this machine, else None."""
    for _, model, _, corpus, _ in training_runs(rows):
        flags = [*config.run_settings(smoke, corpus).train_flags, *config.models[model]]
        try:
            keep_batch(flags, (config.paper_setting(smoke, "batch", corpus) or {}).get("gpus"))
        except BatchError as err:
            return f"{model}" + (f" on {corpus}" if corpus else "") + f": {err}"
    return None


def train_models(config: Config, rows: List[dict], prepared: Dict[Optional[str], CorpusData],
                 work: Path, smoke: bool, updates: Optional[int], metrics: List[str]) -> Trained:
    """Train each training run the rows need once (model, fertility data, corpus, seed),
    with the paper's batch per update; average its last checkpoints, or its best window
    of checkpoints, where the run's settings ask for it; then pick the best seed where
    a row is the best of several."""
    runs = training_runs(rows)
    done = Trained({}, {}, {})
    for name, _, source, corpus, _ in runs:
        source_data = prepared[corpus].fertility.get(source)
        done.data[name] = source_data.data if source_data else prepared[corpus].data

    def estimate(updates_per_second: float, words_per_second: float) -> None:
        logger.info(time_estimate(config, runs, done.data, smoke, updates,
                                  updates_per_second, words_per_second))

    for i, (name, model, source, corpus, seed) in enumerate(runs, 1):
        settings = config.run_settings(smoke, corpus)
        max_update = updates or settings.max_update
        source_data = prepared[corpus].fertility.get(source)
        flags, batch = keep_batch(
            fill_placeholders([*settings.train_flags, *config.models[model],
                               *(["--seed", str(seed)] if seed is not None else [])],
                              source_data),
            (config.paper_setting(smoke, "batch", corpus) or {}).get("gpus"))
        logger.info(f"{i}/{len(runs)} train {name!r}: {max_update} updates of {batch}")
        try:
            result = pipeline.train(done.data[name], work / slug(name),
                                    [*flags, *device_flags()], max_update, desc=name,
                                    fresh=smoke, on_speed=estimate if i == 1 else None)
        except RuntimeError as err:
            if model not in config.may_diverge:
                raise
            logger.warning(f"{name!r} did not train: {err}")
            done.records[name] = {"failed": str(err)}
            continue
        record = done.records[name] = {"updates": result.updates,
                                       "valid_loss": result.valid_loss,
                                       "words_per_second": result.words_per_second,
                                       "batch": batch}
        bleu_of = partial(valid_bleu, config, smoke, corpus, done.data[name], work, name)
        done.checkpoints[name] = decoded_checkpoint(config, smoke, corpus, name,
                                                    result.checkpoint, record, bleu_of)
        if source:
            record["fertilities"] = source
        if "params" in metrics:
            record["attention_parameters"] = attention_parameters(result.checkpoint)
    for row in rows:
        if row["train"] not in done.records:
            pick_seed(config, smoke, row, done, work)
    return done


def decoded_checkpoint(config: Config, smoke: bool, corpus: Optional[str], name: str,
                       last: Path, record: dict, bleu_of) -> Path:
    """What training ``name`` decodes: the best of its averaging windows by validation
    BLEU (``bleu_of(checkpoint)``), the average of its last checkpoints, or ``last``, as
    the run's settings ask; ``record`` gains what was chosen."""
    average, windows = averaging(config, smoke, corpus)
    if windows:
        logger.info(f"{name!r}: choosing the best of {windows['count']} "
                    "averaging windows by validation BLEU")
        chosen, record["window"], record["valid_bleu_by_window"] = choose_window(
            last.parent, windows, bleu_of)
        record["valid_bleu"] = record["valid_bleu_by_window"][record["window"]]
        return chosen
    if average:
        record["averaged"] = average
        return average_last(last.parent, average)
    return last


def pick_seed(config: Config, smoke: bool, row: dict, done: Trained, work: Path) -> None:
    """Enter the best of a row's candidate trainings by validation BLEU under the row's
    ``train`` name, with the chosen seed and every candidate's validation BLEU."""
    scores = {}
    for seed, name in row["candidates"].items():
        record = done.records[name]
        if "failed" not in record and "valid_bleu" not in record:
            record["valid_bleu"] = valid_bleu(config, smoke, row["corpus"], done.data[name],
                                              work, name, done.checkpoints[name])
        if "failed" not in record:
            scores[seed] = record["valid_bleu"]
    if not scores:
        done.records[row["train"]] = {"failed": "every seed failed: " + "; ".join(
            done.records[name]["failed"] for name in row["candidates"].values())}
        return
    seed = best(scores)
    chosen = row["candidates"][seed]
    logger.info(f"{row['train']!r}: seed {seed} (validation BLEU "
                f"{scores[seed]:.2f})")
    done.checkpoints[row["train"]], done.data[row["train"]] = (done.checkpoints[chosen],
                                                               done.data[chosen])
    done.records[row["train"]] = {**done.records[chosen], "seed": seed,
                                  "valid_bleu_by_seed": scores}


def decode_rows(config: Config, rows: List[dict], prepared: Dict[Optional[str], CorpusData],
                trained: Trained, work: Path, smoke: bool):
    """Decode and score every distinct decoding of the rows: ``({key: measurements},
    {key: generate output})``."""
    decoded, outputs = {}, {}
    for row in rows:
        if row["key"] in decoded:
            continue
        if "failed" in trained.records[row["train"]]:
            decoded[row["key"]] = {"failed": trained.records[row["train"]]["failed"]}
            continue
        settings = config.run_settings(smoke, row["corpus"])
        overrides, extra = row.get("overrides", {}), row.get("generate", [])
        subset = ["--gen-subset", row["subset"]] if row["subset"] else []
        logger.info(f"decode {row['train']!r}"
                    + (f" with {overrides}" if overrides else "")
                    + (f" {shlex.join(extra)}" if extra else "")
                    + (f" on {row['subset']}" if subset else ""))
        name = slug(row["train"] + "-" + "-".join(f"{k}-{v}" for k, v in overrides.items())
                    + "-" + " ".join(extra + subset))
        generated = pipeline.generate(
            trained.data[row["train"]], trained.checkpoints[row["train"]],
            [*settings.generate_flags, *extra, *subset, *device_flags(),
             *override_flags(overrides)],
            work / f"generate-{name}.log")
        output = outputs[row["key"]] = generated.output
        scores = prepared[row["corpus"]].scorer.score(output.hypotheses, output.references,
                                                      output.sources)
        decoded[row["key"]] = {
            **scores.record(),
            "sentences_per_second": generated.sentences_per_second,
            "sentences": len(output.ids)}
    return decoded, outputs


def measure(config: Config, datas: Dict[Optional[str], Path], work: Path, smoke: bool,
            updates: int = None) -> dict:
    """Prepare each corpus (``datas``: the config's under None, others by name), train
    the models, decode and score the rows: ``{"trained": {run: ...}, "decoded":
    {decoding key: measurements}, ...}``."""
    metrics = config.metrics
    tables = resolve_tables(config, smoke)
    rows = [row for _, table_rows in tables for row in table_rows]
    prepared = {}
    try:
        for corpus in dict.fromkeys(row["corpus"] for row in rows):
            sources = list(dict.fromkeys(r["source"] for r in rows
                                         if r["source"] and r["corpus"] == corpus))
            prepared[corpus] = prepare_corpus(
                config, smoke, corpus, datas[corpus],
                work if corpus is None else work / slug(corpus), sources)
        trained = train_models(config, rows, prepared, work, smoke, updates, metrics)
        decoded, outputs = decode_rows(config, rows, prepared, trained, work, smoke)
    finally:
        for corpus_data in prepared.values():
            corpus_data.scorer.close()
    if "BLEU" in metrics:
        pair_with_first_rows(tables, decoded, outputs,
                             lambda corpus: config.run_settings(smoke, corpus).bleu)
    results = {"trained": trained.records, "decoded": decoded,
               "max_update": updates or config.run_settings(smoke).max_update,
               "metrics": metrics}
    aligners = {path: {**about, "corpus": corpus} for corpus, p in prepared.items()
                for path, about in p.aligners.describe().items()}
    if aligners:
        results["aligners"] = aligners
    fertility = {source if corpus is None else f"{corpus}: {source}": {
        "data": str(f.data), "guided_table": str(f.guided_table)}
        for corpus, p in prepared.items() for source, f in p.fertility.items()}
    if fertility:
        results["fertility_data"] = fertility
    return results


def build_parser() -> CommandParser:
    parser = CommandParser(prog="sparse-attn-reproduce",
                           description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="a file in configs/")
    parser.add_argument("--smoke", action="store_true",
                        help="the same pipeline on the synthetic corpus, small settings")
    parser.add_argument("--data", type=Path, help="binarised corpus (default: the config's "
                                                  "`data`)")
    parser.add_argument("--corpus-data", metavar="NAME=DIR", action="append", default=[],
                        help="binarised data of one of the config's `corpora` (default: "
                             "its `data`); repeatable")
    parser.add_argument("--updates", type=int, help="training updates per model "
                                                    "(default: the config's)")
    parser.add_argument("--work-dir", type=Path, help="checkpoints and logs, created where "
                        "missing (default: .work/<name>[-smoke])")
    parser.add_argument("--table", action="append", default=[], metavar="TEXT",
                        help="run only the tables whose title contains TEXT (case ignored; "
                             "repeatable): e.g. --table 'Table 1: BLEU, IWSLT14' needs only "
                             "that table's corpus and trainings")
    parser.add_argument("--train-flags", default="", metavar="'FLAGS'",
                        help="added to every fairseq-train of the run, e.g. "
                             "--train-flags=--fp16 (the config is not edited)")
    parser.add_argument("--generate-flags", default="", metavar="'FLAGS'",
                        help="added to every fairseq-generate, e.g. --generate-flags=--fp16")
    parser.add_argument("--out", type=Path, help="the folder the report goes to, created "
                        "with its parents where missing (default: WORK_DIR/report, not "
                        "committed; the project publishes with --out results/<name>)")
    return parser


class Refused(SparseAttnError, ValueError):
    """A run refused before it trains; the message is one line, said as a usage error."""


@dataclass(frozen=True)
class Request:
    """A run's command line, checked: its config (with the added flags and only the
    tables asked for), the rows it decodes, where it works and reports, and the
    ``--corpus-data`` folders by corpus name."""

    args: argparse.Namespace
    argv: List[str]
    config: Config
    rows: List[dict]
    work: Path
    out: Path
    given: Dict[str, str]


def checked_config(args) -> dict:
    """The config with ``--train-flags`` and ``--generate-flags`` added and only the
    ``--table`` tables; Refused or ConfigError saying what cannot be run."""
    try:
        added = shlex.split(args.train_flags), shlex.split(args.generate_flags)
    except ValueError as err:  # e.g. an unclosed quote
        raise Refused(f"--train-flags / --generate-flags: {err}") from None
    config = with_flags(load_config(args.config), *added)
    if args.table:
        config = only_tables(config, args.table)
    if args.updates is not None and args.updates < 1:
        raise Refused("--updates must be positive")
    return config


def checked_args(args, argv: List[str]) -> Request:
    """``args`` checked before anything is prepared: the config, the checkpoints and
    batch its trainings can keep, the training flags on this machine, the corpora
    ``--corpus-data`` names."""
    config = checked_config(args)
    rows = [row for _, table_rows in resolve_tables(config, args.smoke) for row in table_rows]
    refusal = pipeline.cpu_refusal(shlex.split(args.train_flags))
    problem = (averaging_problem(config, args.smoke, args.updates)
               or batch_problem(config, rows, args.smoke)
               or (refusal and f"--train-flags {args.train_flags!r}: {refusal}"))
    if problem:
        raise Refused(problem)
    work = args.work_dir or Path(".work") / (config.name + ("-smoke" if args.smoke else ""))
    given = dict(item.partition("=")[::2] for item in args.corpus_data)
    unknown = [n for n in given if n not in config.corpora or not given[n]]
    if unknown:
        raise Refused(f"--corpus-data {unknown[0]}=DIR: the config's corpora are "
                      f"{', '.join(config.corpora) or 'none'}")
    return Request(args, argv, config, rows, work, args.out or work / "report", given)


def corpus_folders(request: Request) -> Dict[Optional[str], Path]:
    """The binarised corpus of each corpus the run trains on (None: the config's
    ``data``; smoke runs: the synthetic corpus, written now); Refused for one missing."""
    args, config = request.args, request.config
    if args.smoke:
        raw = request.work / "raw"
        write_corpus(raw, **SMOKE_CORPUS)
        return {None: args.data or Path(binarize(raw, request.work / "bin"))}
    chosen = {None: args.data, **{name: Path(path) for name, path in request.given.items()}}
    datas = {}
    for corpus in dict.fromkeys(row["corpus"] for _, rows in resolve_tables(config, False)
                                for row in rows):
        default, prepare = corpus_data(config, corpus)
        data = chosen.get(corpus) or Path(default)
        if not (data / "dict.txt").exists() and not list(data.glob("dict.*.txt")):
            flag = f"--corpus-data {corpus}=DIR" if corpus else "--data DIR"
            raise Refused(f"no binarised corpus in {data}: prepare it with `{prepare}` "
                          f"or pass {flag}")
        datas[corpus] = data
    return datas


def run(request: Request) -> dict:
    """Prepare the corpora, check that the run's metrics can be had, say the plan and
    :func:`measure`: the results, with the seconds the run took."""
    show_progress("reproduce")
    config, smoke, updates = request.config, request.args.smoke, request.args.updates
    datas = corpus_folders(request)
    problem = check_data(config, datas, smoke)
    if problem:
        raise Refused(problem)
    for line in plan(config, request.rows, datas, smoke, updates):
        logger.info(line)
    started = time.time()
    results = measure(config, datas, request.work, smoke, updates)
    results["seconds"] = round(time.time() - started, 1)
    return results


def report(request: Request, results: dict) -> None:
    """Write the record, each table and the report to ``out`` and print the report."""
    config, smoke, out = request.config, request.args.smoke, request.out
    command = "sparse-attn-reproduce " + shlex.join(request.argv)
    report_name, record_name = ("smoke.md", "smoke.json") if smoke else ("README.md",
                                                                          "results.json")
    text = render(config, results, smoke, command)
    write_json_atomic(out / record_name, {"command": command, "config": str(request.args.config),
                                          "smoke": smoke, **results})
    tables = out / "smoke" if smoke else out
    for name, table in render_tables(config, results, smoke, command).items():
        write_text_atomic(tables / name, table)
    write_text_atomic(out / report_name, text)
    print(text)
    logger.info(f"done in {results['seconds']:.0f} s; wrote {out / report_name}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        request = checked_args(args, argv)
        report(request, run(request))
    except (Refused, ConfigError) as err:  # the command line: a usage error
        parser.error(str(err))
    except AveragingError as err:
        parser.fail(err)


if __name__ == "__main__":
    main()
