"""``sparse_transformer``: fairseq's transformer with a chosen normaliser per site.

With ``--attn-fn softmax`` it has the same parameters and computes the same
function as fairseq's ``transformer``, so checkpoints move between the two.
"""

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerModel,
    base_architecture,
    transformer_iwslt_de_en,
    transformer_vaswani_wmt_en_de_big,
    transformer_wmt_en_de,
)

from ..modules import SparseTransformerDecoder, SparseTransformerEncoder
from ..normalizer_registry import TRANSFORMER
from ..site_normalizers import cross_attention_constrained
from ..sites import SITES
from .argument_names import names_set_by, warn_unknown_arguments
from .attention_args import add_attention_args, log_attention_choice, set_attention_defaults
from .attention_switch import AttentionSwitchMixin
from .fertility_args import (
    FertilityPredictorMixin,
    add_fertility_args,
    build_fertility,
    check_constrained_model,
    set_fertility_defaults,
)
from .output_entmax import OutputEntmaxMixin, output_entmax_of, with_output_entmax


@register_model("sparse_transformer")
class SparseTransformerModel(AttentionSwitchMixin, FertilityPredictorMixin, OutputEntmaxMixin,
                             TransformerModel):
    """Transformer (Vaswani et al. 2017) whose attention sites use top-k, sparsemax,
    1.5-entmax or learned alpha-entmax instead of softmax (``--attn-fn``)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_attention_args(parser)
        add_fertility_args(parser)

    @classmethod
    def build_model(cls, args, task):
        warn_unknown_arguments(args, cls, names_set_by(base_architecture))
        set_attention_defaults(args)
        set_fertility_defaults(args)
        check_constrained_model(args, SITES, TRANSFORMER)
        log_attention_choice(args)
        return with_output_entmax(super().build_model(args, task), args, task)

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        fertility = None
        if cross_attention_constrained(cfg):
            fertility = build_fertility(cfg, src_dict)
        return SparseTransformerEncoder(cfg, src_dict, embed_tokens, fertility,
                                        getattr(cfg, "sink_token", False))

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens=True,
                features_only=False, alignment_layer=None, alignment_heads=None,
                src_fertility=None):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths,
                                   return_all_hiddens=return_all_hiddens,
                                   src_fertility=src_fertility)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out,
                            features_only=features_only, alignment_layer=alignment_layer,
                            alignment_heads=alignment_heads, src_lengths=src_lengths,
                            return_all_hiddens=return_all_hiddens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return SparseTransformerDecoder(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention
        )


def _sparse_architecture(name, transformer_defaults):
    @register_model_architecture("sparse_transformer", name)
    def architecture(args):
        set_attention_defaults(args)
        set_fertility_defaults(args)
        transformer_defaults(args)
        check_constrained_model(args, SITES, TRANSFORMER)
        output_entmax_of(args)

    architecture.__name__ = name
    architecture.__doc__ = (f"fairseq's {transformer_defaults.__name__} settings, softmax "
                            "attention; the flags checked (on fairseq-train's command line: "
                            "before --save-dir is created).")
    return architecture


sparse_transformer = _sparse_architecture("sparse_transformer", base_architecture)
sparse_transformer_iwslt_de_en = _sparse_architecture(
    "sparse_transformer_iwslt_de_en", transformer_iwslt_de_en)
sparse_transformer_wmt_en_de = _sparse_architecture(
    "sparse_transformer_wmt_en_de", transformer_wmt_en_de)
sparse_transformer_vaswani_wmt_en_de_big = _sparse_architecture(
    "sparse_transformer_vaswani_wmt_en_de_big", transformer_vaswani_wmt_en_de_big)
