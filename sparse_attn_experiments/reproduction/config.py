"""A reproduction config: reading it and checking it (what a run of it trains and decodes:
:mod:`.plan`).

A config is JSON with: ``name`` (results go to ``results/<name>/``), ``paper``,
``settings_note``, ``data`` and ``prepare`` (the binarised corpus and how to make
it), ``train_flags``, ``max_update``, ``generate_flags``, ``bleu`` (options of
:func:`~sparse_attn_plugin.evaluation.corpus_bleu`), ``smoke`` (the same four
settings for the synthetic corpus, and optionally its own ``settings_note``,
``meteor``, ``drop`` and ``fertility_source``), ``models`` (name -> extra training
flags) and ``tables`` (each a ``title`` and ``rows`` of ``label``, ``model``, optional
``overrides`` (``--model-overrides``), ``generate`` (extra fairseq-generate flags) and
the ``paper``'s figures). Optional:

* ``metrics``: some of the scores of :data:`~sparse_attn_plugin.evaluation.scoring.METRICS`
  (``BLEU chrF METEOR REP DROP``) and of ``speed train_speed params`` (default ``BLEU
  speed``; the scores that go with BLEU, chrF, are scored and reported wherever it is;
  ``speed``: fairseq-generate's sentences/s, ``train_speed``: fairseq-train's words/s,
  both as ratios to the table's first row; ``params``: each trained model's attention
  parameters, counted in its checkpoint);
* ``average_last``: decode the average of each training's last N saved checkpoints
  (the training flags must save them: ``--save-interval-updates`` with
  ``--keep-interval-updates``, or ``--keep-last-epochs``); a smoke section has only its
  own (its flags are not the paper's);
* ``select``: what the paper chose by validation BLEU (sacrebleu with the run's ``bleu``
  options, on fairseq-generate's ``valid`` split decoded with the run's generation
  flags), Zhao et al. (2019, appendix A.2) and their released script:

  - ``"average_windows": {"size": N, "step": S, "count": C}``: average N consecutive
    saved checkpoints, in each of the last C windows whose ends are S saves apart (the
    last window ends at the newest checkpoint), and decode the window with the best
    validation BLEU. ``{"size": 10, "step": 5, "count": 9}`` over 90 epoch checkpoints
    is the released script's loop over epochs 50, 55, ..., 90. The flags must keep
    N + S (C - 1) checkpoints. It takes the place of ``average_last``;
  - ``"seeds": [1, 2, 3]``: train each model once per seed (``--seed``) and decode, for
    every table that has no ``seeds`` of its own, the training with the best validation
    BLEU (of its chosen window, if any). A table's own ``seeds`` still pool its rows as
    mean ± sd (each seed's training with its chosen window).

  The chosen seed and window, with the validation BLEU of every candidate, are recorded
  in the results (``trained``) and the report. A smoke section has only its own
  ``select``, never the config's (the paper's selection needs the paper's checkpoints);
* ``batch``: ``{"gpus": G}``: the GPUs the training flags' ``--max-tokens`` (or
  ``--batch-size``) and ``--update-freq`` are per-GPU settings for (the paper's). Each
  training keeps the paper's batch per update, ``max_tokens x update_freq x G``, on the
  GPUs it runs on (``--distributed-world-size`` in the flags, else every visible GPU, as
  fairseq-train counts them; 1 without a GPU) by setting ``--update-freq`` to
  ``update_freq x G / world size``; a run where that is not a whole number stops
  before training, with one line (rounding would change the paper's batch silently).
  Without ``batch`` the flags are used as they are. Every training prints the batch it
  trains with. Like ``select``, never inherited by a smoke section;
* ``may_diverge``: models whose training may fail (the paper reports that they did not
  converge): a failed training is reported in their rows instead of stopping the run;
* ``meteor``: ``{"language": "en" | "de" | "other"}``, the target language's Meteor 1.5
  settings (needed for METEOR);
* ``drop``: ``{"symmetrize": NAME or [NAMES], "iterations": N}``. DROP's aligner
  (fast_align, ``<SINK>`` on every source sentence, default 5 EM iterations) is
  trained once per run on the training data, as fairseq-generate post-processes it
  (``--remove-bpe``); the first symmetrisation (default the paper's
  grow-diag-final-and) stands beside the paper's figure, others get columns of their own;
* fertility data, for models that read it (``--fertility predicted`` trains on
  per-token fertility files; ``{guided_table}`` in a model's flags is replaced by a
  GUIDED table): ``fertility_source`` is ``"gold"`` (the ``{split}.SRC-TGT.fert`` files
  of the binarised corpus, e.g. the synthetic corpus's true fertilities) or
  ``"aligner"`` (this run trains ``sparse-attn-align`` on the binarised training text,
  with the sink, and writes its fertilities for train and valid into a copy of the
  corpus directory made of symlinks, and its GUIDED table). The source is the row's
  ``fertility_source``, else its table's, else the run's (``smoke.fertility_source``
  in smoke runs, else the config's, else gold);
* a table's ``smoke_only: true`` runs it in smoke runs only;
* a table's ``seeds`` (e.g. ``[1, 2, 3]``) trains each of its models once per seed
  (``--seed``) and reports the mean and standard deviation over the seeds;
* a table's ``subset`` (``valid`` or ``test``, default the generation flags') is the
  split its rows are decoded and scored on;
* more corpora than the config's ``data``: ``corpora`` maps a name (``"ja-en"``) to its
  ``data`` and ``prepare``, and a table's ``corpus`` names the one its rows train and
  decode on (its models are trained again there). A corpus may hold its own
  ``train_flags``, ``max_update``, ``generate_flags``, ``bleu``, ``meteor`` and
  ``average_last`` (e.g. WMT's model size and BLEU convention); other settings are the
  config's. Smoke runs decode these tables on the synthetic corpus too, except those
  whose every row another table already has.

"""

