"""Command-line flags that choose attention normalisers, and their validation."""

import logging

from ..errors import SettingsError
from ..modules import site_normalizer_name
from ..normalizers import (
    ALPHA_MAX,
    ALPHA_MIN,
    NAMES,
    RANDOM_INIT,
    SITES,
    check_fits,
    parse_alpha_init,
)

logger = logging.getLogger(__name__)


def add_attention_args(parser):
    """Add ``--attn-fn``, the per-site overrides and the normalisers' hyper-parameters."""
    parser.add_argument("--attn-fn", choices=NAMES, metavar="NAME",
                        help=f"attention normaliser for every site: {', '.join(NAMES)}")
    for site in SITES:
        flag = site.replace("_", "-")
        parser.add_argument(f"--{flag}-attn-fn", choices=NAMES, metavar="NAME",
                            help=f"normaliser for {site.replace('_', ' ')} attention "
                                 "(overrides --attn-fn)")
    parser.add_argument("--topk", type=int, metavar="K",
                        help="keys kept per query by top-k attention (default 8)")
    parser.add_argument("--topk-train-only", action="store_true",
                        help="top-k in training only; plain softmax at inference")
    parser.add_argument("--entmax-alpha-init", metavar="A",
                        help="initial alpha of learned alpha-entmax, "
                             f"in [{ALPHA_MIN}, {ALPHA_MAX}) (default 1.5), or {RANDOM_INIT!r}: "
                             "each head's z (alpha = 1 + sigmoid(z)) drawn from N(0, 1), "
                             "seeded by --seed, as Correia et al.'s code does")
    parser.add_argument("--entmax-bisect-iter", type=int, metavar="N",
                        help="bisection iterations of learned alpha-entmax (default 25)")


def set_attention_defaults(args):
    """Defaults of the attention flags (fairseq convention: in the architecture)."""
    args.attn_fn = getattr(args, "attn_fn", None) or "softmax"
    for site in SITES:
        setattr(args, f"{site}_attn_fn", getattr(args, f"{site}_attn_fn", None))
    args.topk = getattr(args, "topk", 8)
    args.topk_train_only = getattr(args, "topk_train_only", False)
    args.entmax_alpha_init = getattr(args, "entmax_alpha_init", 1.5)
    args.entmax_bisect_iter = getattr(args, "entmax_bisect_iter", 25)


def check_attention_args(args):
    """Raise SettingsError (one line) for a normaliser that does not fit its site or an
    infeasible hyper-parameter."""
    chosen = {site: site_normalizer_name(args, site) for site in SITES}
    for site, name in chosen.items():
        check_fits(name, site)
    if "topk" in chosen.values() and args.topk < 1:
        raise SettingsError(f"--topk must be >= 1, got {args.topk}")
    if "entmax_alpha" in chosen.values():
        args.entmax_alpha_init = parse_alpha_init(args.entmax_alpha_init, "--entmax-alpha-init")
        if args.entmax_bisect_iter < 1:
            raise SettingsError(f"--entmax-bisect-iter must be >= 1, got {args.entmax_bisect_iter}")
    if chosen["encoder_self"] == "hard":
        logger.warning("hard retrieval in encoder self-attention costs BLEU (Xu et al. 2021, "
                       "Table 3: 26.60 vs 27.73 with decoder-only hard attention)")
    logger.info("attention normalisers: %s",
                ", ".join(f"{site} {name}" for site, name in chosen.items()))
