"""Transformer encoder/decoder whose three attention sites use chosen normalisers
(:mod:`sparse_attn_plugin.sites` decides which); the rest is fairseq's transformer, so
parameter names and checkpoints are unchanged.

With a constrained cross-attention the encoder also returns the source tokens'
fertilities and, with ``sink_token``, a learned sink state after each sentence's last token
(Malaviya et al. 2018's ``<SINK>``); the decoder returns attention over the batch's columns.
"""

from typing import Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import Tensor, nn

from ..site_normalizers import (
    build_site_normalizer,
    cross_attention_constrained,
)
from .bounded_attention import BoundedAttention
from .constrained_cross_attention import ConstrainedMultiheadAttention
from .fertility import Fertility
from .multihead_attention import SparseMultiheadAttention
from .source_layout import SourceLayout, to_source_columns


class SparseTransformerEncoderLayer(TransformerEncoderLayerBase):
    def build_self_attention(self, embed_dim, cfg):
        heads = cfg.encoder.attention_heads
        return SparseMultiheadAttention(
            embed_dim,
            heads,
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            normalizer=build_site_normalizer(cfg, "encoder_self", heads),
            attn_impl=cfg.attn_impl,
        )


class SparseTransformerDecoderLayer(TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        heads = cfg.decoder.attention_heads
        return SparseMultiheadAttention(
            embed_dim,
            heads,
            dropout=cfg.attention_dropout,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=not cfg.cross_self_attention,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            normalizer=build_site_normalizer(cfg, "decoder_self", heads),
            attn_impl=cfg.attn_impl,
            causal_attn_mask=not cfg.cross_self_attention,  # fairseq's future mask, or none
        )

    def build_encoder_attention(self, embed_dim, cfg):
        heads = cfg.decoder.attention_heads
        kwargs = dict(
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            encoder_decoder_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )
        if cross_attention_constrained(cfg):
            bounded = BoundedAttention(build_site_normalizer(cfg, "decoder_cross", heads),
                                       cfg.exhaustion_c)
            return ConstrainedMultiheadAttention(embed_dim, heads, bounded=bounded, **kwargs)
        return SparseMultiheadAttention(
            embed_dim, heads, normalizer=build_site_normalizer(cfg, "decoder_cross", heads),
            attn_impl=cfg.attn_impl, **kwargs)


def _wrap_layer(layer, cfg):
    """Activation checkpointing and FSDP wrapping, as fairseq does for its own layers."""
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params = 0 if cfg.checkpoint_activations else cfg.min_params_to_wrap
    return fsdp_wrap(layer, min_num_params=min_params)


class SparseTransformerEncoder(TransformerEncoderBase):
    """fairseq's encoder, plus fertilities and an optional sink (see the module doc).

    The extra outputs: ``fertility`` ``[(B, S')]`` (``inf`` on the sink) and
    ``model_columns`` ``[(B, S)]`` (:class:`SourceLayout`); both empty lists when the
    layout is the batch's own.
    """

    def __init__(self, cfg, dictionary, embed_tokens, fertility: Optional[Fertility] = None,
                 sink: bool = False, return_fc: bool = False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc)
        self.fertility = fertility
        self.sink = (nn.Parameter(torch.randn(cfg.encoder.embed_dim) * 0.02) if sink
                     else None)

    def build_encoder_layer(self, cfg):
        return _wrap_layer(SparseTransformerEncoderLayer(cfg, return_fc=self.return_fc), cfg)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None,
                return_all_hiddens: bool = False, token_embeddings: Optional[Tensor] = None,
                src_fertility: Optional[Tensor] = None):
        out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out["fertility"], out["model_columns"] = [], []
        if self.fertility is None and self.sink is None:
            return out
        layout = SourceLayout(src_tokens.eq(self.padding_idx), sink=self.sink is not None)
        states = layout.to_model(out["encoder_out"][0].transpose(0, 1), self.sink)
        out["encoder_out"] = [states.transpose(0, 1)]
        out["encoder_padding_mask"] = [layout.padding_mask]
        out["model_columns"] = [layout.model_columns]
        if self.fertility is not None:
            out["fertility"] = [layout.to_model(self.fertility(src_tokens, src_fertility),
                                                float("inf"))]
        return out

    def reorder_encoder_out(self, encoder_out, new_order):
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for key in ("fertility", "model_columns"):
            reordered[key] = [t.index_select(0, new_order) for t in encoder_out.get(key, [])]
        return reordered


class SparseTransformerDecoder(TransformerDecoderBase):
    """fairseq's decoder; binds fertilities to constrained cross-attention and returns
    attention over the batch's source columns."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        #: found once, not at every decoding step
        self.constrained = tuple(m for m in self.modules()
                                 if isinstance(m, ConstrainedMultiheadAttention))

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return _wrap_layer(SparseTransformerDecoderLayer(cfg, no_encoder_attn), cfg)

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment=False, alignment_layer=None,
                         alignment_heads=None):
        constrained = self.constrained
        fertility = encoder_out.get("fertility", []) if encoder_out else []
        if constrained and not fertility:
            raise RuntimeError("constrained cross-attention needs the encoder's fertilities")
        for module in constrained:
            module.fertility = fertility[0]
        try:
            x, extra = super().extract_features(
                prev_output_tokens, encoder_out, incremental_state, full_context_alignment,
                alignment_layer, alignment_heads)
        finally:
            for module in constrained:
                module.fertility = None
        columns = encoder_out.get("model_columns", []) if encoder_out else []
        if columns and extra["attn"] and extra["attn"][0] is not None:
            extra["attn"] = [to_source_columns(extra["attn"][0], columns[0])]
        return x, extra
