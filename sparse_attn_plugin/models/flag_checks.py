"""One-line checks of single flag values, for the models' flags.

A flag with argparse ``choices`` would make fairseq's parser print its whole usage (185
lines) and exit 2 for a bad value, and a NaN passes ``value <= 0``: the models' flags
take any value at parse time and are checked here, where a bad one is a
:class:`~sparse_attn_plugin.errors.SettingsError` naming the flag (one line, exit 1).
"""

import math
from typing import Sequence

from ..errors import SettingsError


def flag(dest: str) -> str:
    """The command-line flag of argparse destination ``dest`` (``attn_fn`` -> ``--attn-fn``)."""
    return "--" + dest.replace("_", "-")


def check_choice(name: str, value, choices: Sequence[str], what: str = "value") -> None:
    """SettingsError unless ``value`` is one of ``choices``; ``name`` is the flag."""
    if value not in choices:
        raise SettingsError(f"{name}: unknown {what} {value!r}; choose from {', '.join(choices)}")


def check_number(name: str, value: float, low: float, strict: bool = False) -> None:
    """SettingsError unless ``value`` is finite and ``>= low`` (``> low`` if ``strict``)."""
    if not math.isfinite(value):
        raise SettingsError(f"{name} must be a finite number, got {value}")
    if value < low or (strict and value == low):
        raise SettingsError(f"{name} must be {'>' if strict else '>='} {low:g}, got {value}")


def parsed_from_command_line(args) -> bool:
    """Whether an architecture function is applied to the flags fairseq has just parsed
    (``options.parse_args_and_arch``: fairseq-train, before it creates ``--save-dir`` or
    builds anything) rather than to a model's configuration, which fairseq names
    (``_name``) at every build, a checkpoint's at decoding too. What only training needs
    (a file to read, a criterion's model) is checked on the former."""
    return not hasattr(args, "_name")
