"""The table of metrics (:data:`METRICS`, each entry defined in its own module:
:class:`.metric.Metric`), the one record of a translation's scores (:class:`Scores`) and
the one thing that scores (:class:`Scorer`, which makes what a metric needs once, when
first needed): ``sparse-attn-score``, the comparisons, the reproductions and the
results index all score, write and read through this module.

Names are spelt as the papers' tables and ``configs/*.json`` spell them (``BLEU``,
``chrF``, ``METEOR``, ``REP``, ``DROP``); :func:`metric_names` reads any case, as commands
accept ``--metrics bleu,chrf,rep``. Records written to JSON keep lower-case field names
(``bleu``, ``bleu_signature``, ``chrf``, ``drop_by_symmetrization``), like every other
field they hold. A metric added to :data:`METRICS` is scored by ``sparse-attn-score
--metrics``, by every comparison and by the reproductions that name it, and shown in
their reports; one that goes with BLEU (``with_bleu``, as chrF) wherever BLEU is. One
that needs more than the texts (a running Meteor, a word aligner) names it as its
``resource``: the drivers check it before any work and the scorer makes it.
"""

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from . import PROGRESS_MIN
from .bleu import BLEU_METRIC, CHRF_METRIC
from .drop import DROP
from .meteor import METEOR
from .metric import Inputs, Metric, Setting
from .rep import REP

#: Every metric by its name, in the order commands print and reports show them.
METRICS: Dict[str, Metric] = {metric.name: metric for metric in (
    BLEU_METRIC, CHRF_METRIC, METEOR, REP, DROP)}


def metric_names(names: Iterable[str]) -> List[str]:
    """``names`` in their one spelling, in the order given; ValueError for an unknown
    one or none."""
    by_upper = {name.upper(): name for name in METRICS}
    given = [name.strip() for name in names if name.strip()]
    unknown = [name for name in given if name.upper() not in by_upper]
    if unknown or not given:
        raise ValueError(f"unknown metric(s) {', '.join(unknown) or '(none)'}; choose from "
                         f"{', '.join(METRICS)}")
    return [by_upper[name.upper()] for name in given]


def beside_bleu() -> List[str]:
    """The metrics scored wherever BLEU is, BLEU first."""
    return [name for name, metric in METRICS.items() if metric.with_bleu]


def with_bleu(names: Sequence[str]) -> List[str]:
    """``names`` with the metrics scored wherever BLEU is (:func:`beside_bleu`) after
    BLEU, where BLEU is among them and they are not."""
    added = [name for name in beside_bleu() if name not in names]
    widened = []
    for name in names:
        widened += [name, *added] if name == "BLEU" else [name]
    return widened


@dataclass(frozen=True)
class Scores:
    """Each metric's result by its name, those scored, in :data:`METRICS`' order;
    ``scores.bleu``, ``scores.chrf``, ...: one by its key, None where not scored."""

    results: Dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, key: str):
        metric = next((m for m in METRICS.values() if m.key == key), None)
        if metric is None:
            raise AttributeError(f"{type(self).__name__} has no {key!r}")
        return self.results.get(metric.name)

    def _each(self):
        return ((METRICS[name], result) for name, result in self.results.items())

    def record(self) -> dict:
        """The scores as the result files record them (:meth:`Metric.record` of each),
        read back with :meth:`Metric.recorded`."""
        return {key: value for metric, result in self._each()
                for key, value in metric.record(result).items()}

    def entries(self) -> dict:
        """``sparse-attn-score``'s JSON: ``{key: {"score": float, ...}}``
        (:meth:`Metric.entry`)."""
        return {metric.key: metric.entry(result) for metric, result in self._each()}

    def sentences(self) -> dict:
        """The per-sentence columns, ``{key: [one value a sentence]}``."""
        return {metric.key: metric.sentences(result) for metric, result in self._each()
                if metric.sentences}


