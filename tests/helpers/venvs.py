"""Fresh virtualenvs for the install tests, made in a second from this run's Python: its
torch (and what else is asked for) linked in, not downloaded, and a copy of the checkout
to install from (tests/e2e/test_install.py, tests/e2e/test_slim_install.py)."""

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

from . import REPO

#: site-packages' folder name in a venv of this run's Python.
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def venv_with_this_torch(folder: Path, *venv_options: str,
                         packages=("torch", "triton")) -> Path:
    """A new venv at ``folder`` that has ``packages`` (torch and triton) and their needs
    (linked from this run's site-packages) and nothing else; its python."""
    from packaging.requirements import Requirement

    subprocess.run([sys.executable, "-m", "venv", *venv_options, str(folder)], check=True)
    site = folder / "lib" / PY / "site-packages"
    todo, seen = list(packages), set()
    while todo:
        try:
            dist = importlib.metadata.distribution(todo.pop())
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist.metadata["Name"].lower() in seen:
            continue
        seen.add(dist.metadata["Name"].lower())
        todo += [Requirement(r).name for r in dist.requires or []
                 if Requirement(r).marker is None or Requirement(r).marker.evaluate({"extra": ""})]
        for top in {f.parts[0] for f in dist.files or []} - {"..", "__pycache__"}:
            if (dist.locate_file(top)).exists() and not (site / top).exists():
                (site / top).symlink_to(dist.locate_file(top))
    return folder / "bin" / "python"


def checkout_copy(folder: Path) -> Path:
    """The checkout's tracked and new files (what a clone or sdist holds), in ``folder``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, folder / name)
    return folder
