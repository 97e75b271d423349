"""The project's command lines fail in one line: ``PROG: error: WHAT`` on stderr, exit
status 1, no traceback and no usage block (argparse's own ``error`` prints the usage
first and exits 2). A successful run exits 0: a ``main`` that a console script runs
returns None or an exit status, never a result.

Every command of ``sparse_attn_plugin`` and ``sparse_attn_data`` builds its parser from
:class:`CommandParser` (``sparse_attn_data`` builds on the plugin, never the other way round).
The long-running ones (comparisons, reproductions, corpus recipes) report progress
through :mod:`logging` (loggers under ``sparse_attn_experiments`` and
``sparse_attn_data``), which :func:`show_progress` prints as ``[LABEL] message`` lines; a Python
caller configures those loggers as it likes.
"""

import argparse
import functools
import logging
import sys
from typing import NoReturn, Optional

#: The loggers of the code that reports progress to a command's user.
PROGRESS_LOGGERS = ("sparse_attn_experiments", "sparse_attn_data")


class CommandParser(argparse.ArgumentParser):
    """argparse whose usage errors, and the errors its command reports with
    :meth:`fail`, are one line and exit status 1. Sub-commands' parsers are
    CommandParsers too, and their error lines start with the command's name."""

    def __init__(self, *args, command: Optional[str] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.command = command or self.prog

    def add_subparsers(self, **kwargs):
        kwargs.setdefault("parser_class", functools.partial(CommandParser, command=self.command))
        return super().add_subparsers(**kwargs)

    def error(self, message: str) -> NoReturn:
        self.fail(f"{message} (see {self.prog} --help)")

    def fail(self, message) -> NoReturn:
        """Stop the command: ``PROG: error: MESSAGE`` (its first line) and exit status 1."""
        text = str(message).strip()
        first = text.splitlines()[0] if text else type(message).__name__
        self.exit(1, f"{self.command}: error: {first}\n")


class _ProgressHandler(logging.StreamHandler):
    """Writes to the ``sys.stdout`` of the moment (a test's capture, a redirected run)."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value):
        pass


def show_progress(label: str) -> None:
    """Print the progress loggers' INFO records on stdout as ``[label] message``, in place
    of what an earlier command of this process showed; fairseq's own INFO records (the
    datasets it loads for us) are left out: progress is ours to show."""
    logging.getLogger("fairseq").setLevel(logging.WARNING)
    handler = _ProgressHandler()
    handler.setFormatter(logging.Formatter(f"[{label}] %(message)s"))
    for name in PROGRESS_LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, _ProgressHandler)]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
