"""The architectures a comparison trains, and for each the rows it compares: one kind of
attention per row, every other setting shared.

* ``tiny``: the demo's 2+2-layer, 64-dim transformer (4 heads), for the synthetic corpus;
* ``small``: 3+3 layers, 128-dim, 4 heads, 512-dim feed-forward, dropout 0.3, sized for a
  corpus of Multi30k's size on 2 CPU cores (its speed there: results/multi30k/);
* ``paper``: fairseq's ``transformer_iwslt_de_en`` (6+6 layers, 512-dim, 4 heads, 1024-dim
  feed-forward), Zhao et al.'s and Tsai et al.'s IWSLT14 De-En model, with fairseq's
  IWSLT14 recipe (as README's training loop), for a GPU;
* ``lstm``: a 1-layer BiLSTM encoder and an input-feeding LSTM decoder, 256 units and
  256-dim embeddings, dropout 0.3, Adam: Malaviya et al. (2018)'s model (OpenNMT's 2
  layers of 500 units, SGD) cut down to fit a CPU.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from sparse_attn_plugin.normalizer_registry import LSTM, TRANSFORMER, names
from sparse_attn_plugin.sites import SITES


@dataclass(frozen=True)
class Row:
    """One kind of attention: the flags that choose it (after the architecture's), the
    flags decoding needs too, its title in the table, and whether it trains on the
    corpus's fertility files (``sparse_attn_data --fertility``)."""

    train: Tuple[str, ...]
    decode: Tuple[str, ...] = ()
    title: str = ""
    needs_fertilities: bool = False


@dataclass(frozen=True)
class Architecture:
    """The flags every row shares, what makes its rows, a sentence saying what it is, and
    its model's family (:data:`~sparse_attn_plugin.normalizer_registry.MODELS`)."""

    flags: Tuple[str, ...]
    made_rows: Callable[[], Dict[str, Row]]
    summary: str
    model: str = TRANSFORMER

    @property
    def rows(self) -> Dict[str, Row]:
        """Its rows, made when asked: a transformer's follow the registry of normalisers."""
        return self.made_rows()

    @property
    def cannot_use(self) -> Tuple[str, ...]:
        """The normalisers its model cannot use (``--decode-with`` refuses them)."""
        return tuple(name for name in names() if name not in names(self.model))


_CONSTRAINED = ("--task", "sparse_translation")
_PREDICTED = ("--fertility", "predicted", "--criterion",
              "label_smoothed_cross_entropy_with_fertility")
#: The rows a transformer compares that are not ``--attn-fn NAME``: hard retrieval in
#: decoder self- and cross-attention, constrained sparsemax in cross-attention (the sink,
#: constant fertility 2, exhaustion c = 0.2) and an RBF kernel smoother.
_TRANSFORMER_OWN_ROWS = {
    "hard": Row(("--decoder-self-attn-fn", "hard", "--decoder-cross-attn-fn", "hard"),
                title="hard (decoder self + cross)"),
    "csparsemax": Row((*_CONSTRAINED, "--decoder-cross-attn-fn", "csparsemax", "--sink-token",
                       "--exhaustion-c", "0.2", "--fertility", "constant", "--fertility-value",
                       "2"), _CONSTRAINED, "csparsemax (cross, f = 2)"),
    "kernel_rbf": Row(("--arch", "kernel_transformer", "--kernel", "rbf"),
                      title="RBF kernel smoother"),
}


def transformer_rows() -> Dict[str, Row]:
    """The rows every transformer compares (the demo's): ``--attn-fn NAME`` for each
    normaliser it can use at every site, in the order of
    :mod:`sparse_attn_plugin.normalizer_registry`, each taken over by its row of
    :data:`_TRANSFORMER_OWN_ROWS` where it has one; then that table's other rows."""
    every_site = {name: Row(("--attn-fn", name)) for name in names(TRANSFORMER, SITES)}
    return {**every_site, **_TRANSFORMER_OWN_ROWS}


#: Malaviya et al. (2018)'s Table 1 rows where their coverage effect was largest:
#: softmax, sparsemax, and csparsemax with PREDICTED fertilities and c = 0.2.
LSTM_ROWS = {
    "softmax": Row(("--attn-fn", "softmax")),
    "sparsemax": Row(("--attn-fn", "sparsemax")),
    "csparsemax": Row((*_CONSTRAINED, "--attn-fn", "csparsemax", "--sink-token",
                       "--exhaustion-c", "0.2", *_PREDICTED), _CONSTRAINED,
                      "csparsemax (PREDICTED, c = 0.2)", needs_fertilities=True),
}

_ADAM = ("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)")
_TRANSFORMER = ("--arch", "sparse_transformer", "--encoder-attention-heads", "4",
                "--decoder-attention-heads", "4", "--share-decoder-input-output-embed",
                "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                "--lr-scheduler", "inverse_sqrt", *_ADAM)


def transformer_size(layers: int, dim: int, ffn: int) -> Tuple[str, ...]:
    """fairseq flags for ``layers`` encoder and decoder layers of width ``dim`` with
    ``ffn``-wide feed-forward blocks."""
    return ("--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim),
            "--encoder-ffn-embed-dim", str(ffn), "--decoder-ffn-embed-dim", str(ffn))


def _transformer(max_tokens: int, size: Tuple[int, int, int], dropout: str,
                 weight_decay: Optional[str], lr: str, warmup: int) -> Tuple[str, ...]:
    """The flags of a :data:`_TRANSFORMER` of ``size`` (layers, dim, ffn) trained with
    ``max_tokens`` a batch, ``dropout``, ``weight_decay`` (None: fairseq's 0) and Adam at
    ``lr`` after ``warmup`` warm-up updates."""
    return (*_TRANSFORMER, "--max-tokens", str(max_tokens), *transformer_size(*size),
            "--dropout", dropout, *(("--weight-decay", weight_decay) if weight_decay else ()),
            "--lr", lr, "--warmup-updates", str(warmup))


ARCHITECTURES = {
    "tiny": Architecture(
        _transformer(1024, (2, 64, 256), "0.1", None, "3e-3", 100), transformer_rows,
        "a 2+2-layer transformer, 64-dim, 4 heads, Adam at 3e-3 (inverse square root "
        "after 100 warm-up updates), label smoothing 0.1, batches of 1024 tokens"),
    "small": Architecture(
        _transformer(4096, (3, 128, 512), "0.3", "0.0001", "1e-3", 400), transformer_rows,
        "a 3+3-layer transformer, 128-dim, 4 heads, 512-dim feed-forward, dropout 0.3, "
        "Adam at 1e-3 (inverse square root after 400 warm-up updates), weight decay "
        "1e-4, label smoothing 0.1, batches of 4096 tokens"),
    "paper": Architecture(
        _transformer(4096, (6, 512, 1024), "0.3", "0.0001", "5e-4", 4000), transformer_rows,
        "fairseq's transformer_iwslt_de_en (6+6 layers, 512-dim, 4 heads, 1024-dim "
        "feed-forward) with fairseq's IWSLT14 De-En recipe: dropout 0.3, Adam at 5e-4 "
        "(inverse square root after 4000 warm-up updates), weight decay 1e-4, label "
        "smoothing 0.1, batches of 4096 tokens"),
    "lstm": Architecture(
        ("--arch", "sparse_lstm", "--encoder-embed-dim", "256", "--encoder-hidden-size", "256",
         "--dropout", "0.3", "--fertility-predictor-embed-dim", "64",
         "--fertility-predictor-hidden-size", "64", "--fertility-predictor-layers", "1",
         *_ADAM, "--lr", "1e-3", "--clip-norm", "5", "--max-tokens", "4096",
         "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0"),
        lambda: LSTM_ROWS,
        "a 1-layer BiLSTM encoder and LSTM decoder (input feeding, bilinear attention), "
        "256 units, 256-dim embeddings, dropout 0.3, Adam at 1e-3, gradient norm clipped "
        "at 5, no label smoothing, batches of 4096 tokens (Malaviya et al.: 2 layers of "
        "500 units, SGD at 1.0 with batches of 64 sentences for 13 epochs)", LSTM),
}


def title(architecture: Architecture, name: str) -> str:
    return architecture.rows[name].title or name
