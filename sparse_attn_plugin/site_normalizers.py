"""Which normaliser each attention site of a model gets, and with what options: decided
here only, for every model family (transformer, LSTM, bounded cross-attention) and for
the flag checks.

The sites are :data:`~sparse_attn_plugin.sites.SITES`. A model configuration ``cfg``
(fairseq's args or dataclass config) chooses ``attn_fn`` for every site, overridden per
site by ``{site}_attn_fn``; the normalisers' hyper-parameters are the fields of
:class:`~sparse_attn_plugin.normalizers.NormalizerOptions` of the same names.
"""

from dataclasses import fields
from typing import Sequence

from .errors import SettingsError
from .normalizers import CONSTRAINED, NAMES, NormalizerOptions, build_normalizer
from .sites import SITES

#: Sites each normaliser may be used at. Hard retrieval is meant for the decoder
#: (Xu et al. 2021); in encoder self-attention it is allowed but hurts (their Table 3).
#: Fertility bounds what each source token receives, so the constrained ones fit
#: cross-attention only.
FITS = {name: ("decoder_cross",) if name in CONSTRAINED else SITES for name in NAMES}


def check_fits(name: str, site: str) -> None:
    """Raise SettingsError with one clear line if ``name`` is unknown or unfit for ``site``."""
    if name not in FITS:
        raise SettingsError(f"unknown attention normaliser {name!r}; choose from "
                            f"{', '.join(NAMES)}")
    if site not in FITS[name]:
        raise SettingsError(
            f"attention normaliser {name!r} cannot be used for {site.replace('_', ' ')} "
            f"attention; it fits: {', '.join(FITS[name])}"
        )


def check_names(cfg, names: Sequence[str], sites: Sequence[str]) -> None:
    """Raise SettingsError with one line naming the flag if ``attn_fn`` or a per-site
    ``{site}_attn_fn`` of ``sites`` (set ones only) is not one of ``names``, the model's."""
    flags = {"attn_fn": cfg.attn_fn}
    if len(sites) > 1:
        flags.update({f"{site}_attn_fn": getattr(cfg, f"{site}_attn_fn", None) for site in sites})
    for dest, name in flags.items():
        if name is not None and name not in names:
            raise SettingsError(f"--{dest.replace('_', '-')}: unknown attention normaliser "
                                f"{name!r}; choose from {', '.join(names)}")


def site_normalizer_name(cfg, site: str) -> str:
    """The normaliser chosen for ``site``: its own flag if set, else ``attn_fn``."""
    return getattr(cfg, f"{site}_attn_fn", None) or getattr(cfg, "attn_fn", None) or "softmax"


def cross_attention_constrained(cfg) -> bool:
    """Whether the model's cross-attention is bounded by fertilities (``csoftmax``,
    ``csparsemax``), so that the encoder builds fertilities exactly when the attention
    uses them."""
    return site_normalizer_name(cfg, "decoder_cross") in CONSTRAINED


def normalizer_options(cfg) -> NormalizerOptions:
    """The normalisers' hyper-parameters set in ``cfg`` (defaults for the others)."""
    return NormalizerOptions(**{
        f.name: getattr(cfg, f.name)
        for f in fields(NormalizerOptions)
        if getattr(cfg, f.name, None) is not None
    })


def build_site_normalizer(cfg, site: str, num_heads: int):
    """The normaliser module for one attention site of a model configured by ``cfg``."""
    return build_normalizer(site_normalizer_name(cfg, site), num_heads, normalizer_options(cfg))
