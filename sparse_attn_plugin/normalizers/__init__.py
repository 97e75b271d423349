"""Attention normalisers: pure torch, no fairseq import.

Each maps scores ``(B, H, T, S)`` with ``-inf`` on masked keys to attention weights
(see :mod:`.base`); the constrained ones (:data:`CONSTRAINED`) also take upper bounds
``(B, H, T, S)`` on the weights. :func:`build_normalizer` makes one by its command-line name.
The names and what each stands for are entries of
:mod:`sparse_attn_plugin.normalizer_registry`; the lists below are read from it on import.
"""

from ..normalizer_options import IMPLS, options_record
from ..normalizer_registry import lookup, names
from .base import Normalizer, Softmax
from .constrained import CSoftmax, CSparsemax, InfeasibleBounds, csoftmax, csparsemax
from .entmax_family import (
    ALPHA_MAX,
    ALPHA_MIN,
    RANDOM_INIT,
    Entmax15,
    EntmaxAlpha,
    Sparsemax,
    parse_alpha_init,
)
from .hard import HardRetrieval
from .topk import TopK

#: The hyper-parameters normalisers read, with their defaults: a frozen dataclass made from
#: :data:`~sparse_attn_plugin.normalizer_options.OPTIONS` (the models' flags come from the
#: same entries).
NormalizerOptions = options_record()
DEFAULT_OPTIONS = NormalizerOptions()


#: Normalisers whose weights are bounded by fertilities (Malaviya et al. 2018): they are
#: called as ``normalizer(scores, upper)``.
CONSTRAINED = names(constrained=True)

#: Normalisers with compiled and Triton kernels, for which ``--attn-impl`` matters.
COMPILED = names(compiled=True)

#: Names accepted by ``--attn-fn`` and the per-site flags.
NAMES = names()


def build_normalizer(name: str, num_heads: int, options=DEFAULT_OPTIONS):
    """Make the normaliser called ``name`` (its entry in
    :data:`~sparse_attn_plugin.normalizer_registry.SPECS`) for a module with ``num_heads``
    heads."""
    return lookup(name).build(num_heads, options)


__all__ = [
    "ALPHA_MAX", "ALPHA_MIN", "COMPILED", "CONSTRAINED", "IMPLS", "NAMES",
    "RANDOM_INIT", "CSoftmax", "CSparsemax", "Entmax15", "EntmaxAlpha",
    "HardRetrieval", "InfeasibleBounds", "Normalizer", "NormalizerOptions", "Softmax",
    "Sparsemax", "TopK", "build_normalizer", "csoftmax", "csparsemax",
    "parse_alpha_init",
]
