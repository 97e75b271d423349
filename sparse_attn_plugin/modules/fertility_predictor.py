"""The fertility predictor of Malaviya et al. (2018): a BiLSTM tagger over source tokens.

For each source token it predicts a distribution over fertilities ``k = 1..K``, trained as
in the authors' code on the aligner's counts clamped to at least 1, with class weight 0.5 on
fertility 1; the bound at test time is its expectation plus a slack::

    c_j = min(K, max(1, count_j)),   L = sum_j w(c_j) (-log p(c_j | x, j)),   w(1) = 0.5
    E[f_j] = sum_{k=1..K} k p(k | x, j)

``K = max(10, largest training count)``, set by ``--task sparse_translation``. It has its own
embeddings: the translation loss never reaches it, nor it the translation model.
"""

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .source_layout import SourceLayout

#: Class weight of fertility 1 in the tagger's loss (the authors' ``custom_weight[0]``).
FERTILITY_ONE_WEIGHT = 0.5


class FertilityPredictor(nn.Module):
    """BiLSTM tagger ``p(f_j = k | x)`` for ``k = 1..max_fertility``.

    Args:
        num_embeddings, padding_idx: the source vocabulary.
        embed_dim, hidden_size, num_layers, dropout: the tagger (hidden size per
            direction; the reference used 256, 256, 2 and 0.2).
        max_fertility: ``K``, the largest class; larger counts are trained as this class.
    """

    def __init__(self, num_embeddings: int, padding_idx: int, embed_dim: int = 256,
                 hidden_size: int = 256, num_layers: int = 2, dropout: float = 0.2,
                 max_fertility: int = 10):
        super().__init__()
        self.padding_idx = padding_idx
        self.max_fertility = max_fertility
        self.embed = nn.Embedding(num_embeddings, embed_dim, padding_idx=padding_idx)
        self.lstm = nn.LSTM(embed_dim, hidden_size, num_layers, batch_first=True,
                            bidirectional=True, dropout=dropout if num_layers > 1 else 0.0)
        self.dropout = nn.Dropout(dropout)
        self.classify = nn.Linear(2 * hidden_size, max_fertility)

    def forward(self, src_tokens: Tensor) -> Tensor:
        """Logits ``(B, S, K)`` of fertilities ``1..K`` for the tokens of ``src_tokens``
        ``(B, S)`` (either padding side; padding rows are meaningless)."""
        layout = SourceLayout(src_tokens.eq(self.padding_idx))
        x = self.dropout(self.embed(layout.to_model(src_tokens)))
        packed = pack_padded_sequence(x, layout.lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        states, _ = self.lstm(packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=x.size(1))
        logits = self.classify(self.dropout(states))
        return layout.to_source(logits.transpose(1, 2)).transpose(1, 2)

    def target(self, counts: Tensor) -> Tensor:
        """The fertility the tagger learns for aligner ``counts``: ``min(K, max(1, c))``."""
        return counts.round().clamp(1, self.max_fertility)

    def expected(self, logits: Tensor) -> Tensor:
        """``E[f] = sum_{k=1..K} k p(k)`` per token, ``(B, S)``."""
        classes = torch.arange(1, logits.size(-1) + 1, device=logits.device,
                               dtype=logits.dtype)
        return torch.softmax(logits, dim=-1) @ classes

    def loss(self, logits: Tensor, fertility: Tensor, mask: Tensor):
        """Summed weighted NLL (see the module doc) and the number of correct argmax
        predictions over the tokens where ``mask`` is True; ``fertility`` holds the
        aligner's counts."""
        target = self.target(fertility)[mask].long() - 1          # class index of k is k - 1
        chosen = logits[mask].float()
        weight = chosen.new_ones(self.max_fertility)
        weight[0] = FERTILITY_ONE_WEIGHT
        loss = nn.functional.cross_entropy(chosen, target, weight=weight, reduction="sum")
        return loss, (chosen.argmax(dim=-1) == target).sum()
