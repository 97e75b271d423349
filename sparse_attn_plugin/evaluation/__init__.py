"""Translation metrics and readers; no fairseq import, usable on any text files."""

import sparse_attn_plugin.extras_check  # noqa: F401  (first: a missing extra stops it here)

from .bleu import BleuResult, ChrfResult, brevity_penalty, corpus_bleu, corpus_chrf
from .generate_output import GenerateOutput, read_generate_output
from .meteor import Meteor, MeteorResult
from .rep import RepResult, corpus_rep

#: Sentences from which scoring shows METEOR's and DROP's progress bars.
PROGRESS_MIN = 2000

__all__ = ["PROGRESS_MIN", "BleuResult", "ChrfResult", "GenerateOutput", "Meteor", "MeteorResult",
           "RepResult", "brevity_penalty", "corpus_bleu", "corpus_chrf", "corpus_rep",
           "read_generate_output"]
