"""Transformer encoder and decoder whose attention is a kernel smoother with positional
information inside the kernel (:class:`KernelMultiheadAttention`, Tsai et al. 2019).

Each site in ``kernel_pe_sites`` integrates positions its own way (``pe_integration``), the
others see none; with ``direct_sum_input`` the model adds them to the token embeddings
instead. Everything else (layer norms, feed-forward blocks, decoding) is fairseq's.
"""

from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)

from .kernel_attention import KernelMultiheadAttention, kernel_is_symmetric


def kernel_attention(cfg, site: str, embed_dim: int, heads: int) -> KernelMultiheadAttention:
    """The attention of ``site`` as the model configuration ``cfg`` describes it."""
    with_pe = site in cfg.kernel_pe_sites
    # symmetric at every site, with positions or not: decided by the model's integration
    symmetric = kernel_is_symmetric(cfg.kernel_symmetric, cfg.pe_integration)
    return KernelMultiheadAttention(
        embed_dim, heads, kernel=cfg.kernel, symmetric=symmetric,
        pe_integration=cfg.pe_integration if with_pe else "none", value_pe=cfg.value_pe,
        max_relative=cfg.max_relative_position, dropout=cfg.attention_dropout)


class KernelTransformerEncoderLayer(TransformerEncoderLayerBase):
    def build_self_attention(self, embed_dim, cfg):
        return kernel_attention(cfg, "encoder_self", embed_dim, cfg.encoder.attention_heads)


class KernelTransformerDecoderLayer(TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return kernel_attention(cfg, "decoder_self", embed_dim, cfg.decoder.attention_heads)

    def build_encoder_attention(self, embed_dim, cfg):
        return kernel_attention(cfg, "decoder_cross", embed_dim, cfg.decoder.attention_heads)


class KernelTransformerEncoder(TransformerEncoderBase):
    def build_encoder_layer(self, cfg):
        return KernelTransformerEncoderLayer(cfg, return_fc=self.return_fc)


class KernelTransformerDecoder(TransformerDecoderBase):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return KernelTransformerDecoderLayer(cfg, no_encoder_attn)
