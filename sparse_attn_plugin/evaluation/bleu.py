"""Corpus BLEU through sacrebleu, always with its signature.

The papers report tokenised BLEU: sacrebleu with ``tokenize="none"`` on
Moses-tokenised text (what ``multi-bleu.perl`` computes), case-insensitive for
IWSLT (``lowercase=True``). ``tokenize="13a"`` on detokenised text is the
comparable-across-papers sacreBLEU setting.
"""

from dataclasses import dataclass
from typing import Sequence

from sacrebleu.metrics import BLEU


@dataclass(frozen=True)
class BleuResult:
    score: float
    signature: str
    details: str  # precisions, brevity penalty and lengths, as sacrebleu prints them


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "none",
                lowercase: bool = False) -> BleuResult:
    """BLEU of ``hypotheses`` against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("no sentences to score")
    metric = BLEU(tokenize=tokenize, lowercase=lowercase)
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return BleuResult(result.score, str(metric.get_signature()), str(result))