import json
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from sparse_attn_plugin.errors import SparseAttnError
from sparse_attn_plugin.evaluation.drop import PUBLISHED_SYMMETRIZATION
from sparse_attn_plugin.evaluation.scoring import METRICS as SCORES
from sparse_attn_plugin.evaluation.scoring import with_bleu

REQUIRED = ("name", "paper", "settings_note", "data", "prepare", "train_flags", "max_update",
            "generate_flags", "bleu", "smoke", "models", "tables")
OPTIONAL = ("metrics", "meteor", "drop", "fertility_source", "corpora", "may_diverge",
            "average_last", "select", "batch")
SMOKE_REQUIRED = ("train_flags", "max_update", "generate_flags", "bleu")
SMOKE_OPTIONAL = ("settings_note", "meteor", "drop", "fertility_source", "average_last",
                  "select", "batch")
TABLE_KEYS = ("title", "rows", "fertility_source", "smoke_only", "corpus", "seeds", "subset")
CORPUS_KEYS = ("data", "prepare")
CORPUS_OPTIONAL = ("train_flags", "max_update", "generate_flags", "bleu", "meteor",
                   "average_last", "select", "batch")
ROW_KEYS = ("label", "model", "overrides", "generate", "fertility_source", "paper")
#: What a run measures beside the scores of :data:`SCORES`.
MEASURES = ("speed", "train_speed", "params")
DEFAULT_METRICS = ("BLEU", "speed")
#: The paper's figure a measure stands beside (a score's is its own name).
PAPER_KEY = {"speed": "speed-up", "train_speed": "train speed-up"}
SUBSETS = ("valid", "test")
FERTILITY_SOURCES = ("gold", "aligner")
PLACEHOLDERS = ("guided_table",)
#: The options the papers measured a metric with (by its key) where they differ from its
#: defaults, which a reproduction takes where its config gives none: DROP with the paper's
#: symmetrisation, so that ours stands beside the paper's figure.
PAPER_OPTIONS = {"drop": {"symmetrize": PUBLISHED_SYMMETRIZATION}}
SELECT_KEYS = ("seeds", "average_windows")
WINDOW_KEYS = ("size", "step", "count")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")


class ConfigError(SparseAttnError, ValueError):
    """A config that cannot be run; the message is one line naming the file."""


def known_metrics() -> Tuple[str, ...]:
    """What a config's ``metrics`` may name: the scores, then the measures."""
    return (*SCORES, *MEASURES)


def paper_keys() -> Tuple[str, ...]:
    """The paper's figures a table row may give: the scores and the measures'."""
    return (*SCORES, *PAPER_KEY.values())


def metrics_of(run: dict) -> List[str]:
    """What a run scores and reports: the ``metrics`` of its config (or of its record, as
    the run wrote them), with the scores that go with BLEU beside it (chrF:
    :func:`~sparse_attn_plugin.evaluation.scoring.with_bleu`)."""
    return with_bleu(run.get("metrics", list(DEFAULT_METRICS)))


# -- a checked config ------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """A table row: the model it decodes, how, and the paper's figures."""

    label: str
    model: str
    overrides: dict = field(default_factory=dict)
    generate: List[str] = field(default_factory=list)
    fertility_source: Optional[str] = None
    paper: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Table:
    """A paper's table: its title, rows and how they are trained and decoded."""

    title: str
    rows: Tuple[Row, ...]
    fertility_source: Optional[str] = None
    smoke_only: bool = False
    corpus: Optional[str] = None
    seeds: Optional[List[int]] = None
    subset: Optional[str] = None


