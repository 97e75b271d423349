"""Transformer encoder/decoder whose three attention sites use chosen normalisers.

The choice is read from the model configuration: ``attn_fn`` for every site,
overridden per site by ``encoder_self_attn_fn``, ``decoder_self_attn_fn`` and
``decoder_cross_attn_fn``; the normalisers' hyper-parameters are the fields of
:class:`~sparse_attn_plugin.normalizers.NormalizerOptions`. Everything else is
fairseq's transformer, so parameter names (and checkpoints) are unchanged.
"""

from dataclasses import fields

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)

from ..normalizers import NormalizerOptions, build_normalizer
from .multihead_attention import SparseMultiheadAttention


def site_normalizer_name(cfg, site: str) -> str:
    """The normaliser chosen for ``site``: its own flag if set, else ``attn_fn``."""
    return getattr(cfg, f"{site}_attn_fn", None) or getattr(cfg, "attn_fn", None) or "softmax"


def build_site_normalizer(cfg, site: str, num_heads: int):
    """The normaliser module for one attention site of a model configured by ``cfg``."""
    options = {
        f.name: getattr(cfg, f.name)
        for f in fields(NormalizerOptions)
        if getattr(cfg, f.name, None) is not None
    }
    name = site_normalizer_name(cfg, site)
    return build_normalizer(name, num_heads, NormalizerOptions(**options))


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
        )

    def build_encoder_attention(self, embed_dim, cfg):
        heads = cfg.decoder.attention_heads
        return SparseMultiheadAttention(
            embed_dim,
            heads,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            encoder_decoder_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            normalizer=build_site_normalizer(cfg, "decoder_cross", heads),
        )


def _wrap_layer(layer, cfg):
    """Activation checkpointing and FSDP wrapping, as fairseq does for its own layers."""
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params = 0 if cfg.checkpoint_activations else cfg.min_params_to_wrap
    return fsdp_wrap(layer, min_num_params=min_params)


class SparseTransformerEncoder(TransformerEncoderBase):
    def build_encoder_layer(self, cfg):
        return _wrap_layer(SparseTransformerEncoderLayer(cfg, return_fc=self.return_fc), cfg)


class SparseTransformerDecoder(TransformerDecoderBase):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return _wrap_layer(SparseTransformerDecoderLayer(cfg, no_encoder_attn), cfg)
