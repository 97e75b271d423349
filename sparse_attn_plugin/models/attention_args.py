"""Command-line flags that choose attention normalisers, and their validation."""

import logging
from typing import Sequence

import torch

from ..normalizer_options import all_options, by_name
from ..normalizer_registry import DEFAULT, SPECS, TRANSFORMER, names
from ..normalizers.fused_triton import check_runs
from ..site_normalizers import check_fits, check_names, site_normalizer_name
from ..sites import SITES
from .flag_checks import flag

logger = logging.getLogger(__name__)

#: ``--attn-impl``, which every model reads (its attention modules choose the fused kernels
#: by it), whatever normalisers it uses.
IMPL = "attn_impl"


def add_attention_args(parser, model: str = TRANSFORMER, sites: Sequence[str] = SITES):
    """Add ``--attn-fn`` (a normaliser family ``model`` can use, :mod:`..normalizer_registry`),
    a per-site override for each of ``sites`` when there are several, and the normalisers'
    hyper-parameters (one flag per entry of
    :data:`~sparse_attn_plugin.normalizer_options.OPTIONS`). Their values are checked by
    :func:`check_attention_args`, not by argparse."""
    parser.add_argument("--attn-fn", metavar="NAME",
                        help=f"attention normaliser{' for every site' if len(sites) > 1 else ''}"
                             f": {', '.join(names(model))} (default {DEFAULT})")
    for site in sites if len(sites) > 1 else ():
        parser.add_argument(flag(f"{site}_attn_fn"), metavar="NAME",
                            help=f"normaliser for {site.replace('_', ' ')} attention "
                                 "(overrides --attn-fn)")
    for option in all_options():
        if isinstance(option.default, bool):
            parser.add_argument(option.flag, action="store_true", help=option.help)
        else:
            parser.add_argument(option.flag, type=int if type(option.default) is int else None,
                                metavar=option.metavar,
                                help=f"{option.help} (default {option.default})")


def set_attention_defaults(args, sites: Sequence[str] = SITES):
    """Defaults of the attention flags (fairseq convention: in the architecture)."""
    args.attn_fn = getattr(args, "attn_fn", None) or DEFAULT
    for site in sites if len(sites) > 1 else ():
        setattr(args, f"{site}_attn_fn", getattr(args, f"{site}_attn_fn", None))
    for option in all_options():
        if getattr(args, option.name, None) is None:
            setattr(args, option.name, option.default)


def check_attention_args(args, sites: Sequence[str] = SITES, model: str = TRANSFORMER):
    """Raise SettingsError (one line) for a normaliser that family ``model`` cannot use or
    that does not fit its site, an infeasible hyper-parameter of a chosen normaliser, or
    an implementation that cannot run here."""
    check_names(args, model, sites)
    impl = by_name()[IMPL]
    args.attn_impl = impl.check(args.attn_impl, impl.flag)   # every model reads it
    chosen = {site: site_normalizer_name(args, site) for site in sites}
    for site, name in chosen.items():
        check_fits(name, site)
    read = {option for name in chosen.values() for option in SPECS[name].options}
    for option in all_options():
        if option.name in read:
            setattr(args, option.name, option.check(getattr(args, option.name), option.flag))
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
