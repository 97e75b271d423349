"""The normalisers' hyper-parameters, one record each (:class:`Option`), read by everything
that names them: the models' flags (``--topk``, their defaults, help and checks,
``models.attention_args``), the library's :class:`~.normalizers.NormalizerOptions` (made
from :data:`OPTIONS`), the registry's entries (the options each normaliser reads) and the
keywords of the functions and the Hugging Face attention (``k``, ``n_iter``, ...). A new
hyper-parameter is one entry of :data:`OPTIONS`. No torch here: the registry reads it.
"""

import functools
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from .errors import SettingsError

#: How a normaliser is computed (``--attn-impl``, the functions' ``impl``).
IMPLS = ("auto", "torch", "compiled", "triton")
#: Learned alpha-entmax's range of alpha, and the ``alpha_init`` that draws each head's
#: pre-alpha ``z_h ~ N(0, 1)`` (torch's global generator, which fairseq seeds with
#: ``--seed``), as the first author of Correia et al. (2019) does
#: (``nn.Parameter(torch.randn(head_count))``, deep-spin/entmax issue 10).
ALPHA_MIN, ALPHA_MAX = 1.01, 2.0
RANDOM_INIT = "random"


def at_least_one(value, label: str) -> int:
    """``value`` as an int if it is an integer >= 1 (not a bool); else a one-line
    SettingsError naming ``label``."""
    whole = value if isinstance(value, int) and not isinstance(value, bool) else None
    if whole is None:
        raise SettingsError(f"{label} must be an integer >= 1, got {value!r}")
    if whole < 1:
        raise SettingsError(f"{label} must be >= 1, got {whole}")
    return whole


def alpha_init(value, label: str = "entmax alpha init"):
    """:data:`RANDOM_INIT`, or the initial alpha as a float in ``[ALPHA_MIN, ALPHA_MAX)``
    (a number or its text); else a one-line SettingsError naming ``label``."""
    if value == RANDOM_INIT:
        return RANDOM_INIT
    try:
        alpha = float(value)
    except (TypeError, ValueError):
        alpha = float("nan")
    if not ALPHA_MIN <= alpha < ALPHA_MAX:   # NaN fails too
        raise SettingsError(f"{label} must be {RANDOM_INIT!r} or a number in "
                            f"[{ALPHA_MIN}, {ALPHA_MAX}), got {value!r}")
    return alpha


def one_of(choices: Tuple[str, ...]) -> Callable[[Any, str], str]:
    """The check that ``value`` is one of ``choices``."""
    def check(value, label: str) -> str:
        if value not in choices:
            raise SettingsError(f"{label}: unknown value {value!r}; choose from "
                                f"{', '.join(choices)}")
        return value
    check.choices = choices
    return check


def boolean(value, label: str) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(f"{label} must be True or False, got {value!r}")
    return value


@dataclass(frozen=True)
class Option:
    """One hyper-parameter: ``name`` (the field of NormalizerOptions and the models' flag
    ``--name``), ``keyword`` (the functions' and transformers' name for it, None where they
    take none), ``default``, ``check`` (``check(value, label)``: the value to use, or a
    one-line SettingsError naming ``label``), ``help`` and ``metavar`` of the flag."""

    name: str
    keyword: Optional[str]
    default: Any
    check: Callable[[Any, str], Any]
    help: str
    metavar: Optional[str] = field(default=None)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


OPTIONS: Tuple[Option, ...] = (
    Option("topk", "k", 8, at_least_one, "keys kept per query by top-k attention", "K"),
    Option("topk_train_only", None, False, boolean,
           "top-k in training only; plain softmax at inference"),
    Option("entmax_alpha_init", "alpha", 1.5, alpha_init,
           f"initial alpha of learned alpha-entmax, in [{ALPHA_MIN}, {ALPHA_MAX}), or "
           f"{RANDOM_INIT!r}: each head's z (alpha = 1 + sigmoid(z)) drawn from N(0, 1), "
           "seeded by --seed, as Correia et al.'s code does", "A"),
    Option("attn_impl", "impl", "auto", one_of(IMPLS),
           "how the normalisers are computed: torch (eagerly), compiled (kernels fused by "
           "torch.compile, compiled on first use), triton (Triton kernels, on a CUDA "
           "device), or auto (the default: triton on a CUDA device where Triton is "
           "installed, torch elsewhere; it never compiles with torch.compile nor times "
           "anything)", "IMPL"),
    Option("entmax_max_iter", "n_iter", 30, at_least_one,
           "iteration cap of learned alpha-entmax's safeguarded Newton solver for its "
           "threshold (it stops on convergence, after 3-8 steps in practice)", "N"),
)


def all_options() -> Tuple[Option, ...]:
    """:data:`OPTIONS`, as it is when called (what everything derived reads)."""
    return OPTIONS


def by_name() -> Dict[str, Option]:
    """The options by name."""
    return {option.name: option for option in all_options()}


def keywords(names) -> Tuple[str, ...]:
    """The keywords of the options ``names`` that have one, in order."""
    known = by_name()
    return tuple(known[name].keyword for name in names if known[name].keyword)


def options_record():
    """The frozen dataclass whose fields are the options, with their defaults (one class
    for one tuple of options)."""
    return _record(all_options())


@functools.lru_cache(maxsize=None)
def _record(options: Tuple[Option, ...]):
    return make_dataclass("NormalizerOptions", [
        (option.name, type(option.default), field(default=option.default))
        for option in options], frozen=True)
