"""fairseq multi-head attention whose softmax is replaced by any normaliser.

fairseq's fast path (``F.multi_head_attention_forward``, taken without incremental state
and static keys) has softmax built in, so this module forces fairseq's own path
(``skip_embed_dim_check``), asks it for the masked scores (``before_softmax=True``) and
finishes with the normaliser's ``attend`` (hard retrieval gathers rows), in fairseq's own
``(B*H, T, S)`` layout, so that a decoding step dispatches no more operations than fairseq's::

    out = W_o concat_h( normalise(q_h k_h^T / sqrt(d), masks) v_h )
"""

from typing import Dict, Optional, Tuple

from fairseq.modules import MultiheadAttention
from torch import Tensor

from ..normalizers import Normalizer


class SparseMultiheadAttention(MultiheadAttention):
    """:class:`MultiheadAttention` with a pluggable normaliser.

    Args:
        normalizer: maps scores ``(B, H, T, S)`` (``-inf`` where masked) to weights.
        *args, **kwargs: as for fairseq's ``MultiheadAttention``.
    """

    #: Whether :meth:`attend` needs scores ``(B, H, T, S)`` (not fairseq's ``(B*H, T, S)``).
    needs_head_dim = False

    def __init__(self, *args, normalizer: Normalizer, **kwargs):
        super().__init__(*args, **kwargs)
        self.normalizer = normalizer
        # Disables the fused fast path, which would bypass the normaliser.
        self.skip_embed_dim_check = True

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        scores, v = super().forward(
            query, key, value,
            key_padding_mask=key_padding_mask,
            incremental_state=incremental_state,
            static_kv=static_kv,
            attn_mask=attn_mask,
            before_softmax=True,
        )
        if before_softmax:
            return scores, v
        tgt_len, bsz, embed_dim = query.shape
        heads, src_len = self.num_heads, scores.size(-1)
        # fairseq hides keys by padding, and every sentence it batches has a token that is
        # not padding (its end of sentence); a decoding step's query also sees its own key.
        # So, outside training and with no attention mask, no row of scores is empty.
        step = not self.training and attn_mask is None
        # fairseq's (B*H, ...) layout, unless observers of the weights (analysis) want heads
        flat = not (self.needs_head_dim or self.normalizer._forward_hooks)
        if flat and v.size(0) == scores.size(0):
            attn, weights = self.attend(scores, v, need_weights or need_head_weights,
                                        incremental_state, step)
            attn = attn.transpose(0, 1).reshape(tgt_len, bsz, embed_dim)
        else:
            attn, weights = self.attend(scores.view(bsz, heads, tgt_len, src_len),
                                        v.view(-1, heads, src_len, self.head_dim),
                                        need_weights or need_head_weights, incremental_state,
                                        step)
            attn = attn.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        attn = self.out_proj(attn)
        if weights is None:
            return attn, None
        head_weights = weights.view(bsz, heads, tgt_len, src_len).transpose(0, 1)  # (H, B, T, S)
        return attn, head_weights if need_head_weights else head_weights.mean(dim=0)

    def attend(self, scores: Tensor, values: Tensor, need_weights: bool, incremental_state,
               rows_nonempty: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """Outputs ``(..., T, d)`` and weights for scores ``(..., T, S)`` and values (see
        :meth:`Normalizer.attend`): fairseq's ``(B*H, T, S)`` and ``(B*H, S, d)``, or ``(B, H,
        T, S)`` and ``(B_kv, H, S, d)`` where beam hypotheses share their source's values or
        :attr:`needs_head_dim`."""
        return self.normalizer.attend(scores, values, self.dropout_module, need_weights,
                                      rows_nonempty)
