"""What a run of a reproduction config (:mod:`.config`) trains and decodes: the trainings'
names and lengths, each table's decodings with their flags, checkpoint averaging, the
metrics' options, and the config narrowed to some tables or given more flags.
"""

import json
import re
from dataclasses import asdict, replace
from typing import List, Optional, Tuple

from sparse_attn_plugin.evaluation import drop
from sparse_attn_plugin.evaluation.metric import Metric

from .config import PAPER_OPTIONS, Config, ConfigError, Row, RunSection, Table


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def override_flags(overrides: dict) -> List[str]:
    return ["--model-overrides", repr(overrides)] if overrides else []


def decoding_key(row: Row, source: Optional[str] = None, corpus: Optional[str] = None,
                 seed: Optional[int] = None, subset: Optional[str] = None) -> str:
    """What makes a decoding different: the model, its training fertilities (``source``,
    for models that read them), the overrides, the extra generation flags, the corpus
    (None: the config's ``data``), the training seed (None: the flags') and the subset
    (None: the generation flags')."""
    key = [row.model, row.overrides]
    if row.generate:
        key.append(row.generate)
    if source:
        key.append(source)
    for name, value in (("corpus", corpus), ("seed", seed), ("subset", subset)):
        if value is not None:
            key.append({name: value})
    return json.dumps(key, sort_keys=True)


def training_name(model: str, source: Optional[str], corpus: Optional[str] = None,
                  seed: Optional[int] = None, best_of: Optional[List[int]] = None) -> str:
    """The name of a training run: the model, with its corpus, fertility data and seed
    if any; ``best_of``: the name of the best of its trainings with those seeds."""
    notes = [n for n in (corpus, source and f"{source} fertilities",
                         seed is not None and f"seed {seed}",
                         best_of and f"best of seeds {', '.join(map(str, best_of))}") if n]
    return model + (f" [{', '.join(notes)}]" if notes else "")


def corpus_data(config: Config, corpus: Optional[str]) -> Tuple[str, str]:
    """``(data, prepare)`` of a corpus: the config's own for None."""
    entry = config if corpus is None else config.corpora[corpus]
    return entry.data, entry.prepare


def flag_value(flags: List[str], name: str, default: Optional[str] = None) -> Optional[str]:
    """The value of ``name`` in ``flags`` (``--name V`` or ``--name=V``; the last counts)."""
    value = default
    for i, flag in enumerate(flags):
        if flag == name and i + 1 < len(flags):
            value = flags[i + 1]
        elif flag.startswith(name + "="):
            value = flag.split("=", 1)[1]
    return value


def reads_fertility_data(flags: List[str]) -> bool:
    """Whether training with ``flags`` reads the run's fertility data: per-token files
    (``--fertility predicted``, the last ``--fertility`` counting) or a GUIDED table
    filled in by the driver (``{guided_table}``)."""
    return (flag_value(flags, "--fertility") == "predicted"
            or any("{guided_table}" in f for f in flags))


def only_tables(config: Config, wanted: List[str]) -> Config:
    """``config`` with only the tables whose title contains one of ``wanted`` (case
    ignored): ``"Table 1"`` keeps every corpus's Table 1, ``"Table 1: BLEU, IWSLT14"``
    one of them. A text no title contains is a ConfigError listing the titles."""
    titles = [table.title for table in config.tables]
    for text in wanted:
        if not any(text.lower() in title.lower() for title in titles):
            raise ConfigError(f"--table {text!r} names no table of {config.name}; its "
                              f"tables: {'; '.join(titles)}")
    return replace(config, tables=tuple(table for table in config.tables
                                        if any(text.lower() in table.title.lower()
                                               for text in wanted)))


def training_length(config: Config, smoke: bool, corpus: Optional[str],
                    updates: Optional[int] = None) -> Tuple[int, str]:
    """How long one training of a run on ``corpus`` lasts: ``(13, "epochs")`` where its
    flags end it by epochs, else ``(its updates, "updates")`` (``updates`` where the run
    overrides them)."""
    settings = config.run_settings(smoke, corpus)
    epochs = flag_value(settings.train_flags, "--max-epoch")
    if epochs and updates is None:
        return int(epochs), "epochs"
    return updates or settings.max_update, "updates"


def training_budget(config: Config, smoke: bool, corpus: Optional[str],
                    updates: Optional[int] = None) -> str:
    """:func:`training_length` in words: ``"13 epochs"``, ``"100,000 updates"``."""
    count, unit = training_length(config, smoke, corpus, updates)
    return f"{count:,} {unit}"


def with_flags(config: Config, train: List[str], generate: List[str]) -> Config:
    """``config`` with ``train`` and ``generate`` flags added to every run's own (the
    config's, the smoke section's, each corpus's that has its own): precision or other
    machine settings a user adds without editing the config (``--fp16``). Coming last,
    they win over the config's where fairseq reads a flag twice."""
    added = {"train_flags": train, "generate_flags": generate}

    def extended(section: RunSection) -> RunSection:
        return replace(section, **{key: [*getattr(section, key), *flags]
                                   for key, flags in added.items()
                                   if getattr(section, key) is not None and flags})

    return replace(extended(config), smoke=extended(config.smoke),
                   corpora={name: extended(c) for name, c in config.corpora.items()})


def averaging(config: Config, smoke: bool, corpus: Optional[str] = None) -> Tuple[int, dict]:
    """``(checkpoints the run must keep, average_windows)`` of a run on ``corpus``: with
    ``select.average_windows`` its windows' span, else ``average_last`` and ``{}``
    (0 and ``{}``: the last checkpoint is decoded)."""
    windows = (config.paper_setting(smoke, "select", corpus) or {}).get("average_windows")
    if windows:
        return windows["size"] + windows["step"] * (windows["count"] - 1), windows
    return config.paper_setting(smoke, "average_last", corpus) or 0, {}


