"""The scorer of a comparison: every metric of the table, under the corpus's target
language (a metric's language preset: the target's, or ``other`` where it has none), with
a word aligner trained on the corpus's training pairs when a metric first needs one (a
comparison whose rows all finished before trains none); a metric this machine cannot
score (no Java for Meteor) is left out, said once."""

import logging

from sparse_attn_plugin.evaluation.aligner import train_aligner
from sparse_attn_plugin.evaluation.metric import Setting
from sparse_attn_plugin.evaluation.scoring import METRICS, Scorer

from .corpus import Corpus

logger = logging.getLogger(__name__)


def comparison_scorer(corpus: Corpus) -> Scorer:
    def aligner():
        logger.info("training the word aligner on the training pairs")
        return train_aligner(*corpus.training_text())

    return Scorer(list(METRICS), Setting(language=corpus.tgt, aligner=aligner),
                  skip=logger.warning)