def record_by_split(by_split: Dict[str, Scores]) -> dict:
    """The record of one system's translations of several test splits (a comparison's
    row): the metrics scored with BLEU by split (``{"bleu": {split: score}}``), the
    others and the signatures from the first split's scores; every metric's key is there,
    None where it was not scored (a metric whose resource was missing)."""
    record = {metric.key: None for metric in METRICS.values()}
    record.update(next(iter(by_split.values())).record())
    for name in beside_bleu():
        metric = METRICS[name]
        record[metric.key] = {split: metric.value(scores.results[name])
                              for split, scores in by_split.items()}
    return record


class Scorer:
    """Scores translations with ``metrics`` (names of :data:`METRICS`) under ``setting``,
    BLEU with ``bleu_options``: each metric's resource is made once, when the metric is
    first scored, and closed by :meth:`close` (or the ``with`` block). A metric the
    inputs or the machine cannot score is a ValueError saying what it needs; with
    ``skip``, it is left out and ``skip`` told why, once."""

    def __init__(self, metrics: Sequence[str], setting: Optional[Setting] = None,
                 bleu_options: Optional[dict] = None,
                 skip: Optional[Callable[[str], None]] = None):
        asked = metric_names(metrics)
        self.metrics = [metric for name, metric in METRICS.items() if name in asked]
        self.setting, self.bleu_options, self.skip = setting or Setting(), bleu_options or {}, skip
        self._made: Dict[str, Any] = {}
        self._missing: Dict[str, str] = {}

    def check(self) -> Optional[str]:
        """One line saying why a metric's resource cannot be had here, or None; makes
        nothing, so drivers ask before any work."""
        return next(filter(None, (metric.resource.check(self.setting,
                                                        self.setting.options_of(metric))
                                  for metric in self.metrics if metric.resource)), None)

    def prepare(self) -> None:
        """Make every resource now (where a problem should show before hours of work)."""
        for metric in self.metrics:
            self._resource(metric)

    def _resource(self, metric: Metric):
        """``metric``'s resource, made on first use; None for a metric that needs none
        or, with ``skip``, one that cannot be had."""
        if metric.resource is None or metric.name in self._missing:
            return None
        if metric.name not in self._made:
            options = self.setting.options_of(metric)
            why = metric.resource.check(self.setting, options)
            try:
                if why is None:
                    self._made[metric.name] = metric.resource.make(self.setting, options)
            except (RuntimeError, OSError) as err:
                why = str(err)
            if why is not None:
                if self.skip is None:
                    raise ValueError(why)
                self._missing[metric.name] = why
                self.skip(f"{metric.name} skipped: {why}")
                return None
        return self._made[metric.name]

    def score(self, hypotheses: Sequence[str], references: Sequence[str],
              sources: Optional[Sequence[str]] = None,
              metrics: Optional[Sequence[str]] = None) -> Scores:
        """The scorer's metrics (or those of them named in ``metrics``) of ``hypotheses``
        against one reference each, for ``sources``; progress bars from
        :data:`PROGRESS_MIN` sentences."""
        asked = None if metrics is None else metric_names(metrics)
        inputs = Inputs(hypotheses, references, sources, self.bleu_options,
                        len(hypotheses) >= PROGRESS_MIN)
        results = {}
        for metric in self.metrics:
            if asked is not None and metric.name not in asked:
                continue
            why = metric.unmet(inputs)
            if why is not None:
                if self.skip is None:
                    raise ValueError(why)
                continue
            resource = self._resource(metric)
            if metric.resource is None or resource is not None:  # else skipped, said once
                results[metric.name] = metric.compute(replace(
                    inputs, resource=resource, options=self.setting.options_of(metric)))
        return Scores(results)

    def close(self) -> None:
        for metric in self.metrics:
            if metric.name in self._made:
                metric.resource.close(self._made.pop(metric.name))

    def __enter__(self) -> "Scorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def score(hypotheses: Sequence[str], references: Sequence[str],
          sources: Optional[Sequence[str]] = None, metrics: Sequence[str] = ("BLEU",), *,
          bleu_options: Optional[dict] = None, setting: Optional[Setting] = None,
          skip: Optional[Callable[[str], None]] = None) -> Scores:
    """``metrics`` of ``hypotheses`` once, with a :class:`Scorer` of their own."""
    with Scorer(metrics, setting, bleu_options, skip) as scorer:
        return scorer.score(hypotheses, references, sources)
