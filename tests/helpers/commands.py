"""The commands a user types, read from the source: setup.py's console scripts and the
modules that run as ``python -m MODULE`` (tests/unit/test_extras.py,
tests/e2e/test_slim_install.py)."""

import ast
from typing import Dict, List

from . import REPO

PACKAGES = ("sparse_attn_plugin", "sparse_attn_data", "sparse_attn_experiments")


def console_scripts() -> Dict[str, str]:
    """setup.py's console scripts: {name: the module whose ``main`` it runs}."""
    tree = ast.parse((REPO / "setup.py").read_text())
    entries = next(node for node in ast.walk(tree) if isinstance(node, ast.Dict)
                   and any(getattr(k, "value", None) == "console_scripts" for k in node.keys))
    return {name.strip(): target.split(":")[0].strip() for name, target in
            (line.split("=") for line in ast.literal_eval(entries.values[0]))}


def python_m_modules() -> List[str]:
    """Every module of the three packages with a ``__main__`` block, sorted."""
    return sorted(".".join(path.relative_to(REPO).with_suffix("").parts)
                  for package in PACKAGES for path in (REPO / package).rglob("*.py")
                  if 'if __name__ == "__main__":' in path.read_text())
