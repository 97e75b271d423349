"""sparse_attn_plugin/extras.py: the one table of what each command needs, every command
in it, the extras' requirements as setup.py and tools/install.py read them, and the one
line a command without its extras ends with. The commands on an install without extras:
tests/e2e/test_slim_install.py."""

import ast
import importlib.util
import re
import subprocess
import sys

import pytest

from sparse_attn_plugin import extras

from helpers import REPO
from helpers.commands import console_scripts, python_m_modules


def entry_modules():
    """The modules setup.py's console scripts run, and those with a ``__main__`` block."""
    return set(console_scripts().values()) | set(python_m_modules())


def test_every_command_is_in_the_table_and_the_table_names_real_modules_and_extras():
    assert [module for module in sorted(entry_modules()) if extras.needs_of(module) is None] \
        == []
    for name, needs in extras.COMMANDS.items():
        path = REPO / name.replace(".", "/")
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), name
        named = {*needs.always, *(e for more in needs.options.values() for e in more)}
        assert named <= set(extras.EXTRAS) - set(extras.DEVELOPMENT), name


def test_each_command_module_imports_the_check_before_anything_else():
    """Its own first import, or its package's where that imports an extra's module."""
    first = "import sparse_attn_plugin.extras_check"
    for module in sorted(entry_modules()):
        path = REPO / (module.replace(".", "/") + ".py")
        package = path.parent / "__init__.py"
        bodies = [ast.parse(p.read_text()).body for p in (package, path)]
        imports = [[node for node in body if isinstance(node, (ast.Import, ast.ImportFrom))]
                   for body in bodies]
        assert any(found and ast.unparse(found[0]) == first for found in imports), module


def test_a_package_entry_covers_its_modules_and_an_option_adds_its_extras():
    assert extras.needs_of("sparse_attn_data.wmt14_en_de") == extras.COMMANDS["sparse_attn_data"]
    assert extras.needs_of("sparse_attn_data") is extras.COMMANDS["sparse_attn_data"]
    assert extras.needs_of("sparse_attn_plugin.functional") is None
    assert extras.needs_of("pytest") is None
    synth = "sparse_attn_data.synthetic"
    assert extras.needed(synth, ["--out", "raw"]) == ()
    for given in (["--bin", "b"], ["--bin=b"], ["--bi", "b"], ["--out", "o", "--b=x"]):
        assert extras.needed(synth, given) == ("fairseq",), given
    for other in (["--binary", "b"], ["-b"], ["--"], ["bin"]):
        assert extras.needed(synth, other) == (), other
    assert extras.needed("sparse_attn_experiments.compare", []) == ("fairseq", "metrics",
                                                                   "plots")


def test_the_hint_is_one_line_naming_the_extras_and_fairseq():
    assert extras.install_hint(("metrics",)) == \
        "needs the 'metrics' extra: pip install 'sparse-attn[metrics]'"
    assert extras.install_hint(("data", "metrics", "plots")) == (
        "needs the 'data', 'metrics' and 'plots' extras: "
        "pip install 'sparse-attn[data,metrics,plots]'")
    assert extras.install_hint(("fairseq", "metrics"), True) == (
        "needs fairseq and the 'fairseq' and 'metrics' extras: make install, or pip install "
        "'sparse-attn[fairseq,metrics]', then pip install --no-deps --no-build-isolation "
        "fairseq-fixed==0.12.3.1 (README, Installing)")
    assert extras.install_hint((), True) == (
        "needs fairseq: make install, or pip install --no-deps --no-build-isolation "
        "fairseq-fixed==0.12.3.1 (README, Installing)")


def test_fairseq_is_the_one_make_install_installs():
    assert re.search(r"^FAIRSEQ_SPEC \?= (\S+)$", (REPO / "Makefile").read_text(),
                     re.M)[1] == extras.FAIRSEQ


@pytest.fixture
def command(monkeypatch):
    """Make this process run ``python -m MODULE`` with arguments, as the check sees it."""
    def running(module, *argv):
        monkeypatch.setattr(extras, "running_command", lambda: (f"python -m {module}", module))
        monkeypatch.setattr(sys, "argv", [module, *argv])
    return running


def test_a_command_missing_a_module_of_an_extra_or_fairseq_is_refused(command, monkeypatch):
    command("sparse_attn_data.synthetic", "--out", "raw", "--bin", "bin")
    extras.refuse_missing_extras()  # this venv has them all
    monkeypatch.setitem(sys.modules, "fairseq", None)  # found as missing, nothing imported
    with pytest.raises(SystemExit) as refused:
        extras.refuse_missing_extras()
    assert str(refused.value) == ("python -m sparse_attn_data.synthetic: error: "
                                  f"{extras.install_hint((), True)}")
    monkeypatch.setitem(sys.modules, "thot", None)
    command("sparse_attn_plugin.evaluation.cli")
    with pytest.raises(SystemExit) as refused:
        extras.refuse_missing_extras()
    assert str(refused.value) == ("python -m sparse_attn_plugin.evaluation.cli: error: "
                                  "needs the 'metrics' extra: pip install 'sparse-attn[metrics]'")
    command("sparse_attn_data.synthetic", "--out", "raw")
    extras.refuse_missing_extras()


def test_a_process_that_runs_no_command_is_left_alone():
    """A program importing the package (here ``python -c``), and ``python -m`` of another
    module, are no command: the check is not even asked."""
    code = ("import sys; sys.modules['thot'] = None  # the aligner's, of the metrics extra\n"
            "import sparse_attn_plugin.evaluation, sparse_attn_plugin.extras as e\n"
            "print(e.running_command())\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True)
    assert (done.returncode, done.stdout) == (0, "None\n"), done.stderr
    done = subprocess.run([sys.executable, "-m", "sparse_attn_plugin.extras_check"], cwd=REPO,
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_setup_and_install_read_the_extras_from_the_table():
    """setup.py's extras are the table's, [test] with requirements-dev.txt's tools, [all]
    every extra but for development, [dev] all of them; tools/install.py installs fairseq's
    needs, the tools and the package's extras from the same table."""
    from setuptools import setup  # noqa: F401  (setup.py's; the call is replaced below)

    captured = {}
    source = (REPO / "setup.py").read_text()
    namespace = {"__file__": str(REPO / "setup.py"), "__name__": "setup_under_test"}
    exec(compile(source.replace("from setuptools import setup",
                                "setup = lambda **kwargs: captured.update(kwargs)"),
                 "setup.py", "exec"), {**namespace, "captured": captured})
    declared = captured["extras_require"]
    for name in extras.EXTRAS:
        assert declared[name][:len(extras.EXTRAS[name])] == list(extras.specs(name))
    assert {"pytest>=8", "hypothesis>=6.100", "entmax>=1.3"} <= set(declared["test"])
    assert set(declared["all"]) == {spec for name in extras.EXTRAS
                                    if name not in extras.DEVELOPMENT
                                    for spec in extras.specs(name)}
    assert set(declared["dev"]) == {s for name in ("all", "lint", "test") for s in declared[name]}
    assert "matplotlib>=3.8" not in declared["test"] and "transformers>=5.24,<6" in declared["hf"]

    spec = importlib.util.spec_from_file_location("install_script", REPO / "tools" / "install.py")
    install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install)
    assert install.FAIRSEQ_NEEDS == extras.specs("fairseq")
    assert install.NEED_TORCH == ("entmax>=1.3",)
    assert install.PACKAGE_EXTRAS == ("data", "fairseq", "metrics", "plots")
    assert install.OPTIONAL_SPECS["hf"] == extras.specs("hf")
