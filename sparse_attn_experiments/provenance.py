"""Where a result came from: the command, the commit and the machine.

Every table under ``results/`` starts with :func:`provenance_header` so a reader can
rerun it and knows what hardware the numbers (and speed ratios) belong to.
"""

import os
import platform
import re
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

#: The folder that holds the package: a clone of sparse-attn when the package is
#: installed editable (``make install``), else some ``site-packages``.
CHECKOUT = Path(__file__).resolve().parents[1]


def git_commit() -> str:
    """The commit of the sparse-attn clone the package runs from (``+dirty`` when files
    outside ``results/``, which a run rewrites, differ from it), whatever the current
    folder; for a copy without its git history (an installed package, a tree sent to a
    cluster or GPU machine), ``$SPARSE_ATTN_COMMIT`` as the sender gives it, marked
    ``(stated)``; else ``unknown``. A git repository that merely contains the package
    (a ``.venv`` inside some other project) is not taken for its clone."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=CHECKOUT, capture_output=True,
                              text=True, check=True).stdout.strip()
    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != CHECKOUT:
            raise OSError("the package is not at the top of a clone")
        commit = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results")
    except (OSError, subprocess.CalledProcessError):
        stated = os.environ.get("SPARSE_ATTN_COMMIT")
        return f"{stated} (stated)" if stated else "unknown"
    return commit + ("+dirty" if dirty else "")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_machine() -> str:
    """One line: CPU or GPU, core count, torch threads and versions."""
    import torch

    parts = [f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__} "
             f"({torch.get_num_threads()} threads)"]
    if torch.cuda.is_available():
        parts.append(f"GPU {torch.cuda.get_device_name(0)}")
    parts.append(f"Python {platform.python_version()}, {platform.system()}")
    return "; ".join(parts)


def gpu_of(machine: str) -> Optional[str]:
    """The GPU a line of :func:`describe_machine` names (``GPU NAME``), or None."""
    found = re.search(r"(?:^|; )GPU ([^;]+)", machine)
    return found.group(1).strip() if found else None


def provenance_header(command=None) -> str:
    """Markdown lines naming the command, commit, machine and date of a result file."""
    command = command or " ".join(shlex.quote(a) for a in sys.argv)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"- command: `{command}`\n- commit: `{git_commit()}`\n"
            f"- machine: {describe_machine()}\n- date: {when}\n")
