"""The scorers a comparison needs beyond BLEU and REP, made when a row is first scored
(a comparison whose rows all finished before makes none): METEOR in the target
language's preset (``other`` where Meteor 1.5 has none) and the DROP word aligner
trained on the corpus's training pairs."""

import logging
from functools import cached_property

from sparse_attn_plugin.evaluation import Meteor
from sparse_attn_plugin.evaluation.aligner import train_aligner
from sparse_attn_plugin.evaluation.meteor import LANGUAGE_PRESETS

from .corpus import Corpus

logger = logging.getLogger(__name__)


class Scorers:
    def __init__(self, corpus: Corpus):
        self.corpus = corpus

    @cached_property
    def aligner(self):
        logger.info("training the DROP word aligner on the training pairs")
        return train_aligner(*self.corpus.training_text())

    @cached_property
    def meteor(self):
        """A running Meteor 1.5, or None (said once) where Java or the jar is missing."""
        language = self.corpus.tgt if self.corpus.tgt in LANGUAGE_PRESETS else "other"
        try:
            return Meteor(language)
        except (RuntimeError, FileNotFoundError) as err:
            logger.warning(f"METEOR skipped: {err}")
            return None

    def close(self) -> None:
        if self.__dict__.get("meteor"):
            self.meteor.close()
