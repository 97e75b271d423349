"""The package's metadata: one version (``sparse_attn_plugin.__version__``, which
pyproject.toml reads without importing anything and CITATION.cff and CHANGELOG.md repeat),
the Python version README asks for, the licence, and a CITATION.cff that parses and cites
the papers README's "Citing and licence" lists."""

import ast
import functools
import importlib.metadata
import json
import re
import subprocess
import sys
import sysconfig

import yaml

from helpers import REPO

INIT = REPO / "sparse_attn_plugin" / "__init__.py"
#: What a CITATION.cff (CFF 1.2.0) must say for a software release.
CFF_KEYS = {"cff-version", "message", "title", "authors", "version", "date-released",
            "license", "type", "references"}


def source_version() -> str:
    """``__version__`` as a string literal at the top level of the package's __init__: the
    form setuptools' ``attr:`` reads statically, without importing the package."""
    tree = ast.parse(INIT.read_text())
    values = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
              and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
              and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)]
    assert len(values) == 1, "sparse_attn_plugin/__init__.py: one __version__ = '...'"
    return values[0]


def citation() -> dict:
    return yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def build_configuration() -> dict:
    """pyproject.toml's [project] as setuptools reads it, and the version as setuptools
    expands its ``attr:`` at build time, in a fresh process: with the modules that reading
    them imported and the warnings it gave."""
    code = ("import json, sys, warnings\n"
            "from setuptools.config.expand import read_attr\n"
            "from setuptools.config.pyprojecttoml import read_configuration\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    config = read_configuration(sys.argv[1], expand=False)\n"
            "    attr = config['tool']['setuptools']['dynamic']['version']['attr']\n"
            "    version = read_attr(attr, root_dir=sys.argv[2])\n"
            "print(json.dumps({'project': config['project'], 'version': version,\n"
            "                  'modules': sorted(sys.modules),\n"
            "                  'warnings': [type(w.message).__name__ + ': ' + str(w.message)\n"
            "                               for w in caught]}))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(REPO / "pyproject.toml"), str(REPO)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_the_build_reads_the_version_from_the_source_without_importing_it():
    config = build_configuration()
    assert config["version"] == source_version()
    assert "version" in config["project"]["dynamic"]
    imported = [name for name in config["modules"]
                if name.split(".")[0] in ("sparse_attn_plugin", "fairseq", "torch")]
    assert imported == []
    assert [w for w in config["warnings"] if "Deprecat" in w] == []


def test_the_version_is_written_once():
    """Nowhere but __init__: pyproject names it dynamic and setup.py passes none."""
    pyproject = (REPO / "pyproject.toml").read_text()
    assert not re.search(r"^version\s*=", pyproject.split("[tool.")[0], re.M)
    assert 'version = { attr = "sparse_attn_plugin.__version__" }' in pyproject
    assert "version" not in (REPO / "setup.py").read_text().split('"""')[-1]


def test_citation_changelog_and_package_give_the_same_version():
    version = source_version()
    cff = citation()
    assert str(cff["version"]) == version
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    released = re.search(rf"^## \[{re.escape(version)}\] - (\d{{4}}-\d{{2}}-\d{{2}})$",
                         changelog, re.M)
    assert released, f"CHANGELOG.md: no '## [{version}] - DATE' section"
    assert str(cff["date-released"]) == released.group(1)


def test_the_installed_metadata_is_this_checkout_s():
    """What `make install` put in .venv: this version, these console scripts (read from
    site-packages: a stale ``sparse_attn_plugin.egg-info`` left in the checkout by an old
    build would come first on a path that starts at the checkout)."""
    site = sysconfig.get_paths()["purelib"]
    dist = next(importlib.metadata.distributions(name="sparse-attn", path=[site]))
    assert dist.version == source_version()
    assert dist.metadata["Requires-Python"] == ">=3.10"
    assert dist.metadata["License"] == "MIT"
    installed = {ep.name: ep.value for ep in dist.entry_points
                 if ep.group == "console_scripts"}
    declared = setup_keywords()["entry_points"]["console_scripts"]
    assert installed == dict(tuple(part.strip() for part in line.split("=")) for line in declared)


def test_requires_python_is_what_readme_asks_for():
    project = build_configuration()["project"]
    readme = (REPO / "README.md").read_text()
    asked = set(re.findall(r"Python (\d+\.\d+) or newer", readme))
    assert asked == {"3.10"}
    assert project["requires-python"] == ">=3.10"


def setup_keywords() -> dict:
    """The literal keyword arguments of setup.py's ``setup(...)`` call (all but
    ``extras_require``, which it derives from sparse_attn_plugin/extras.py:
    tests/unit/test_extras.py)."""
    call = next(node for node in ast.walk(ast.parse((REPO / "setup.py").read_text()))
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup")
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords
            if kw.arg != "extras_require"}


def test_the_licence_is_mit_everywhere():
    licence = (REPO / "LICENSE").read_text()
    assert licence.startswith("MIT License\n")
    assert "Copyright (c) 2026 the sparse-attn developers" in licence
    assert setup_keywords()["license"] == "MIT"
    assert "license" in build_configuration()["project"]["dynamic"]
    assert citation()["license"] == "MIT"


def test_citation_cff_is_a_software_citation_with_its_references():
    cff = citation()
    assert CFF_KEYS <= set(cff)
    assert str(cff["cff-version"]) == "1.2.0"
    assert cff["type"] == "software"
    assert all("name" in a or "family-names" in a for a in cff["authors"])
    for ref in cff["references"]:
        assert {"type", "title", "authors", "year"} <= set(ref), ref.get("title")
        assert all({"family-names", "given-names"} <= set(a) for a in ref["authors"])


def test_citation_cites_the_papers_readme_lists():
    """The same papers, by title and year, as README's "Citing and licence" table."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Citing and licence"):]
    rows = re.findall(r"^\| [^|]+ \| [^|]*?\((\d{4})\), (.+?), [^,|]+ \|$", section, re.M)
    listed = {(title, int(year)) for year, title in rows}
    cited = {(ref["title"], ref["year"]) for ref in citation()["references"]}
    assert len(listed) == 7
    assert cited == listed
