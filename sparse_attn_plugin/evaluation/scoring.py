"""The metrics, each once (:data:`METRICS`): its name, how it is computed, which way is
better, the fields it fills and its signature; and the one record of a translation's
scores (:class:`Scores`), which ``sparse-attn-score``, the comparisons, the
reproductions and the results index all write and read through this module.

Names are spelt as the papers' tables and ``configs/*.json`` spell them (``BLEU``,
``chrF``, ``METEOR``, ``REP``, ``DROP``); :func:`metric_names` reads any case, as commands
accept ``--metrics bleu,chrf,rep``. Records written to JSON keep lower-case field names
(``bleu``, ``bleu_signature``, ``chrf``, ``drop_by_symmetrization``), like every other
field they hold. A metric added to :data:`METRICS` is scored by ``sparse-attn-score
--metrics``, by every comparison and by the reproductions that name it, and shown in
their reports; one that goes with BLEU (``with_bleu``, as chrF) wherever BLEU is.
"""

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from . import PROGRESS_MIN
from .bleu import corpus_bleu, corpus_chrf
from .drop import DROP_SYMMETRIZATION, DropResult, corpus_drop
from .meteor import Meteor
from .rep import corpus_rep


@dataclass(frozen=True)
class Inputs:
    """What the metrics read: the hypotheses, one reference each, the sources (or None),
    BLEU's options, a running Meteor (or None), DROP's word aligner (or None) and
    symmetrisations, and whether to show progress bars."""

    hypotheses: Sequence[str]
    references: Sequence[str]
    sources: Optional[Sequence[str]]
    bleu_options: dict
    meteor: Optional[Meteor]
    aligner: Any
    symmetrizations: Sequence[str]
    progress: bool


def _nothing(result) -> dict:
    return {}


def _always(inputs: Inputs) -> Optional[str]:
    return None


@dataclass(frozen=True)
class Metric:
    """One metric. ``name``: as papers, configs and ``--metrics`` spell it; ``key``: the
    field its score fills in records and in ``sparse-attn-score``'s JSON (its signature,
    ``KEY_signature``); ``compute``: its result from the :class:`Inputs`; ``value``: the
    score in that result; ``signature``: sacreBLEU's signature, where it has one;
    ``details`` and ``fields``: what else the JSON's entry and the record hold;
    ``sentences``: the per-sentence column; ``unmet``: why the inputs cannot score it
    (None: they can); ``with_bleu``: scored and shown wherever BLEU is (every test split
    of a comparison, every reproduction)."""

    name: str
    key: str
    higher_is_better: bool
    compute: Callable[[Inputs], Any]
    value: Callable[[Any], float] = attrgetter("score")
    signature: Optional[Callable[[Any], str]] = None
    details: Callable[[Any], dict] = _nothing
    fields: Callable[[Any], dict] = _nothing
    sentences: Optional[Callable[[Any], list]] = None
    unmet: Callable[[Inputs], Optional[str]] = _always
    with_bleu: bool = False

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    @property
    def signature_key(self) -> str:
        return f"{self.key}_signature"

    def record(self, result) -> dict:
        """The fields ``result`` fills in a record: its score, signature and own fields."""
        record = {self.key: self.value(result)}
        if self.signature:
            record[self.signature_key] = self.signature(result)
        return {**record, **self.fields(result)}

    def entry(self, result) -> dict:
        """``result`` in ``sparse-attn-score``'s JSON: its score, signature and details."""
        entry = {"score": self.value(result)}
        if self.signature:
            entry["signature"] = self.signature(result)
        return {**entry, **self.details(result)}

    def recorded(self, record: dict, split: Optional[str] = None) -> Optional[float]:
        """Its score in ``record`` (on test ``split`` in a record by split,
        :func:`record_by_split`); None where it was not scored or the record was
        written before it was."""
        value = record.get(self.key)
        return value.get(split) if split is not None and value is not None else value


def _bleu(inputs: Inputs):
    return corpus_bleu(inputs.hypotheses, inputs.references, **inputs.bleu_options)


def _chrf(inputs: Inputs):
    """chrF, case-insensitive where BLEU is."""
    return corpus_chrf(inputs.hypotheses, inputs.references,
                       inputs.bleu_options.get("lowercase", False))


def _meteor(inputs: Inputs):
    return inputs.meteor.score(inputs.hypotheses, inputs.references, progress=inputs.progress)


def _rep(inputs: Inputs):
    return corpus_rep(inputs.hypotheses, inputs.references)


