"""The house rules of the code's layout, read from the source.

Three top-level packages, each depending only on those above it:

* ``sparse_attn_plugin``: what ``--user-dir`` loads, and the library under it (the
  normalisers and their functional API: plain PyTorch, no fairseq);
* ``sparse_attn_data``: the corpus recipes, built on the plugin's files and aligner;
* ``sparse_attn_experiments``: compare, reproduce, the results index, on both.

Inside the plugin, its folders and top-level modules lie in layers (:data:`PLUGIN_LAYERS`),
each importing only its own and those below: the library under the models' parts, the
models under the criteria and tasks that train them, the commands on top. No module imports
another that imports it back, one module decides which normaliser a site gets, libraries
never import a command-line module, and our code never runs our own code through
``python -m``. Every rule is also shown to catch the arrow it forbids,
planted in a copy of the tree (:func:`test_each_old_arrow_is_caught`).
"""

import ast
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from helpers import REPO

PACKAGES = ("sparse_attn_plugin", "sparse_attn_data", "sparse_attn_experiments")
#: Which package may import which (itself aside).
MAY_IMPORT = {"sparse_attn_plugin": set(),
              "sparse_attn_data": {"sparse_attn_plugin"},
              "sparse_attn_experiments": {"sparse_attn_plugin", "sparse_attn_data"}}
#: The library under the plugin: plain PyTorch, importing from the plugin only these (the
#: registry: the torch-free table of the normalisers its names come from).
LIBRARY = ("sparse_attn_plugin.normalizers", "sparse_attn_plugin.functional",
           "sparse_attn_plugin.losses")
LIBRARY_MAY_IMPORT = ("sparse_attn_plugin.normalizers", "sparse_attn_plugin.errors",
                      "sparse_attn_plugin.normalizer_registry",
                      "sparse_attn_plugin.normalizer_options", "sparse_attn_plugin.functional")
#: The plugin's folders and top-level modules, lowest first: each imports only from its own
#: layer and those below (what criteria, tasks and models share lies under all three).
PLUGIN_LAYERS = (
    ("errors", "files", "reading", "markdown", "command_line", "extras", "extras_check", "sites",
     "normalizer_options", "normalizer_registry", "checkpoint_globals"),     # the ground
    ("normalizers", "functional", "losses", "entmax_compat"),  # the library
    ("site_normalizers", "modules", "search"),                 # what models are made of
    ("models",),
    ("criterions", "tasks"),                                   # what trains the models
    ("registration",),
    ("checkpoints", "flag_listing", "huggingface", "analysis", "evaluation"),  # for users
)
#: The one module that turns a model's configuration into each site's normaliser.
SITE_DECIDER = "sparse_attn_plugin.site_normalizers"
#: The command-line modules (each one ``main``), which only console scripts import.
CLIS = {"sparse_attn_plugin.evaluation.cli", "sparse_attn_plugin.evaluation.align_cli",
        "sparse_attn_plugin.analysis.cli", "sparse_attn_plugin.flag_listing",
        "sparse_attn_experiments.compare",
        "sparse_attn_experiments.reproduce", "sparse_attn_experiments.results_index",
        "sparse_attn_experiments.toy_example"}
#: Paths that are gone and must stay gone: shims of moved commands, the tooling inside
#: the plugin, and a top-level package with a generic name.
GONE = ("sparse_attn_plugin/compare.py", "sparse_attn_plugin/reproduce.py",
        "sparse_attn_plugin/results_index.py", "sparse_attn_plugin/analysis/toy_example.py",
        "sparse_attn_plugin/models/flag_listing.py", "sparse_attn_plugin/tasks/coverage_penalty.py",
        "sparse_attn_plugin/tasks/zero_probability_search.py",
        "sparse_attn_plugin/experiments", "data_prep")

Tree = Dict[str, "Module"]


class Module:
    """One source file: its dotted name, whether it is a package's ``__init__``, and its
    parsed source."""

    def __init__(self, name: str, is_package: bool, source: str):
        self.name, self.is_package = name, is_package
        self.tree = ast.parse(source)

    @property
    def package(self) -> List[str]:
        parts = self.name.split(".")
        return parts if self.is_package else parts[:-1]


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_tree() -> Tree:
    return {module_name(path): Module(module_name(path), path.name == "__init__.py",
                                      path.read_text())
            for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))}


