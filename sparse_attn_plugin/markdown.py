"""The Markdown tables of the result files the commands write."""

from typing import Iterable, Sequence


def markdown_table(header: Sequence, rows: Iterable[Sequence]) -> str:
    """A Markdown table of ``header`` and ``rows`` (each cell as ``str`` gives it), for the
    result files the commands write."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
