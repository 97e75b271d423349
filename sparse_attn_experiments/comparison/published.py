"""Published figures on the corpora a comparison runs on, shown beside our rows (never
mixed into them): each with the paper, its table and how its setting differs; a published
DROP with the symmetrisation it was measured with, which is not ours."""

from typing import Dict, List, Tuple

from sparse_attn_plugin.evaluation.drop import DROP_SYMMETRIZATION, PUBLISHED_SYMMETRIZATION
from sparse_attn_plugin.markdown import markdown_table

#: The column of a published DROP: Malaviya et al. (2018) symmetrised with
#: grow-diag-final-and.
PUBLISHED_DROP = f"DROP ({PUBLISHED_SYMMETRIZATION})"
#: What a table with :data:`PUBLISHED_DROP` adds to its note.
DROP_NOTE = (
    f" Their DROP symmetrises the word alignments with {PUBLISHED_SYMMETRIZATION}; ours "
    f"(`DROP ({DROP_SYMMETRIZATION})` above) with {DROP_SYMMETRIZATION}, DROP's default "
    "here, which finds drops that grow-diag-final-and hides (on the synthetic corpus's gold "
    "alignments: `results/evaluation/drop_calibration.md`): the two DROP columns are "
    "different measurements, not one scale.")

#: corpus name (``PREPARED.json``'s ``settings.corpus``) -> (header, rows, note).
PUBLISHED: Dict[str, Tuple[List[str], List[List[str]], str]] = {
    "multi30k_de_en": (
        ["source", "model (text-only, German->English)", "BLEU test_2016_flickr"],
        [["Lample, Conneau, Denoyer and Ranzato (2018), Unsupervised Machine Translation "
          "Using Monolingual Corpora Only, ICLR, Table 2, row \"Supervised\"",
          "3+3-layer (Bi)LSTM with attention, 300 units, words, greedy decoding", "38.38"],
         ["bentrevett/pytorch-seq2seq (a tutorial, not a paper), commit 7faa64a, "
          "notebook 6", "3+3-layer transformer, 256-dim, 8 heads, 10 epochs, greedy", "36.52"],
         ["same, notebook 4", "BiGRU encoder, GRU decoder with Bahdanau attention, greedy",
          "28.11"]],
        "None of them reports sparse, constrained, hard or kernel attention on Multi30k: we "
        "found no published figure for those. All three score lowercased tokenised text "
        "(Lample et al.: their own preprocessing; the tutorial: spaCy tokens and "
        "torchtext's BLEU), close to our tokenised lowercased BLEU but not the same "
        "tokenisation, and decode greedily where we use beam 5."),
    "kftt30k_ja_en": (
        ["attention (Malaviya et al. 2018, Table 1, ja-en)", "BLEU", "METEOR", "REP",
         PUBLISHED_DROP],
        [["softmax", "20.36", "23.83", "13.48", "23.30"],
         ["sparsemax", "21.28", "24.25", "13.09", "22.40"],
         ["csparsemax (PREDICTED, c = 0.2)", "21.31", "24.51", "11.40", "21.59"]],
        "Their setting: the full KFTT training set (about 330k pairs), joint BPE with 32k "
        "merges, OpenNMT-py's 2-layer 500-unit BiLSTM model with SGD for 13 epochs, the "
        "KFTT test set. Ours: the first 30k training pairs of at most 30 words "
        "(tarowatanabe/cicada's sample), its `tune` set (kyoto-tune) as the test set, "
        "and the CPU-sized model above."),
}


def published_rows(corpus: str) -> str:
    """The published table for ``corpus`` with its note (and :data:`DROP_NOTE` where it
    has a DROP column), or an empty string."""
    if corpus not in PUBLISHED:
        return ""
    header, rows, note = PUBLISHED[corpus]
    return (markdown_table(header, rows) + "\n" + note
            + (DROP_NOTE if PUBLISHED_DROP in header else "") + "\n")