def imported(module: Module) -> Iterator[str]:
    """The absolute names every import of ``module`` reaches, lazy ones included (for
    ``from p import x``: both ``p`` and ``p.x``)."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            package = module.package
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            yield target
            yield from (f"{target}.{alias.name}" for alias in node.names)


def edges(tree: Tree, name: str) -> set:
    """The modules of ``tree`` that ``name`` imports: for ``from p import x`` with ``p.x`` a
    module, ``p.x`` only (``p`` is what Python runs first anyway, not an arrow back)."""
    found = set(imported(tree[name]))
    return {n for n in found if n in tree and n != name
            and not (tree[n].is_package and any(m.startswith(n + ".") and m in tree
                                                for m in found))}


def top(name: str) -> str:
    return name.split(".")[0]


# -- the rules: each returns what breaks it ----------------------------------------------------
def package_arrows(tree: Tree) -> List[str]:
    return [f"{name} imports {target}" for name in tree for target in imported(tree[name])
            if top(target) in PACKAGES and top(target) != top(name)
            and top(target) not in MAY_IMPORT[top(name)]]


def cycles(tree: Tree) -> List[str]:
    """Strongly connected groups of more than one module (Tarjan)."""
    graph = {name: edges(tree, name) for name in tree}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(" <-> ".join(sorted(group)))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def library_arrows(tree: Tree) -> List[str]:
    return [f"{name} imports {target}" for name in tree
            if any(name == lib or name.startswith(lib + ".") for lib in LIBRARY)
            for target in imported(tree[name])
            if top(target) in ("fairseq", "fairseq_cli")
            or (top(target) in PACKAGES
                and not any(target == ok or target.startswith(ok + ".")
                            for ok in LIBRARY_MAY_IMPORT))]


def site_deciders(tree: Tree) -> List[str]:
    """Plugin modules outside the library and :data:`SITE_DECIDER` that build a
    normaliser by name or read a model's ``attn_fn`` flags themselves."""
    found = []
    for name, module in tree.items():
        if (top(name) != "sparse_attn_plugin" or name == SITE_DECIDER
                or any(name == lib or name.startswith(lib + ".") for lib in LIBRARY)):
            continue
        for node in ast.walk(module.tree):
            called = node.func if isinstance(node, ast.Call) else None
            if isinstance(called, (ast.Name, ast.Attribute)) and \
                    getattr(called, "id", getattr(called, "attr", None)) == "build_normalizer":
                found.append(f"{name} calls build_normalizer")
            if isinstance(node, ast.Attribute) and node.attr.endswith("attn_fn") and \
                    isinstance(node.ctx, ast.Load):  # setting a flag's default is the flags'
                found.append(f"{name} reads .{node.attr}")
    return found


def plugin_layer(name: str) -> int:
    """The layer of a plugin module (its folder, or itself at the top level); a unit no
    layer names is an error to fix in :data:`PLUGIN_LAYERS`."""
    unit = name.split(".")[1]
    return next(i for i, layer in enumerate(PLUGIN_LAYERS) if unit in layer)


def layer_arrows(tree: Tree) -> List[str]:
    found = []
    for name in tree:
        if top(name) != "sparse_attn_plugin" or name == "sparse_attn_plugin":
            continue
        for target in imported(tree[name]):
            if top(target) == "sparse_attn_plugin" and target != "sparse_attn_plugin" and \
                    plugin_layer(target) > plugin_layer(name):
                found.append(f"{name} imports {target}, a layer above it")
    return found


def cli_imports(tree: Tree) -> List[str]:
    return [f"{name} imports {target}" for name in tree
            for target in imported(tree[name]) if target in CLIS]


RULES = (package_arrows, cycles, library_arrows, site_deciders, cli_imports, layer_arrows)


# -- the tests ---------------------------------------------------------------------------------
@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_tree_keeps_the_rule(rule):
    assert rule(read_tree()) == []


