"""Command-line flags that choose attention normalisers, and their validation."""

import logging
from dataclasses import fields
from typing import Sequence

import torch

from ..errors import SettingsError
from ..normalizers import COMPILED, NAMES, NormalizerOptions, parse_alpha_init
from ..normalizers.fused_triton import check_runs
from ..site_normalizers import check_fits, check_names, site_normalizer_name
from ..sites import SITES
from .flag_checks import check_choice, flag

logger = logging.getLogger(__name__)


def add_attention_args(parser, names: Sequence[str] = NAMES,
                       sites: Sequence[str] = SITES):
    """Add ``--attn-fn`` (one of ``names``), a per-site override for each of ``sites`` when
    there are several, and the normalisers' hyper-parameters (from
    :class:`~sparse_attn_plugin.normalizers.NormalizerOptions`'s fields). Their choices
    are checked by :func:`check_attention_args` (:mod:`.flag_checks`), not by argparse."""
    parser.add_argument("--attn-fn", metavar="NAME",
                        help=f"attention normaliser{' for every site' if len(sites) > 1 else ''}"
                             f": {', '.join(names)} (default softmax)")
    for site in sites if len(sites) > 1 else ():
        parser.add_argument(flag(f"{site}_attn_fn"), metavar="NAME",
                            help=f"normaliser for {site.replace('_', ' ')} attention "
                                 "(overrides --attn-fn)")
    for option in fields(NormalizerOptions):
        info = option.metadata
        if option.type is bool:
            parser.add_argument(flag(option.name), action="store_true", help=info["help"])
        else:
            parser.add_argument(flag(option.name), type=int if option.type is int else None,
                                metavar=info["metavar"],
                                help=f"{info['help']} (default {option.default})")


def set_attention_defaults(args, sites: Sequence[str] = SITES):
    """Defaults of the attention flags (fairseq convention: in the architecture)."""
    args.attn_fn = getattr(args, "attn_fn", None) or "softmax"
    for site in sites if len(sites) > 1 else ():
        setattr(args, f"{site}_attn_fn", getattr(args, f"{site}_attn_fn", None))
    for option in fields(NormalizerOptions):
        if getattr(args, option.name, None) is None:
            setattr(args, option.name, option.default)


def check_attention_args(args, sites: Sequence[str] = SITES, names: Sequence[str] = NAMES):
    """Raise SettingsError (one line) for a normaliser that is not one of ``names`` or
    does not fit its site, an infeasible hyper-parameter, or an implementation that
    cannot run here."""
    check_names(args, names, sites)
    for option in fields(NormalizerOptions):
        if "choices" in option.metadata:
            check_choice(flag(option.name), getattr(args, option.name),
                         option.metadata["choices"])
    chosen = {site: site_normalizer_name(args, site) for site in sites}
    for site, name in chosen.items():
        check_fits(name, site)
    if "topk" in chosen.values() and args.topk < 1:
        raise SettingsError(f"--topk must be >= 1, got {args.topk}")
    if "entmax_alpha" in chosen.values():
        args.entmax_alpha_init = parse_alpha_init(args.entmax_alpha_init, "--entmax-alpha-init")
        if args.entmax_max_iter < 1:
            raise SettingsError(f"--entmax-max-iter must be >= 1, got {args.entmax_max_iter}")
    if args.attn_impl == "triton" and set(chosen.values()) & set(COMPILED):
        check_runs(cuda=torch.cuda.is_available() and not getattr(args, "cpu", False))


def log_attention_choice(args, sites: Sequence[str] = SITES):
    """Log each site's normaliser, and warn where the choice is known to cost BLEU."""
    chosen = {site: site_normalizer_name(args, site) for site in sites}
    if chosen.get("encoder_self") == "hard":
        logger.warning("hard retrieval in encoder self-attention costs BLEU (Xu et al. 2021, "
                       "Table 3: 26.60 vs 27.73 with decoder-only hard attention)")
    logger.info("attention normalisers: %s",
                ", ".join(f"{site} {name}" for site, name in chosen.items()))
