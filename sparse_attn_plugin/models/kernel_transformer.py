"""``kernel_transformer``: the transformer with attention as a kernel smoother and
positional embeddings integrated into the kernel (Tsai et al. 2019, "Transformer
Dissection"; the authors released no code).

    fairseq-train DATA --user-dir sparse_attn_plugin --arch kernel_transformer_iwslt_de_en \\
        --kernel exponential --kernel-symmetric --pe-integration product_sym --no-value-pe

Token embeddings carry no positional embedding: positions enter each site of ``--pe-sites``
(kernels and integrations: :mod:`sparse_attn_plugin.modules.kernel_attention`). The
exception, ``--pe-integration direct_sum_input`` (the paper's direct sum, as Vaswani et
al. build it), adds the sinusoid once to the token embeddings, takes plain kernels at every
site, and with the exponential kernel is fairseq's transformer. Flags: docs/methods.md,
"Kernel attention".
"""

import argparse

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel, base_architecture, transformer_iwslt_de_en

from ..errors import SettingsError
from ..modules.kernel_attention import PE_INTEGRATIONS
from ..modules.kernel_transformer_layers import KernelTransformerDecoder, KernelTransformerEncoder
from ..normalizers.kernels import KERNELS
from ..sites import SITES
from .argument_names import names_set_by, warn_unknown_arguments
from .fertility_args import check_fertility_criterion
from .flag_checks import check_choice, parsed_from_command_line
from .output_entmax import OutputEntmaxMixin, output_entmax_of, with_output_entmax

#: Positions added once to the token embeddings instead of inside the kernels.
INPUT_PE = "direct_sum_input"
#: ``--pe-integration`` choices: the per-site integrations and :data:`INPUT_PE`.
MODEL_PE_INTEGRATIONS = (*PE_INTEGRATIONS[:-1], INPUT_PE)
DEFAULTS = {"kernel": "exponential", "kernel_symmetric": False, "pe_integration": "direct_sum",
            "value_pe": True, "pe_sites": ",".join(SITES), "max_relative_position": 16}


def parse_pe_sites(text: str):
    """``"encoder_self,decoder_cross"`` -> a tuple of sites; ``"none"`` -> ``()``."""
    if text.strip() == "none":
        return ()
    sites = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [s for s in sites if s not in SITES]
    if unknown or not sites:
        raise SettingsError(f"--pe-sites takes 'none' or a comma-separated list of "
                            f"{', '.join(SITES)}; got {text!r}")
    return sites


def position_sites(args):
    """The sites whose kernels integrate positions: ``--pe-sites``, or none for
    :data:`INPUT_PE` (which takes neither ``--pe-sites`` nor ``--no-value-pe``)."""
    if args.pe_integration != INPUT_PE:
        return parse_pe_sites(args.pe_sites)
    if set(parse_pe_sites(args.pe_sites)) != set(SITES) or not args.value_pe:
        raise SettingsError(f"--pe-integration {INPUT_PE} adds positions once, to the token "
                            "embeddings: every layer's queries, keys and values carry them, so "
                            "--pe-sites and --no-value-pe do not apply")
    if getattr(args, "no_token_positional_embeddings", False):
        raise SettingsError(f"--pe-integration {INPUT_PE} needs the token positional "
                            "embeddings that --no-token-positional-embeddings turns off")
    return ()


@register_model("kernel_transformer")
class KernelTransformerModel(OutputEntmaxMixin, TransformerModel):
    """Transformer whose attention is a kernel smoother (``--kernel``) with positional
    embeddings integrated by ``--pe-integration``."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--kernel", metavar="KERNEL",
                            help=f"k(q, k) of the smoother: {', '.join(KERNELS)} "
                                 "(default exponential)")
        parser.add_argument("--kernel-symmetric", action="store_true", default=None,
                            help="tie the key projection to the query projection")
        parser.add_argument("--pe-integration", metavar="HOW",
                            help="how positions enter the kernel at every site: "
                                 f"{', '.join(MODEL_PE_INTEGRATIONS[:-1])} (default "
                                 f"direct_sum), or {INPUT_PE}: added once to the token "
                                 "embeddings, as in Vaswani et al.'s transformer")
        parser.add_argument("--value-pe", action=argparse.BooleanOptionalAction, default=None,
                            help="values from token + position embeddings (default) or "
                                 "from tokens only (--no-value-pe)")
        parser.add_argument("--pe-sites", metavar="SITES",
                            help=f"attention sites that get positions: 'none' or some of "
                                 f"{','.join(SITES)} (default all)")
        parser.add_argument("--max-relative-position", type=int, metavar="M",
                            help="look-up table reach (default 16)")

    @classmethod
    def build_model(cls, args, task):
        warn_unknown_arguments(args, cls, {*names_set_by(base_architecture), "kernel_pe_sites"})
        set_kernel_defaults(args)
        check_kernel_args(args)
        args.kernel_pe_sites = position_sites(args)
        # positions live in the kernels, or (INPUT_PE) in the embeddings alone
        args.no_token_positional_embeddings = args.pe_integration != INPUT_PE
        return with_output_entmax(super().build_model(args, task), args, task)

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return KernelTransformerEncoder(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return KernelTransformerDecoder(cfg, tgt_dict, embed_tokens,
                                        no_encoder_attn=cfg.no_cross_attention)


def set_kernel_defaults(args):
    for name, value in DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def check_kernel_args(args):
    """Raise SettingsError (one line) for a bad kernel flag; run by the architecture
    functions, so on fairseq-train's command line before --save-dir is created, and by
    every build. The fertility criterion is refused there too: this model has none."""
    check_choice("--kernel", args.kernel, KERNELS, "kernel")
    check_choice("--pe-integration", args.pe_integration, MODEL_PE_INTEGRATIONS)
    position_sites(args)
    if args.max_relative_position < 1:
        raise SettingsError(f"--max-relative-position must be >= 1, got "
                            f"{args.max_relative_position}")
    output_entmax_of(args)
    if parsed_from_command_line(args):
        check_fertility_criterion(args)


@register_model_architecture("kernel_transformer", "kernel_transformer")
def kernel_transformer(args):
    """fairseq's transformer-base sizes, exponential kernel with direct-sum PE."""
    set_kernel_defaults(args)
    base_architecture(args)
    check_kernel_args(args)


@register_model_architecture("kernel_transformer", "kernel_transformer_iwslt_de_en")
def kernel_transformer_iwslt_de_en(args):
    """fairseq's transformer_iwslt_de_en sizes (6 layers, 512/1024, 4 heads)."""
    set_kernel_defaults(args)
    transformer_iwslt_de_en(args)
    check_kernel_args(args)
