"""Corpus BLEU, and chrF beside it, through sacrebleu, always with their signatures.

The papers report tokenised BLEU: sacrebleu with ``tokenize="none"`` on
Moses-tokenised text (what ``multi-bleu.perl`` computes), case-insensitive for
IWSLT (``lowercase=True``); WMT14 En-De results also split hyphenated compounds
(``split_compounds=True``). ``tokenize="13a"`` on detokenised text is the
comparable-across-papers sacreBLEU setting. chrF (:func:`corpus_chrf`) reads characters,
so it needs no tokeniser and scores tokenised and detokenised text alike.
"""

import math
import re
from dataclasses import dataclass
from operator import attrgetter
from typing import List, Sequence, Tuple

from sacrebleu.metrics import BLEU, CHRF

from .metric import Metric


@dataclass(frozen=True)
class BleuResult:
    score: float
    signature: str
    details: str  # precisions, brevity penalty and lengths, as sacrebleu prints them
    length_ratio: float  # hypothesis tokens / reference tokens (brevity penalty below 1)


_COMPOUND = re.compile(r"(\S)-(\S)")


def split_hyphenated_compounds(line: str) -> str:
    r"""``Rock-Musik`` -> ``Rock ##AT##-##AT## Musik``: the compound splitting applied to
    both sides before tokenised BLEU on WMT14 En-De (Vaswani et al. 2017 and after), so
    that a hyphenated compound counts as several matches. Like the usual
    ``s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g``, matches do not overlap: ``a-b-c`` splits
    at its first hyphen only."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def bleu_metric(tokenize: str = "none", lowercase: bool = False,
                effective_order: bool = False) -> BLEU:
    """sacrebleu's corpus BLEU with these options (``effective_order`` only for
    sentence-level statistics, which it leaves unchanged)."""
    # Tokenised text is what tok:none is for: no "forgot to detokenize" warning then.
    return BLEU(tokenize=tokenize, lowercase=lowercase, force=tokenize == "none",
                effective_order=effective_order)


def checked_pairs(hypotheses: Sequence[str], references: Sequence[str],
                  split_compounds: bool = False) -> Tuple[List[str], List[str]]:
    """The hypotheses and references as BLEU reads them (compounds split where asked);
    ValueError where their counts differ or there are none."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("no sentences to score")
    if split_compounds:
        return ([split_hyphenated_compounds(h) for h in hypotheses],
                [split_hyphenated_compounds(r) for r in references])
    return list(hypotheses), list(references)


def brevity_penalty(length_ratio: float) -> float:
    """BLEU's brevity penalty for hypothesis/reference length ``r`` (Papineni et al.
    2002): ``exp(1 - 1/r)`` for ``r < 1``, 1 otherwise (0 for no hypothesis tokens).
    BLEU divided by it is the geometric mean of the n-gram precisions, what a
    translation scores apart from its length."""
    if length_ratio <= 0:
        return 0.0
    return math.exp(1 - 1 / length_ratio) if length_ratio < 1 else 1.0


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "none",
                lowercase: bool = False, split_compounds: bool = False) -> BleuResult:
    """BLEU of ``hypotheses`` against one reference each."""
    hypotheses, references = checked_pairs(hypotheses, references, split_compounds)
    metric = bleu_metric(tokenize, lowercase)
    result = metric.corpus_score(hypotheses, [references])
    signature = str(metric.get_signature()) + ("|compounds:split" if split_compounds else "")
    return BleuResult(result.score, signature, str(result),
                      result.sys_len / result.ref_len if result.ref_len else 0.0)


@dataclass(frozen=True)
class ChrfResult:
    score: float
    signature: str


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str],
                lowercase: bool = False) -> ChrfResult:
    """chrF (Popovic 2015) of ``hypotheses`` against one reference each, as sacreBLEU's
    ``CHRF()`` computes it with its defaults: whitespace removed, the character n-gram
    counts of orders n = 1..6 summed over the corpus; per order the precision P_n
    (matches / hypothesis n-grams) and recall R_n (matches / reference n-grams), each
    averaged over the orders both sides have; chrF = 100 (1 + b^2) P R / (b^2 P + R) with
    b = 2 (recall weighs twice as much as precision). ``lowercase`` for case-insensitive
    scores, as BLEU's."""
    hypotheses, references = checked_pairs(hypotheses, references)
    metric = CHRF(lowercase=lowercase)
    result = metric.corpus_score(hypotheses, [references])
    return ChrfResult(result.score, str(metric.get_signature()))


# -- the metrics' entries (:data:`.scoring.METRICS`) ------------------------------------------
BLEU_METRIC = Metric(
    "BLEU", "bleu", True,
    lambda inputs: corpus_bleu(inputs.hypotheses, inputs.references, **inputs.bleu_options),
    signature=attrgetter("signature"), details=lambda result: {"details": result.details},
    with_bleu=True)
#: chrF, case-insensitive where BLEU is.
CHRF_METRIC = Metric(
    "chrF", "chrf", True,
    lambda inputs: corpus_chrf(inputs.hypotheses, inputs.references,
                               inputs.bleu_options.get("lowercase", False)),
    signature=attrgetter("signature"), with_bleu=True)
