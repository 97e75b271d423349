"""Command-line flags that choose attention normalisers, and their validation."""

import logging
from dataclasses import fields
from typing import Sequence

import torch

from ..errors import SettingsError
from ..normalizer_registry import DEFAULT, SPECS, TRANSFORMER, names
from ..normalizers import NormalizerOptions, parse_alpha_init
from ..normalizers.fused_triton import check_runs
from ..site_normalizers import check_fits, check_names, site_normalizer_name
from ..sites import SITES
from .flag_checks import check_choice, flag

logger = logging.getLogger(__name__)


def add_attention_args(parser, model: str = TRANSFORMER, sites: Sequence[str] = SITES):
    """Add ``--attn-fn`` (a normaliser family ``model`` can use, :mod:`..normalizer_registry`),
    a per-site override for each of ``sites`` when there are several, and the normalisers'
    hyper-parameters (from :class:`~sparse_attn_plugin.normalizers.NormalizerOptions`'s
    fields). Their choices are checked by :func:`check_attention_args`
    (:mod:`.flag_checks`), not by argparse."""
    parser.add_argument("--attn-fn", metavar="NAME",
                        help=f"attention normaliser{' for every site' if len(sites) > 1 else ''}"
                             f": {', '.join(names(model))} (default {DEFAULT})")
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
    args.attn_fn = getattr(args, "attn_fn", None) or DEFAULT
    for site in sites if len(sites) > 1 else ():
        setattr(args, f"{site}_attn_fn", getattr(args, f"{site}_attn_fn", None))
    for option in fields(NormalizerOptions):
        if getattr(args, option.name, None) is None:
            setattr(args, option.name, option.default)


def check_attention_args(args, sites: Sequence[str] = SITES, model: str = TRANSFORMER):
    """Raise SettingsError (one line) for a normaliser that family ``model`` cannot use or
    that does not fit its site, an infeasible hyper-parameter of a chosen normaliser, or
    an implementation that cannot run here."""
    check_names(args, model, sites)
    for option in fields(NormalizerOptions):
        if "choices" in option.metadata:
            check_choice(flag(option.name), getattr(args, option.name),
                         option.metadata["choices"])
    chosen = {site: site_normalizer_name(args, site) for site in sites}
    for site, name in chosen.items():
        check_fits(name, site)
    read = {option for name in chosen.values() for option in SPECS[name].options}
    if "topk" in read and args.topk < 1:
        raise SettingsError(f"--topk must be >= 1, got {args.topk}")
    if "entmax_alpha_init" in read:
        args.entmax_alpha_init = parse_alpha_init(args.entmax_alpha_init, "--entmax-alpha-init")
    if "entmax_max_iter" in read and args.entmax_max_iter < 1:
        raise SettingsError(f"--entmax-max-iter must be >= 1, got {args.entmax_max_iter}")
    if args.attn_impl == "triton" and any(SPECS[name].compiled for name in chosen.values()):
        check_runs(cuda=torch.cuda.is_available() and not getattr(args, "cpu", False))


def log_attention_choice(args, sites: Sequence[str] = SITES):
    """Log each site's normaliser, and warn where the choice is known to cost BLEU."""
    chosen = {site: site_normalizer_name(args, site) for site in sites}
    if chosen.get("encoder_self") == "hard":
        logger.warning("hard retrieval in encoder self-attention costs BLEU (Xu et al. 2021, "
                       "Table 3: 26.60 vs 27.73 with decoder-only hard attention)")
    logger.info("attention normalisers: %s",
                ", ".join(f"{site} {name}" for site, name in chosen.items()))
