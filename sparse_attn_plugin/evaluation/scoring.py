"""The metrics by their one set of names: BLEU, chrF, METEOR, REP and DROP of one
translation, scored the same way by ``sparse-attn-score``, the comparisons and the
reproductions.

Names are spelt as the papers' tables and ``configs/*.json`` spell them (``BLEU``,
``chrF``, ``METEOR``, ``REP``, ``DROP``); :func:`metric_names` reads any case, as commands
accept ``--metrics bleu,chrf,rep``. Records written to JSON keep lower-case field names
(``bleu``, ``bleu_signature``, ``chrf``, ``drop_by_symmetrization``), like every other
field they hold.
"""

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence

from . import PROGRESS_MIN
from .bleu import BleuResult, ChrfResult, corpus_bleu, corpus_chrf
from .drop import DROP_SYMMETRIZATION, DropResult, corpus_drop
from .meteor import Meteor, MeteorResult
from .rep import RepResult, corpus_rep

METRICS = ("BLEU", "chrF", "METEOR", "REP", "DROP")
_BY_KEY = {name.upper(): name for name in METRICS}


def metric_names(names: Iterable[str]) -> List[str]:
    """``names`` in their one spelling, in the order given; ValueError for an unknown
    one or none."""
    given = [name.strip() for name in names if name.strip()]
    unknown = [name for name in given if name.upper() not in _BY_KEY]
    if unknown or not given:
        raise ValueError(f"unknown metric(s) {', '.join(unknown) or '(none)'}; choose from "
                         f"{', '.join(METRICS)}")
    return [_BY_KEY[name.upper()] for name in given]


@dataclass(frozen=True)
class Scores:
    """The metrics asked for (None where not); DROP under each symmetrisation asked for,
    the first one being the translation's DROP."""

    bleu: Optional[BleuResult] = None
    chrf: Optional[ChrfResult] = None
    meteor: Optional[MeteorResult] = None
    rep: Optional[RepResult] = None
    drop_by_symmetrization: Dict[str, DropResult] = field(default_factory=dict)

    @property
    def drop(self) -> Optional[DropResult]:
        return next(iter(self.drop_by_symmetrization.values()), None)

    def record(self) -> dict:
        """The scores as the result files record them: numbers, BLEU's and chrF's
        signatures, and DROP by symmetrisation besides the first one's."""
        record = {}
        if self.bleu:
            record.update(bleu=self.bleu.score, bleu_signature=self.bleu.signature)
        if self.chrf:
            record.update(chrf=self.chrf.score, chrf_signature=self.chrf.signature)
        if self.meteor:
            record["meteor"] = self.meteor.corpus
        if self.rep:
            record["rep"] = self.rep.score
        if self.drop:
            record["drop"] = self.drop.score
            record["drop_by_symmetrization"] = {
                name: result.score for name, result in self.drop_by_symmetrization.items()}
        return record


def score(hypotheses: Sequence[str], references: Sequence[str],
          sources: Optional[Sequence[str]] = None, metrics: Sequence[str] = ("BLEU",), *,
          bleu_options: Optional[dict] = None, meteor: Optional[Meteor] = None,
          aligner=None, symmetrizations: Sequence[str] = (DROP_SYMMETRIZATION,)
          ) -> Scores:
    """``metrics`` (names of :data:`METRICS`) of ``hypotheses`` against one reference
    each. BLEU: sacreBLEU with ``bleu_options`` (:func:`corpus_bleu`'s); chrF: sacreBLEU's
    (:func:`corpus_chrf`), case-insensitive where BLEU is; METEOR: with the running
    ``meteor``; DROP: of the ``sources`` with the word ``aligner``, under each of
    ``symmetrizations``. Progress bars from :data:`PROGRESS_MIN` sentences."""
    metrics = metric_names(metrics)
    if "METEOR" in metrics and meteor is None:
        raise ValueError("METEOR needs a running Meteor")
    if "DROP" in metrics and (aligner is None or sources is None or not symmetrizations):
        raise ValueError("DROP needs the sources, a word aligner and a symmetrisation")
    progress = len(hypotheses) >= PROGRESS_MIN
    bleu_options = bleu_options or {}
    return Scores(
        bleu=corpus_bleu(hypotheses, references, **bleu_options)
        if "BLEU" in metrics else None,
        chrf=corpus_chrf(hypotheses, references, bleu_options.get("lowercase", False))
        if "chrF" in metrics else None,
        meteor=meteor.score(hypotheses, references, progress=progress)
        if "METEOR" in metrics else None,
        rep=corpus_rep(hypotheses, references) if "REP" in metrics else None,
        drop_by_symmetrization={
            name: corpus_drop(aligner, sources, hypotheses, references, symmetrize=name,
                              progress=progress)
            for name in symmetrizations} if "DROP" in metrics else {})