@dataclass(frozen=True)
class RunSection:
    """The settings of a run: the config's own, its ``smoke`` section's or a corpus's
    (None: not given there)."""

    train_flags: Optional[List[str]] = None
    max_update: Optional[int] = None
    generate_flags: Optional[List[str]] = None
    bleu: Optional[dict] = None
    settings_note: Optional[str] = None
    data: Optional[str] = None
    prepare: Optional[str] = None
    meteor: Optional[dict] = None
    drop: Optional[dict] = None
    fertility_source: Optional[str] = None
    average_last: Optional[int] = None
    select: Optional[dict] = None
    batch: Optional[dict] = None


@dataclass(frozen=True, kw_only=True)
class Config(RunSection):
    """A checked config: its own run settings, the smoke section's, the corpora's, the
    models and the tables."""

    name: str
    paper: str
    smoke: RunSection
    models: Dict[str, List[str]]
    tables: Tuple[Table, ...]
    metrics: List[str] = field(default_factory=lambda: list(DEFAULT_METRICS))
    corpora: Dict[str, RunSection] = field(default_factory=dict)
    may_diverge: List[str] = field(default_factory=list)

    def run_settings(self, smoke: bool, corpus: Optional[str] = None) -> RunSection:
        """The flags, ``max_update``, ``bleu`` (and the like) of a run on ``corpus``: the
        ``smoke`` section in smoke runs, else the corpus's own over the config's."""
        if smoke:
            return self.smoke
        if corpus is None:
            return self
        own = self.corpora[corpus]
        return replace(self, **{f.name: getattr(own, f.name) for f in fields(RunSection)
                                if getattr(own, f.name) is not None})

    def run_setting(self, smoke: bool, key: str, default=None, corpus: Optional[str] = None):
        """An optional setting of the run: the smoke section's own in smoke runs, else the
        corpus's or the config's, else ``default``."""
        value = getattr(self.smoke, key, None) if smoke else None
        if value is None:
            value = getattr(self.run_settings(False, corpus), key, None)
        return default if value is None else value

    def metric_options(self, smoke: bool, key: str, corpus: Optional[str] = None) -> dict:
        """The options of the metric whose key is ``key`` in a run on ``corpus``: its
        section (:meth:`run_setting`) over :data:`PAPER_OPTIONS`."""
        return {**PAPER_OPTIONS.get(key, {}), **self.run_setting(smoke, key, {}, corpus)}

    def paper_setting(self, smoke: bool, key: str, corpus: Optional[str] = None):
        """A setting that goes with the paper's training flags (``average_last``,
        ``select``, ``batch``): the smoke section's own in smoke runs (never inherited),
        else the corpus's or the config's, else None."""
        return getattr(self.smoke if smoke else self.run_settings(False, corpus), key)


def _built(config: dict) -> Config:
    """The :class:`Config` of a checked config's parsed JSON."""
    tables = tuple(Table(**{**table, "rows": tuple(Row(**row) for row in table["rows"])})
                   for table in config["tables"])
    corpora = {name: RunSection(**corpus) for name, corpus in config.get("corpora", {}).items()}
    return Config(**{**config, "smoke": RunSection(**config["smoke"]), "tables": tables,
                     "corpora": corpora})


# -- reading and checking a config ------------------------------------------------------------
def load_config(path: Path) -> Config:
    """Read and check a config, as a frozen :class:`Config`; raise :class:`ConfigError`
    with one clear line."""
    try:
        config = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: invalid JSON at line {err.lineno}: {err.msg}") from None
    return check_config(config, path)


def _keys(path, obj, allowed, what: str) -> None:
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: {what} must be a JSON object")
    unknown = [k for k in obj if k not in allowed]
    if unknown:
        raise ConfigError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(map(repr, unknown))} in {what}; known: "
                          f"{', '.join(allowed)}")


def _flags(path, flags, what: str, placeholders=PLACEHOLDERS) -> None:
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ConfigError(f"{path}: {what} must be a list of strings")
    unknown = sorted({p for f in flags for p in _PLACEHOLDER.findall(f)} - set(placeholders))
    if unknown:
        fills = (f"the driver fills {', '.join('{' + p + '}' for p in placeholders)}"
                 if placeholders else "the driver fills placeholders in training flags only")
        raise ConfigError(f"{path}: {what} has the unknown placeholder {{{unknown[0]}}}; "
                          + fills)


