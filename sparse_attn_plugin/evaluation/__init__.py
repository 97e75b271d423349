"""Translation metrics and readers; no fairseq import, usable on any text files."""

from .bleu import BleuResult, corpus_bleu
from .generate_output import GenerateOutput, read_generate_output

__all__ = ["BleuResult", "GenerateOutput", "corpus_bleu", "read_generate_output"]
