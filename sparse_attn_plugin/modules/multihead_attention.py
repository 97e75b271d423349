"""fairseq multi-head attention whose softmax is replaced by any normaliser::

    out = W_o concat_h( normalise(q_h k_h^T / sqrt(d), masks) v_h )

Where the normaliser has a fused kernel (:meth:`Normalizer.fused_kind`) and the site's
``--attn-impl`` takes it (``auto`` on CUDA, ``triton``), the attention is one kernel
(:func:`.fused_attention.fused_attention`): this module projects, keeps fairseq's cache
(``prev_key``, ``prev_value``, ``prev_key_padding_mask``) and calls it, unless the caller
wants the weights or scores, attention dropout is on, or a row has more keys than the
kernels hold. Otherwise fairseq's fast path (``F.multi_head_attention_forward``, softmax
built in) is avoided (``skip_embed_dim_check``): fairseq's own path gives the masked scores
(``before_softmax=True``) and the normaliser's ``attend`` finishes (hard retrieval gathers
rows), in fairseq's ``(B*H, T, S)`` layout, so that a decoding step dispatches no more
operations than fairseq's.
"""

from typing import Dict, Optional, Tuple

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor

from ..normalizers import Normalizer
from ..normalizers.fused_attention import MAX_KEYS, fused_attention, fused_impl

IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


class SparseMultiheadAttention(MultiheadAttention):
    """:class:`MultiheadAttention` with a pluggable normaliser.

    Args:
        normalizer: maps scores ``(B, H, T, S)`` (``-inf`` where masked) to weights.
        attn_impl: ``--attn-impl``: ``auto`` (the fused kernels on CUDA) or ``triton`` take
            the fused kernels, ``torch`` and ``compiled`` never.
        causal_attn_mask: the only ``attn_mask`` this module is given is fairseq's future
            mask (a decoder's self-attention), which the fused kernels apply themselves.
        *args, **kwargs: as for fairseq's ``MultiheadAttention``.
    """

    #: Whether :meth:`attend` needs scores ``(B, H, T, S)`` (not fairseq's ``(B*H, T, S)``).
    needs_head_dim = False

    def __init__(self, *args, normalizer: Normalizer, attn_impl: str = "auto",
                 causal_attn_mask: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.normalizer = normalizer
        self.attn_impl = attn_impl
        self.causal_attn_mask = causal_attn_mask
        # Disables fairseq's fast path, which would bypass the normaliser.
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
        fused = self.fused_call(query, key, incremental_state, static_kv, attn_mask,
                                before_softmax or need_weights or need_head_weights)
        if fused is not None:
            return self.fused_forward(query, key, value, key_padding_mask, incremental_state,
                                      static_kv, attn_mask is not None, *fused), None
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

    def fused_call(self, query: Tensor, key: Optional[Tensor],
                   incremental_state: Optional[IncrementalState], static_kv: bool,
                   attn_mask: Optional[Tensor], wants_scores: bool
                   ) -> Optional[Tuple[str, dict]]:
        """The normaliser's :meth:`~Normalizer.fused_kind` where this call takes the fused
        kernels (see the module), else None."""
        if wants_scores or self.needs_head_dim or not fused_impl(self.attn_impl, query.is_cuda):
            return None
        kind = self.normalizer.fused_kind()
        dropout = self.dropout_module
        if (kind is None or self.normalizer._forward_hooks
                or attn_mask is not None and not self.causal_attn_mask
                or self.bias_k is not None or self.add_zero_attn or self.onnx_trace
                or dropout.p > 0 and (self.training or dropout.apply_during_inference)):
            return None
        saved = self._get_input_buffer(incremental_state) if incremental_state is not None \
            else {}
        cached = saved.get("prev_key")
        new_keys = 0 if static_kv and cached is not None else (
            query if self.self_attention else key).size(0)
        keys = new_keys + (cached.size(2) if cached is not None else 0)
        return kind if keys <= MAX_KEYS else None

    def fused_forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                      key_padding_mask: Optional[Tensor],
                      incremental_state: Optional[IncrementalState], static_kv: bool,
                      causal: bool, kind: str, arguments: dict) -> Tensor:
        """The attention output ``(T, B, E)`` by the fused kernels, the projections and the
        cache as fairseq's ``MultiheadAttention.forward`` has them; beam hypotheses that
        share their source's keys (``set_beam_size``) are queries of one batch entry."""
        tgt_len, bsz, embed_dim = query.shape
        heads = self.num_heads

        def split_heads(x: Tensor) -> Tensor:     # (L, B, E) -> (B, H, L, d), as the kernels
            return x.view(x.size(0), x.size(1), heads, -1).permute(1, 2, 0, 3).contiguous()

        q = split_heads(self.q_proj(query) * self.scaling)
        saved = self._get_input_buffer(incremental_state) if incremental_state is not None \
            else None
        if saved is not None and "prev_key" in saved and static_kv:
            k, v = saved["prev_key"], saved["prev_value"]
        else:
            if self.self_attention:
                key = value = query
            elif self.encoder_decoder_attention:
                if self.beam_size > 1 and bsz == key.size(1):
                    key = key.view(key.size(0), -1, self.beam_size, key.size(2))[:, :, 0]
                    if key_padding_mask is not None:
                        key_padding_mask = key_padding_mask.view(
                            -1, self.beam_size, key_padding_mask.size(1))[:, 0]
                value = key
            k, v = split_heads(self.k_proj(key)), split_heads(self.v_proj(value))
            if saved is not None and "prev_key" in saved:
                k = torch.cat([saved["prev_key"], k], dim=2)
                v = torch.cat([saved["prev_value"], v], dim=2)
        if saved is not None:
            key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask, saved.get("prev_key_padding_mask"), k.size(0), k.size(2),
                static_kv)
            saved.update(prev_key=k, prev_value=v, prev_key_padding_mask=key_padding_mask)
            self._set_input_buffer(incremental_state, saved)
        if key_padding_mask is not None:
            key_padding_mask = None if key_padding_mask.dim() == 0 else key_padding_mask.bool()
        kv_bsz = k.size(0)
        if kv_bsz != bsz:     # (B, H, T, d) -> (B_kv, H, beams * T, d)
            q = q.reshape(kv_bsz, -1, heads, tgt_len, q.size(-1)).transpose(1, 2).flatten(2, 3)
        out = fused_attention(q, k, v, kind, key_padding_mask=key_padding_mask, causal=causal,
                              **arguments)
        out = out.view(kv_bsz, heads, -1, tgt_len, out.size(-1)).transpose(1, 2)
        attn = out.reshape(bsz, heads, tgt_len, -1).permute(2, 0, 1, 3).reshape(
            tgt_len, bsz, embed_dim)
        return self.out_proj(attn)