def _drop(inputs: Inputs) -> Dict[str, DropResult]:
    """DROP under each symmetrisation asked for; the first is the translation's DROP."""
    return {name: corpus_drop(inputs.aligner, inputs.sources, inputs.hypotheses,
                              inputs.references, symmetrize=name, progress=inputs.progress)
            for name in inputs.symmetrizations}


def _first(by_symmetrization: Dict[str, DropResult]) -> DropResult:
    return next(iter(by_symmetrization.values()))


def _drop_details(by_symmetrization) -> dict:
    first = _first(by_symmetrization)
    return {"symmetrize": first.symmetrize, "aligned_source_words": first.aligned}


def _drop_fields(by_symmetrization) -> dict:
    return {"drop_by_symmetrization": {name: result.score
                                       for name, result in by_symmetrization.items()}}


def _needs_meteor(inputs: Inputs) -> Optional[str]:
    return "METEOR needs a running Meteor" if inputs.meteor is None else None


def _needs_aligner(inputs: Inputs) -> Optional[str]:
    if inputs.aligner is None or inputs.sources is None or not inputs.symmetrizations:
        return "DROP needs the sources, a word aligner and a symmetrisation"
    return None


#: Every metric by its name, in the order commands print and reports show them.
METRICS: Dict[str, Metric] = {metric.name: metric for metric in (
    Metric("BLEU", "bleu", True, _bleu, signature=attrgetter("signature"),
           details=lambda result: {"details": result.details}, with_bleu=True),
    Metric("chrF", "chrf", True, _chrf, signature=attrgetter("signature"), with_bleu=True),
    Metric("METEOR", "meteor", True, _meteor, value=attrgetter("corpus"),
           sentences=attrgetter("sentences"), unmet=_needs_meteor),
    Metric("REP", "rep", False, _rep, sentences=attrgetter("sentences"),
           details=lambda result: {"reference_tokens": result.reference_tokens}),
    Metric("DROP", "drop", False, _drop, value=lambda by: _first(by).score,
           details=_drop_details, fields=_drop_fields, unmet=_needs_aligner,
           sentences=lambda by: [f"{dropped}/{aligned}"
                                 for dropped, aligned in _first(by).sentences]),
)}


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
    ``scores.bleu``, ``scores.chrf``, ...: one by its key, None where not scored. DROP's
    is by symmetrisation, the first one being the translation's DROP."""

    results: Dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, key: str):
        metric = next((m for m in METRICS.values() if m.key == key), None)
        if metric is None:
            raise AttributeError(f"{type(self).__name__} has no {key!r}")
        return self.results.get(metric.name)

    @property
    def drop_by_symmetrization(self) -> Dict[str, DropResult]:
        return self.results.get("DROP", {})

    @property
    def drop(self) -> Optional[DropResult]:
        return next(iter(self.drop_by_symmetrization.values()), None)

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
    None where it was not scored (METEOR without Java)."""
    record = {metric.key: None for metric in METRICS.values()}
    record.update(next(iter(by_split.values())).record())
    for name in beside_bleu():
        metric = METRICS[name]
        record[metric.key] = {split: metric.value(scores.results[name])
                              for split, scores in by_split.items()}
    return record


def score(hypotheses: Sequence[str], references: Sequence[str],
          sources: Optional[Sequence[str]] = None, metrics: Sequence[str] = ("BLEU",), *,
          bleu_options: Optional[dict] = None, meteor: Optional[Meteor] = None,
          aligner=None, symmetrizations: Sequence[str] = (DROP_SYMMETRIZATION,),
          where_possible: bool = False) -> Scores:
    """``metrics`` (names of :data:`METRICS`) of ``hypotheses`` against one reference
    each. BLEU: sacreBLEU with ``bleu_options`` (:func:`corpus_bleu`'s); chrF: sacreBLEU's
    (:func:`corpus_chrf`), case-insensitive where BLEU is; METEOR: with the running
    ``meteor``; DROP: of the ``sources`` with the word ``aligner``, under each of
    ``symmetrizations``. Progress bars from :data:`PROGRESS_MIN` sentences. A metric the
    inputs cannot score is a ValueError saying what it needs, or left out
    ``where_possible``."""
    asked = metric_names(metrics)
    inputs = Inputs(hypotheses, references, sources, bleu_options or {}, meteor, aligner,
                    symmetrizations, len(hypotheses) >= PROGRESS_MIN)
    wanted = [metric for name, metric in METRICS.items() if name in asked]
    unmet = {metric.name: metric.unmet(inputs) for metric in wanted}
    problems = [why for why in unmet.values() if why]
    if problems and not where_possible:
        raise ValueError(problems[0])
    return Scores({metric.name: metric.compute(inputs) for metric in wanted
                   if not unmet[metric.name]})
