"""The house rules of the package, read from its source: the plugin never imports the
experiment tooling, libraries never import a command-line module, and our code never
runs our own code through ``python -m``."""

import ast
from pathlib import Path

from helpers import REPO

PACKAGE = REPO / "sparse_attn_plugin"
#: Old module paths of commands now under ``experiments/``, kept for results files.
SHIMS = {"compare.py", "reproduce.py", "results_index.py", "analysis/toy_example.py"}
#: The command-line modules (each one ``main``), which only console scripts import.
CLIS = {"sparse_attn_plugin.evaluation.cli", "sparse_attn_plugin.evaluation.align_cli",
        "sparse_attn_plugin.analysis.cli", "sparse_attn_plugin.experiments.compare",
        "sparse_attn_plugin.experiments.reproduce",
        "sparse_attn_plugin.experiments.results_index",
        "sparse_attn_plugin.experiments.toy_example"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, source: str = None):
    """The absolute names every import of ``path`` (or of ``source`` at that path)
    reaches, lazy ones included (for ``from . import x``, both the package and
    ``package.x``)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(source if source is not None else path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            yield target
            yield from (f"{target}.{alias.name}" for alias in node.names)


def sources():
    return sorted(PACKAGE.rglob("*.py"))


def test_the_plugin_never_imports_the_experiment_tooling():
    offenders = [(str(path.relative_to(PACKAGE)), name) for path in sources()
                 if "experiments" not in path.relative_to(PACKAGE).parts
                 and str(path.relative_to(PACKAGE)) not in SHIMS
                 for name in imported(path)
                 if name.startswith("sparse_attn_plugin.experiments")]
    assert offenders == []


def test_no_module_imports_a_command_line_module():
    offenders = [(str(path.relative_to(PACKAGE)), name) for path in sources()
                 if str(path.relative_to(PACKAGE)) not in SHIMS
                 for name in imported(path) if name in CLIS]
    assert offenders == []


def test_our_code_never_runs_our_code_through_python_m():
    offenders = [str(path.relative_to(REPO)) for folder in ("sparse_attn_plugin", "data_prep")
                 for path in sorted((REPO / folder).rglob("*.py"))
                 if "python -m sparse_attn_plugin" in path.read_text()
                 or '"-m", "sparse_attn_plugin' in path.read_text()]
    assert offenders == []


def test_the_checks_see_a_planted_upward_import():
    """The import walk itself: an upward import and a CLI import, lazy, are found."""
    names = set(imported(PACKAGE / "normalizers" / "planted.py",
                         "def f():\n    from ..experiments import pipeline\n"
                         "    from ..evaluation import cli\n"))
    assert {"sparse_attn_plugin.experiments.pipeline",
            "sparse_attn_plugin.evaluation.cli"} <= names


def test_fairseq_commands_get_the_plugin_package_as_user_dir():
    from sparse_attn_plugin.experiments.pipeline import PLUGIN_DIR

    assert PLUGIN_DIR == PACKAGE.resolve() and (PLUGIN_DIR / "models").is_dir()


def test_tests_mirror_the_tiers_and_share_helpers_not_each_other():
    """Every test module is in a tier, ``tests/unit``, ``tests/e2e`` or ``tests/gpu``;
    what tests share lives in ``tests/helpers`` or ``conftest.py``, never in another test
    module."""
    tests = REPO / "tests"
    modules = sorted(tests.rglob("test_*.py"))
    assert modules and {path.parent.name for path in modules} == {"unit", "e2e", "gpu"}
    assert all(path.parent.parent == tests for path in modules)
    offenders = [(path.name, name) for path in modules for name in imported(path)
                 if name.split(".")[0].startswith("test_")]
    assert offenders == []
    names = [path.name for path in modules]
    assert len(names) == len(set(names))  # one module name per test file, across tiers