#: Arrows the code had before the packages were split (issue 40), each planted in a copy
#: of the tree as ``(module, source added to it, the rule that must catch it)``.
OLD_ARROWS = [
    ("sparse_attn_plugin.sites", "from sparse_attn_experiments import pipeline\n",
     package_arrows),
    ("sparse_attn_data.synthetic", "from sparse_attn_experiments.provenance import x\n",
     package_arrows),
    ("sparse_attn_plugin.normalizers.triton_cases", "from . import fused_triton\n", cycles),
    ("sparse_attn_plugin.normalizers.dispatch", "from ..site_normalizers import FITS\n",
     cycles),
    ("sparse_attn_plugin.normalizers.base", "from ..sites import SITES\n", library_arrows),
    ("sparse_attn_plugin.normalizers.entmax_family", "def f():\n    import fairseq\n",
     library_arrows),
    ("sparse_attn_plugin.modules.transformer_layers",
     "def f(cfg):\n    return getattr(cfg, 'attn_fn'), cfg.decoder_cross_attn_fn\n",
     site_deciders),
    ("sparse_attn_plugin.modules.bounded_attention",
     "from ..normalizers import build_normalizer\nbuild_normalizer('csparsemax', 1)\n",
     site_deciders),
    ("sparse_attn_plugin.analysis.plots", "def f():\n    from ..evaluation import cli\n",
     cli_imports),
    # the model layer on a criterion and a task (issue 56)
    ("sparse_attn_plugin.models.output_entmax",
     "from ..criterions.entmax_loss import output_entmax_of\n", layer_arrows),
    ("sparse_attn_plugin.models.fertility_args",
     "from ..tasks.sparse_translation import SparseTranslationTask\n", layer_arrows),
    ("sparse_attn_plugin.normalizers.base", "from ..modules import fertility\n", layer_arrows),
]


@pytest.mark.parametrize("module,planted,rule", OLD_ARROWS,
                         ids=[f"{m.split('.')[-1]}-{r.__name__}" for m, _, r in OLD_ARROWS])
def test_each_old_arrow_is_caught(module, planted, rule):
    tree = read_tree()
    path = REPO / (module.replace(".", "/") + ".py")
    tree[module] = Module(module, False, path.read_text() + "\n" + planted)
    assert rule(tree) != []


def test_what_moved_is_gone_and_the_wheel_holds_the_three_packages():
    assert [path for path in GONE if (REPO / path).exists()] == []
    pyproject = (REPO / "pyproject.toml").read_text()
    include = pyproject.split("[tool.setuptools.packages.find]")[1].split("\n\n")[0]
    assert sorted(set(include.replace('"', " ").replace(".*", " ").split()) & set(PACKAGES)) \
        == sorted(PACKAGES)
    assert "data_prep" not in include


def test_our_code_never_runs_our_code_through_python_m():
    """Not in a subprocess (``"-m", "sparse_attn_..."``), nor as advice for the commands
    that have console scripts (the corpus recipes are ``python -m`` commands)."""
    offenders = [str(path.relative_to(REPO)) for package in PACKAGES
                 for path in sorted((REPO / package).rglob("*.py"))
                 if any(f'"-m", "{p}' in path.read_text() for p in PACKAGES)
                 or any(f"python -m {p}" in path.read_text()
                        for p in ("sparse_attn_plugin", "sparse_attn_experiments"))]
    assert offenders == []


def test_fairseq_commands_get_the_plugin_package_as_user_dir():
    from sparse_attn_experiments.pipeline import PLUGIN_DIR

    assert PLUGIN_DIR == (REPO / "sparse_attn_plugin").resolve()
    assert (PLUGIN_DIR / "models").is_dir()


def test_tests_mirror_the_tiers_and_share_helpers_not_each_other():
    """Every test module is in a tier, ``tests/unit``, ``tests/e2e`` or ``tests/gpu``;
    what tests share lives in ``tests/helpers`` or ``conftest.py``, never in another test
    module."""
    tests = REPO / "tests"
    modules = sorted(tests.rglob("test_*.py"))
    assert modules and {path.parent.name for path in modules} == {"unit", "e2e", "gpu"}
    assert all(path.parent.parent == tests for path in modules)
    offenders = [(path.name, name) for path in modules
                 for name in imported(Module(path.stem, False, path.read_text()))
                 if name.split(".")[0].startswith("test_")]
    assert offenders == []
    names = [path.name for path in modules]
    assert len(names) == len(set(names))  # one module name per test file, across tiers


def test_every_plugin_folder_and_module_has_a_layer():
    units = {name.split(".")[1] for name in read_tree()
             if top(name) == "sparse_attn_plugin" and name != "sparse_attn_plugin"}
    placed = [unit for layer in PLUGIN_LAYERS for unit in layer]
    assert sorted(units) == sorted(placed) and len(placed) == len(set(placed))
