"""Attention normalisers: pure torch, no fairseq import.

Each maps scores ``(B, H, T, S)`` with ``-inf`` on masked keys to attention weights
(see :mod:`.base`); the constrained ones (:data:`CONSTRAINED`) also take upper bounds
``(B, H, T, S)`` on the weights. :func:`build_normalizer` makes one by its command-line name.
The names and what each stands for are entries of
:mod:`sparse_attn_plugin.normalizer_registry`; the lists below are read from it on import.
"""

from dataclasses import dataclass, field
from typing import Union

from ..normalizer_registry import lookup, names
from .base import Normalizer, Softmax
from .constrained import CSoftmax, CSparsemax, InfeasibleBounds, csoftmax, csparsemax
from .dispatch import IMPLS
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


@dataclass(frozen=True)
class NormalizerOptions:
    """The hyper-parameters normalisers read, declared once: the models' command-line
    flags of the same names (``--topk``, ...) are made from these fields, their defaults
    and their ``help`` (``models.attention_args.add_attention_args``)."""

    topk: int = field(default=8, metadata={
        "help": "keys kept per query by top-k attention", "metavar": "K"})
    topk_train_only: bool = field(default=False, metadata={
        "help": "top-k in training only; plain softmax at inference"})
    entmax_alpha_init: Union[float, str] = field(default=1.5, metadata={
        "help": f"initial alpha of learned alpha-entmax, in [{ALPHA_MIN}, {ALPHA_MAX}), or "
                f"{RANDOM_INIT!r}: each head's z (alpha = 1 + sigmoid(z)) drawn from N(0, 1), "
                "seeded by --seed, as Correia et al.'s code does", "metavar": "A"})
    attn_impl: str = field(default="auto", metadata={
        "help": "how the normalisers are computed: torch (eagerly), compiled (kernels fused "
                "by torch.compile, compiled on first use), triton (Triton kernels, on a CUDA "
                "device), or auto (the default: triton on a CUDA device where Triton is "
                "installed, torch elsewhere; it never compiles with torch.compile nor times "
                "anything)",
        "metavar": "IMPL", "choices": IMPLS})
    entmax_max_iter: int = field(default=30, metadata={
        "help": "iteration cap of learned alpha-entmax's safeguarded Newton solver for its "
                "threshold (it stops on convergence, after 3-8 steps in practice)",
        "metavar": "N"})


#: Normalisers whose weights are bounded by fertilities (Malaviya et al. 2018): they are
#: called as ``normalizer(scores, upper)``.
CONSTRAINED = names(constrained=True)

#: Normalisers with compiled and Triton kernels, for which ``--attn-impl`` matters.
COMPILED = names(compiled=True)

#: Names accepted by ``--attn-fn`` and the per-site flags.
NAMES = names()


def build_normalizer(name: str, num_heads: int, options: NormalizerOptions = NormalizerOptions()):
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
