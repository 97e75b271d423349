"""Which normaliser each attention site of a model gets, and with what options: decided
here only, for every model family (transformer, LSTM, bounded cross-attention) and for
the flag checks.

The sites are :data:`~sparse_attn_plugin.sites.SITES`. A model configuration ``cfg``
(fairseq's args or dataclass config) chooses ``attn_fn`` for every site, overridden per
site by ``{site}_attn_fn``; the normalisers' hyper-parameters are the fields of
:class:`~sparse_attn_plugin.normalizers.NormalizerOptions` of the same names.
"""

from typing import Sequence

from .errors import SettingsError
from .normalizer_options import all_options, options_record
from .normalizer_registry import DEFAULT, lookup, names
from .normalizers import build_normalizer


def check_fits(name: str, site: str) -> None:
    """Raise SettingsError with one clear line if ``name`` is unknown or unfit for ``site``
    (its entry's ``sites`` in :mod:`.normalizer_registry`)."""
    fits = lookup(name).sites
    if site not in fits:
        raise SettingsError(
            f"attention normaliser {name!r} cannot be used for {site.replace('_', ' ')} "
            f"attention; it fits: {', '.join(fits)}"
        )


def check_names(cfg, model: str, sites: Sequence[str]) -> None:
    """Raise SettingsError with one line naming the flag if ``attn_fn`` or a per-site
    ``{site}_attn_fn`` of ``sites`` (set ones only) is not a normaliser that ``model`` (a
    family of :data:`~.normalizer_registry.MODELS`) can use."""
    usable = names(model)
    flags = {"attn_fn": cfg.attn_fn}
    if len(sites) > 1:
        flags.update({f"{site}_attn_fn": getattr(cfg, f"{site}_attn_fn", None) for site in sites})
    for dest, name in flags.items():
        if name is not None:
            try:
                lookup(name, usable)
            except SettingsError as error:
                raise SettingsError(f"--{dest.replace('_', '-')}: {error}") from None


def site_normalizer_name(cfg, site: str) -> str:
    """The normaliser chosen for ``site``: its own flag if set, else ``attn_fn``."""
    return getattr(cfg, f"{site}_attn_fn", None) or getattr(cfg, "attn_fn", None) or DEFAULT


def cross_attention_constrained(cfg) -> bool:
    """Whether the model's cross-attention is bounded by fertilities (``csoftmax``,
    ``csparsemax``), so that the encoder builds fertilities exactly when the attention
    uses them."""
    return site_normalizer_name(cfg, "decoder_cross") in names(constrained=True)


def normalizer_options(cfg):
    """The normalisers' hyper-parameters set in ``cfg`` (defaults for the others), as the
    options declare them when called (:mod:`.normalizer_options`)."""
    return options_record()(**{option.name: getattr(cfg, option.name)
                               for option in all_options()
                               if getattr(cfg, option.name, None) is not None})


def build_site_normalizer(cfg, site: str, num_heads: int):
    """The normaliser module for one attention site of a model configured by ``cfg``."""
    return build_normalizer(site_normalizer_name(cfg, site), num_heads, normalizer_options(cfg))
