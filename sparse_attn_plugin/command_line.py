"""The project's command lines fail in one line: ``PROG: error: WHAT`` on stderr, exit
status 1, no traceback and no usage block (argparse's own ``error`` prints the usage
first and exits 2). A successful run exits 0: a ``main`` that a console script runs
returns None or an exit status, never a result.

Every command of ``sparse_attn_plugin`` and ``data_prep`` builds its parser from
:class:`CommandParser` (``data_prep`` builds on the plugin, never the other way round).
"""

import argparse
import functools
from typing import NoReturn, Optional


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