def paper_options(metric: Metric) -> dict:
    """The options the papers measured ``metric`` with (:data:`PAPER_OPTIONS`)."""
    return {**metric.defaults, **PAPER_OPTIONS.get(metric.key, {})}


def options_of(config: Config, smoke: bool, metric: Metric, corpus: Optional[str] = None) -> dict:
    """``metric``'s options in a run on ``corpus``: its defaults, then the config's
    (:meth:`Config.metric_options`)."""
    return {**metric.defaults, **config.metric_options(smoke, metric.key, corpus)}


def drop_settings(config: Config, smoke: bool) -> dict:
    """The ``drop`` options of a run, ``symmetrize`` as a list: what its word aligners
    train with (``iterations``) and what DROP is measured with."""
    options = options_of(config, smoke, drop.DROP)
    return {**options, "symmetrize": drop.symmetrizations(options)}


def resolve_tables(config: Config, smoke: bool) -> List[Tuple[Table, List[dict]]]:
    """The tables this run writes, each with its rows completed by ``corpus`` (None: the
    config's ``data``), ``source`` (the fertility data the model trains on, None if it
    reads none), ``seed`` (None: the training flags'), ``subset`` (None: the generation
    flags'), ``train`` (the name of the training run), ``key`` (the decoding's
    :func:`decoding_key`), ``row`` (its index in the config's table: a table with
    ``seeds`` has a row per seed, which the report averages) and ``candidates`` (the
    trainings ``train`` is the best of, as ``{seed: name}``, under ``select.seeds``;
    else ``{seed: train}``).

    Smoke runs train every table on the synthetic corpus and leave out a table with a
    ``corpus`` whose every decoding the tables before it already make."""
    default = config.run_setting(smoke, "fertility_source", "gold")
    resolved, decodings = [], set()
    for table in config.tables:
        if table.smoke_only and not smoke:
            continue
        corpus, subset = None if smoke else table.corpus, table.subset
        train_flags = config.run_settings(smoke, corpus).train_flags
        best_of = None if table.seeds is not None else (
            config.paper_setting(smoke, "select", corpus) or {}).get("seeds")
        rows = []
        for index, row in enumerate(table.rows):
            source = None
            if reads_fertility_data([*train_flags, *config.models[row.model]]):
                source = row.fertility_source or table.fertility_source or default
            for seed in table.seeds or [None]:
                train = training_name(row.model, source, corpus, seed, best_of)
                candidates = ({s: training_name(row.model, source, corpus, s)
                               for s in best_of} if best_of else {seed: train})
                rows.append({**asdict(row), "corpus": corpus, "source": source, "seed": seed,
                             "subset": subset, "row": index, "train": train,
                             "candidates": candidates,
                             "key": decoding_key(row, source, corpus, seed, subset)})
        keys = {row["key"] for row in rows}
        if smoke and table.corpus and keys <= decodings:
            continue
        decodings |= keys
        resolved.append((table, rows))
    return resolved


def averaging_problem(config: Config, smoke: bool, updates: Optional[int] = None) -> Optional[str]:
    """One line if a model's training flags cannot keep the checkpoints the run averages
    (``average_last``, or the span of ``select.average_windows``; checked before
    training). Epoch checkpoints count as enough unless ``--keep-last-epochs`` keeps
    too few (how many epochs a run has depends on the corpus)."""
    corpora = [None] if smoke else list(dict.fromkeys(
        row["corpus"] for _, rows in resolve_tables(config, smoke) for row in rows))
    for corpus in corpora:
        count, windows = averaging(config, smoke, corpus)
        settings = config.run_settings(smoke, corpus)
        max_update = updates or settings.max_update
        for model, own in config.models.items() if count else ():
            flags = [*settings.train_flags, *own]
            interval = int(flag_value(flags, "--save-interval-updates", "0"))
            keep = int(flag_value(flags, "--keep-interval-updates", "-1"))
            saved = max_update // interval if interval > 0 else 0
            kept = saved if keep < 0 else min(keep, saved)
            epochs = (0 if "--no-epoch-checkpoints" in flags
                      else int(flag_value(flags, "--keep-last-epochs", "-1")))
            if epochs < 0 or kept + epochs >= count:
                continue
            need = (f"the average_windows {json.dumps(windows)} need the last {count} "
                    "checkpoints" if windows else f"averaging the last {count} checkpoints")
            return (f"{need}, but model {model!r}" + (f" on {corpus}" if corpus else "")
                    + f" keeps {kept + epochs} ({max_update} updates, "
                    f"--save-interval-updates {interval}, --keep-interval-updates {keep}, "
                    + ("--no-epoch-checkpoints)" if "--no-epoch-checkpoints" in flags
                       else f"--keep-last-epochs {epochs})"))
    return None


def post_process_of(flags: List[str]) -> Optional[str]:
    """fairseq-generate's ``--post-process`` / ``--remove-bpe`` scheme in ``flags``."""
    scheme = None
    for i, flag in enumerate(flags):
        if flag in ("--remove-bpe", "--post-process"):
            following = flags[i + 1] if i + 1 < len(flags) else "--"
            scheme = "subword_nmt" if following.startswith("--") else following
        elif flag.startswith(("--remove-bpe=", "--post-process=")):
            scheme = flag.split("=", 1)[1]
    return None if scheme == "none" else scheme

