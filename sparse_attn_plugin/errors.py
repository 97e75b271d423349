"""The plugin's errors: one type per failure domain, each a :class:`SparseAttnError` whose
message is one line saying what is wrong and where.

Libraries raise them; command lines print that line and exit with status 1 (ours through
:class:`sparse_attn_plugin.command_line.CommandParser`, fairseq's through the hook
:func:`one_line_errors_at_fairseq_cli` installs when such a command loads the plugin).
:class:`SettingsError` (model and task flags) is here; every other domain's type (fertility
files, constrained bounds, the aligner, checkpoints, corpus preparation, ...) is defined
beside the code that raises it, in this package or the ones built on it.
"""

import sys
from pathlib import Path
from typing import Optional


class SparseAttnError(Exception):
    """An error the plugin raises on purpose: bad input or infeasible settings, not a bug."""


class SettingsError(SparseAttnError, ValueError):
    """Model or task flags that cannot be used, or not together; the message names the
    flag."""


def _new_save_dir(argv) -> Optional[Path]:
    """fairseq-train's ``--save-dir`` (``checkpoints`` by default) if it does not exist yet:
    fairseq makes it before a refusal can come, which should leave nothing behind."""
    if not argv or Path(argv[0]).name != "fairseq-train":
        return None
    folder = "checkpoints"
    for i, arg in enumerate(argv):
        if arg == "--save-dir" and i + 1 < len(argv):
            folder = argv[i + 1]
        elif arg.startswith("--save-dir="):
            folder = arg.split("=", 1)[1]
    return None if Path(folder).exists() else Path(folder)


def one_line_errors_at_fairseq_cli() -> None:
    """Make an uncaught :class:`SparseAttnError` end the process with ``error: MESSAGE``
    (its first line) on stderr and exit status 1, where Python would print a traceback,
    and remove fairseq-train's ``--save-dir`` if this run made it and it is still empty;
    every other exception goes to the hook that was there before. Idempotent."""
    previous = sys.excepthook
    if getattr(previous, "sparse_attn_one_line", False):
        return
    made = _new_save_dir(sys.argv)

    def hook(kind, error, traceback):
        if not issubclass(kind, SparseAttnError):
            previous(kind, error, traceback)
            return
        if made is not None and made.is_dir() and not any(made.iterdir()):
            made.rmdir()
        lines = str(error).strip().splitlines()
        print(f"error: {lines[0] if lines else kind.__name__}", file=sys.stderr)
        # Let go of the failed frames now, as a SystemExit would: kept until interpreter
        # shutdown (Python holds them in sys.last_traceback), they destroy fairseq's
        # worker threads out of order and the C++ runtime aborts after our line.
        error.__traceback__ = None
        sys.last_traceback = getattr(sys, "last_exc", error).__traceback__ = None

    hook.sparse_attn_one_line = True
    sys.excepthook = hook
