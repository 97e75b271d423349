"""fairseq multi-head attention whose softmax is replaced by any normaliser.

fairseq's fast path (``F.multi_head_attention_forward``, taken without incremental state
and static keys) has softmax built in, so this module forces fairseq's own path
(``skip_embed_dim_check``), asks it for the masked scores (``before_softmax=True``) and
finishes with the normaliser's ``attend`` (hard retrieval gathers rows)::

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
        src_len = scores.size(-1)
        attn, weights = self.attend(
            scores.view(bsz, self.num_heads, tgt_len, src_len),
            v.view(-1, self.num_heads, src_len, self.head_dim),
            need_weights or need_head_weights,
            incremental_state,
        )
        attn = self.out_proj(attn.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim))
        if weights is None:
            return attn, None
        head_weights = weights.transpose(0, 1)  # (H, B, T, S), as fairseq returns
        return attn, head_weights if need_head_weights else head_weights.mean(dim=0)

    def attend(self, scores: Tensor, values: Tensor, need_weights: bool,
               incremental_state) -> Tuple[Tensor, Optional[Tensor]]:
        """Outputs ``(B, H, T, d)`` and weights for scores ``(B, H, T, S)`` and values
        ``(B_kv, H, S, d)`` (see :meth:`Normalizer.attend`)."""
        return self.normalizer.attend(scores, values, self.dropout_module, need_weights)
