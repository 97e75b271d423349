"""Writing result files atomically: a reader never sees half a table."""

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path`` to write to; on success it is renamed into
    place (readable by all), on failure removed: ``path`` is never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path`` and rename it into place."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return Path(path)


def write_json_atomic(path, data) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def markdown_table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
