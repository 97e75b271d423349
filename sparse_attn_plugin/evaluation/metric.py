"""What a metric is (:class:`Metric`), what it reads (:class:`Inputs`), what it needs
beyond the texts (:class:`Resource`: a running Meteor, a word aligner) and what a driver
tells it (:class:`Setting`). Each metric's module defines its entry; the table of them all
is :data:`.scoring.METRICS`, and :class:`.scoring.Scorer` is what commands score with.
"""

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple


@dataclass(frozen=True)
class Setting:
    """What a driver knows that a metric may need: the target ``language`` (a language
    code, or None), ``aligner`` (None, or what returns the corpus's word aligner, called
    only when a metric first needs it) and each metric's ``options`` by its key (a
    reproduction config's section of that name, ``sparse-attn-score``'s flags)."""

    language: Optional[str] = None
    aligner: Optional[Callable[[], Any]] = None
    options: Mapping[str, dict] = field(default_factory=dict)

    def options_of(self, metric: "Metric") -> dict:
        """``metric``'s options: its defaults, then the setting's."""
        return {**metric.defaults, **self.options.get(metric.key, {})}


def _none(*_) -> None:
    return None


@dataclass(frozen=True)
class Resource:
    """What a metric reads beyond the texts, made once per scorer and only when the
    metric is first scored. ``make(setting, options)``: the resource; ``check(setting,
    options)``: one line saying why it cannot be had (Java missing, no aligner), or None,
    cheap enough to run before any work; ``close(resource)``: what ends it."""

    make: Callable[[Setting, dict], Any]
    check: Callable[[Setting, dict], Optional[str]] = _none
    close: Callable[[Any], None] = _none


@dataclass(frozen=True)
class Inputs:
    """What a metric's ``compute`` reads: the hypotheses, one reference each, the
    sources (or None), BLEU's options, whether to show progress bars, the metric's
    resource (None for one that needs none) and its options."""

    hypotheses: Sequence[str]
    references: Sequence[str]
    sources: Optional[Sequence[str]]
    bleu_options: dict
    progress: bool
    resource: Any = None
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    """What a reproduction report tells a metric's ``note``: its ``options`` (the
    run's), ``by_corpus`` (a function of a function of a corpus's options giving their
    text, said once where the run's corpora agree) and the ``aligners`` the run scored
    with (their training pairs, with the corpus where there are several)."""

    options: dict
    by_corpus: Callable[[Callable[[dict], str]], str]
    aligners: List[str]


def _no_columns(options: dict) -> List[Tuple[str, Callable[[dict], float]]]:
    return []


@dataclass(frozen=True)
class Metric:
    """One metric. ``name``: as papers, configs and ``--metrics`` spell it; ``key``: the
    field its score fills in records and in ``sparse-attn-score``'s JSON (its signature,
    ``KEY_signature``), and the name of its options; ``compute``: its result from the
    :class:`Inputs`; ``value``: the score in that result; ``signature``: sacreBLEU's
    signature, where it has one; ``details`` and ``fields``: what else the JSON's entry
    and the record hold; ``sentences``: the per-sentence column; ``unmet``: why the
    inputs cannot score it (None: they can); ``with_bleu``: scored and shown wherever
    BLEU is (every test split of a comparison, every reproduction).

    What it needs and what reports say of it: ``resource`` (None: the texts suffice);
    ``needs_sources``; ``defaults`` (its options'); ``check_options(options, where)``
    (why a config's section ``where`` is wrong, or None) and ``required`` (what a config
    must give, said where it does not, or None); ``arguments`` (``sparse-attn-score``'s
    flags that set its options: ``(flag, option, argparse keywords)``); ``summary``
    (what it measures, in a comparison report's sentence), ``header(options)`` (its
    column), ``note(Report)`` (a reproduction report's note),
    ``columns(options)`` (more columns of a reproduction table: ``(title, value of a
    decoding's record)``) and ``indexed`` (in the results index's summary of a
    comparison)."""

    name: str
    key: str
    higher_is_better: bool
    compute: Callable[[Inputs], Any]
    value: Callable[[Any], float] = attrgetter("score")
    signature: Optional[Callable[[Any], str]] = None
    details: Callable[[Any], dict] = lambda result: {}
    fields: Callable[[Any], dict] = lambda result: {}
    sentences: Optional[Callable[[Any], list]] = None
    unmet: Callable[[Inputs], Optional[str]] = _none
    with_bleu: bool = False
    resource: Optional[Resource] = None
    needs_sources: bool = False
    defaults: Mapping[str, Any] = field(default_factory=dict)
    check_options: Callable[[dict, str], Optional[str]] = _none
    required: Optional[str] = None
    arguments: Tuple[Tuple[str, str, dict], ...] = ()
    summary: str = ""
    header: Optional[Callable[[dict], str]] = None
    note: Callable[[Report], Optional[str]] = _none
    columns: Callable[[dict], List[Tuple[str, Callable[[dict], float]]]] = _no_columns
    indexed: bool = True

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    @property
    def signature_key(self) -> str:
        return f"{self.key}_signature"

    def column(self, options: Optional[dict] = None) -> str:
        """Its column's header under ``options`` (its defaults where None)."""
        return self.header({**self.defaults, **(options or {})}) if self.header else self.name

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
        :func:`.scoring.record_by_split`); None where it was not scored or the record was
        written before it was."""
        value = record.get(self.key)
        return value.get(split) if split is not None and value is not None else value