def _positive(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _seeds(path, seeds, what: str) -> None:
    if (not isinstance(seeds, list) or not seeds or len(set(seeds)) < len(seeds)
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        raise ConfigError(f"{path}: {what} must be a list of distinct integers, not {seeds!r}")


def _check_select(path, select, prefix: str) -> None:
    _keys(path, select, SELECT_KEYS, f"`{prefix}select`")
    if "seeds" in select:
        _seeds(path, select["seeds"], f"`{prefix}select.seeds`")
    if "average_windows" in select:
        windows = select["average_windows"]
        _keys(path, windows, WINDOW_KEYS, f"`{prefix}select.average_windows`")
        if set(windows) != set(WINDOW_KEYS) or not all(map(_positive, windows.values())):
            raise ConfigError(f"{path}: `{prefix}select.average_windows` needs positive "
                              f"integers {', '.join(WINDOW_KEYS)}, not {windows!r}")


def _source(path, value, what: str) -> None:
    if value not in FERTILITY_SOURCES:
        raise ConfigError(f"{path}: {what} must be one of {', '.join(FERTILITY_SOURCES)}, "
                          f"not {value!r}")


def _check_section(path, section: dict, prefix: str) -> None:
    """The settings a run section (the config or ``smoke``) may hold."""
    for key in ("settings_note", "data", "prepare"):
        if key in section and not isinstance(section[key], str):
            raise ConfigError(f"{path}: `{prefix}{key}` must be a string, not {section[key]!r}")
    if "max_update" in section and not _positive(section["max_update"]):
        raise ConfigError(f"{path}: `{prefix}max_update` must be a positive integer, not "
                          f"{section['max_update']!r}")
    if "train_flags" in section:
        _flags(path, section["train_flags"], f"`{prefix}train_flags`")
    if "generate_flags" in section:
        _flags(path, section["generate_flags"], f"`{prefix}generate_flags`", ())
    if "bleu" in section and not isinstance(section["bleu"], dict):
        raise ConfigError(f"{path}: `{prefix}bleu` must be a JSON object")
    for metric in SCORES.values():  # a metric's options: its section, as it checks them
        if metric.defaults and metric.key in section:
            _keys(path, section[metric.key], tuple(metric.defaults), f"`{prefix}{metric.key}`")
            problem = metric.check_options(section[metric.key], prefix + metric.key)
            if problem:
                raise ConfigError(f"{path}: {problem}")
    if "fertility_source" in section:
        _source(path, section["fertility_source"], f"`{prefix}fertility_source`")
    if "average_last" in section:
        count = section["average_last"]
        if not _positive(count):
            raise ConfigError(f"{path}: `{prefix}average_last` must be a positive integer "
                              f"(checkpoints to average), not {count!r}")
    if "select" in section:
        _check_select(path, section["select"], prefix)
    if "batch" in section:
        _keys(path, section["batch"], ("gpus",), f"`{prefix}batch`")
        if not _positive(section["batch"].get("gpus")):
            raise ConfigError(f"{path}: `{prefix}batch.gpus` must be a positive integer "
                              f"(the paper's GPUs), not {section['batch'].get('gpus')!r}")


def check_config(config, path) -> Config:
    """The :class:`Config` of a parsed config; :class:`ConfigError` (one line naming
    ``path``) for anything the driver could not run or would silently ignore."""
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: the config must be a JSON object")
    missing = [k for k in REQUIRED if k not in config]
    smoke = config.get("smoke", {})
    missing += [f"smoke.{k}" for k in SMOKE_REQUIRED if isinstance(smoke, dict) and k not in smoke]
    if missing:
        raise ConfigError(f"{path}: missing {', '.join(missing)}")
    _keys(path, config, REQUIRED + OPTIONAL, "the config")
    for key in ("name", "paper"):
        if not isinstance(config[key], str):
            raise ConfigError(f"{path}: `{key}` must be a string, not {config[key]!r}")
    _keys(path, smoke, SMOKE_REQUIRED + SMOKE_OPTIONAL, "`smoke`")
    _check_section(path, config, "")
    _check_section(path, smoke, "smoke.")
    _check_corpora(path, config)
    _check_metrics(path, config)
    _check_models(path, config)
    if not isinstance(config["tables"], list) or not config["tables"]:
        raise ConfigError(f"{path}: `tables` must be a non-empty list")
    for number, table in enumerate(config["tables"], 1):
        _check_table(path, config, number, table)
    return _built(config)


def _check_corpora(path, config: dict) -> None:
    corpora = config.get("corpora", {})
    if not isinstance(corpora, dict):
        raise ConfigError(f"{path}: `corpora` must map corpus names to their data")
    for name, corpus in corpora.items():
        _keys(path, corpus, CORPUS_KEYS + CORPUS_OPTIONAL, f"corpus {name!r}")
        if any(not isinstance(corpus.get(k), str) for k in CORPUS_KEYS):
            raise ConfigError(f"{path}: corpus {name!r} needs `data` and `prepare` strings")
        _check_section(path, corpus, f"corpora.{name}.")


def _check_metrics(path, config: dict) -> None:
    """``metrics``: known, BLEU among them, and each metric's required section given
    (by the config, or by every corpus)."""
    metrics = config.get("metrics", list(DEFAULT_METRICS))
    if (not isinstance(metrics, list) or not metrics or "BLEU" not in metrics
            or any(m not in known_metrics() for m in metrics)):
        raise ConfigError(f"{path}: `metrics` must be a list of {', '.join(known_metrics())} "
                          f"including BLEU, not {metrics!r}")
    corpora = config.get("corpora", {})
    for metric in (SCORES[name] for name in metrics if name in SCORES):
        if metric.required and metric.key not in config and not (corpora and all(
                metric.key in corpus for corpus in corpora.values())):
            raise ConfigError(f"{path}: {metric.name} needs `{metric.key}`: {metric.required}")


def _check_models(path, config: dict) -> None:
    if not isinstance(config["models"], dict) or not config["models"]:
        raise ConfigError(f"{path}: `models` must map model names to training flags")
    for model, flags in config["models"].items():
        _flags(path, flags, f"model {model!r}")
    diverging = config.get("may_diverge", [])
    if not isinstance(diverging, list) or any(m not in config["models"] for m in diverging):
        raise ConfigError(f"{path}: `may_diverge` must list models that `models` defines, "
                          f"not {diverging!r}")


def _check_table(path, config: dict, number: int, table) -> None:
    what = f"table {table.get('title', number)!r}" if isinstance(table, dict) else "a table"
    _keys(path, table, TABLE_KEYS, what)
    if "title" not in table or not isinstance(table.get("rows"), list) or not table["rows"]:
        raise ConfigError(f"{path}: {what} needs a `title` and a non-empty list of `rows`")
    if "fertility_source" in table:
        _source(path, table["fertility_source"], f"`fertility_source` of {what}")
    if not isinstance(table.get("smoke_only", False), bool):
        raise ConfigError(f"{path}: `smoke_only` of {what} must be true or false")
    if "corpus" in table and table["corpus"] not in config.get("corpora", {}):
        raise ConfigError(f"{path}: {what} trains on corpus {table['corpus']!r}, which "
                          f"`corpora` does not define")
    if "corpus" in table and table.get("smoke_only"):
        raise ConfigError(f"{path}: {what} has a `corpus`, so it cannot be "
                          "`smoke_only` (smoke runs train on the synthetic corpus)")
    _seeds(path, table.get("seeds", [1]), f"`seeds` of {what}")
    if table.get("subset", "test") not in SUBSETS:
        raise ConfigError(f"{path}: `subset` of {what} must be one of "
                          f"{', '.join(SUBSETS)}, not {table['subset']!r}")
    for row in table["rows"]:
        _check_row(path, config, table, row)


def _check_row(path, config, table, row) -> None:
    what = (f"row {row.get('label')!r} of {table['title']!r}" if isinstance(row, dict)
            else f"a row of {table['title']!r}")
    _keys(path, row, ROW_KEYS, what)
    if "label" not in row or "model" not in row:
        raise ConfigError(f"{path}: {what} needs a `label` and a `model`")
    if row["model"] not in config["models"]:
        raise ConfigError(f"{path}: row {row['label']!r} of {table['title']!r} uses "
                          f"model {row['model']!r}, which `models` does not define")
    if not isinstance(row.get("overrides", {}), dict):
        raise ConfigError(f"{path}: `overrides` of {what} must be a JSON object")
    if "generate" in row:
        _flags(path, row["generate"], f"`generate` of {what}", ())
    if "fertility_source" in row:
        _source(path, row["fertility_source"], f"`fertility_source` of {what}")
    paper = row.get("paper", {})
    _keys(path, paper, paper_keys(), f"`paper` of {what}")
    for key, value in paper.items():
        if not isinstance(value, (int, float, str)) or isinstance(value, bool):
            raise ConfigError(f"{path}: paper figure {key} of {what} must be a number (or "
                              f"a note such as \"did not converge\"), not {value!r}")
