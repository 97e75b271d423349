"""What many tests share: the repository's paths, the virtualenv's executables, the real
corpora beside the checkout, and fairseq subprocesses' environment. The other modules
of this package hold runners, stand-ins and references (:mod:`.fairseq_runs`,
:mod:`.models`, :mod:`.reference`, :mod:`.scores`, :mod:`.fakes`, :mod:`.aligners`,
:mod:`.corpora`)."""

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLUGIN = str(REPO / "sparse_attn_plugin")  # --user-dir, whatever the working directory
#: ``../shared/realdata``: the real release files CI has beside the checkout (elsewhere,
#: e.g. for a copy of the checkout: ``SPARSE_ATTN_REALDATA=DIR``).
REALDATA = Path(os.environ.get("SPARSE_ATTN_REALDATA", REPO.parent / "shared" / "realdata"))

#: What some tests need of the machine (``@pytest.mark.requires(NAME)``): how to tell it is
#: there, and what it is. Where it is missing such a test is skipped, except under CI
#: (``CI`` set), which has all of them: there it fails with one line (tests/conftest.py).
REQUIREMENTS = {
    "realdata": (REALDATA.is_dir, f"../shared/realdata ({REALDATA})"),
    "java": (lambda: shutil.which("java") is not None, "Java, for METEOR (java on PATH)"),
    "triton": (lambda: importlib.util.find_spec("triton") is not None,
               "the triton package (Linux x86_64)"),
}
needs_realdata = pytest.mark.requires("realdata")
needs_java = pytest.mark.requires("java")


def fairseq_env():
    """Environment for fairseq subprocesses: one thread each, quiet warnings."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return env


def load_benchmark(name: str):
    """``benchmarks/NAME.py`` as a module (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
