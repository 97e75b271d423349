"""The fertility predictor of Malaviya et al. (2018): a BiLSTM tagger over source tokens.

For every source token ``x_j`` it predicts a distribution over fertilities
``k = 0..K`` (how many target words align to the token), trained with cross-entropy
on the aligner's counts (``sparse-attn-align fertility``). At test time the bound
is the expected fertility ``E[f_j] = sum_k k p(k | x, j)`` plus a slack. It has its
own embeddings: nothing it computes feeds the translation model's gradient, and the
translation loss never reaches it.
"""

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .source_layout import SourceLayout


class FertilityPredictor(nn.Module):
    """BiLSTM tagger ``p(f_j = k | x)`` for ``k = 0..max_fertility``.

    Args:
        num_embeddings, padding_idx: the source vocabulary.
        embed_dim, hidden_size, num_layers, dropout: the tagger (hidden size per
            direction; the reference used 256, 256, 2 and 0.2).
        max_fertility: the largest class; larger counts are trained as this class.
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
        self.classify = nn.Linear(2 * hidden_size, max_fertility + 1)

    def forward(self, src_tokens: Tensor) -> Tensor:
        """Logits ``(B, S, K + 1)`` for the tokens of ``src_tokens`` ``(B, S)`` (either padding
        side; padding rows are meaningless)."""
        layout = SourceLayout(src_tokens.eq(self.padding_idx))
        x = self.dropout(self.embed(layout.to_model(src_tokens)))
        packed = pack_padded_sequence(x, layout.lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        states, _ = self.lstm(packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=x.size(1))
        logits = self.classify(self.dropout(states))
        return layout.to_source(logits.transpose(1, 2)).transpose(1, 2)

    def expected(self, logits: Tensor) -> Tensor:
        """``E[f] = sum_k k p(k)`` per token, ``(B, S)``."""
        classes = torch.arange(logits.size(-1), device=logits.device, dtype=logits.dtype)
        return torch.softmax(logits, dim=-1) @ classes

    def loss(self, logits: Tensor, fertility: Tensor, mask: Tensor):
        """Summed cross-entropy and number of correct argmax predictions over the tokens
        where ``mask`` is True; targets are ``fertility`` clamped to ``[0, K]``."""
        target = fertility.round().long().clamp(0, self.max_fertility)[mask]
        chosen = logits[mask]
        loss = nn.functional.cross_entropy(chosen.float(), target, reduction="sum")
        return loss, (chosen.argmax(dim=-1) == target).sum()
