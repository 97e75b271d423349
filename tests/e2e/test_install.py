"""``make install`` as a user runs it, into a folder whose ``bin/python`` only records what
it is asked to do: the stamp holds the torch and fairseq specs, and another spec replaces
torch and rebuilds fairseq without pip's wheel cache; ``TORCH=system`` links the torch of
``PYTHON`` instead of installing one, ``WHEELS=DIR`` installs from DIR alone, and
``make wheels`` plans its downloads for the Python and platform named (``make -n``, which
tools/install.py answers with its dry run); ``make demo`` and ``make bench`` write under
.work/ unless told to publish into results/.

The ``slow`` tests at the end install for real: ``TORCH=system`` with this test run's
Python, and ``make wheels`` followed by ``make install WHEELS=DIR TORCH=system`` with no
network (a network namespace of its own where ``unshare -n`` is allowed, and pip's indexes
and configuration pointed nowhere in any case), for a Python that has torch and nothing
else."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from helpers import REPO
from helpers.venvs import PY, checkout_copy, venv_with_this_torch

DEFAULT = "torch==2.13.0 fairseq-fixed==0.12.3.1"
# What a stand-in PYTHON with a CUDA torch says when make install TORCH=system asks it: torch's
# version, its own Python version, triton's, the folder holding torch and its site folders.
SYSTEM = "2.11.0+cu130 3.12 3.6.0 /opt/sys/site /opt/sys/site"
SYSTEM_SPEC = "torch=system:2.11.0+cu130:/opt/sys/site fairseq-fixed==0.12.3.1"
# Settings a caller's make or environment may hold (make test TORCH=system, an exported
# PYTHON) that would change what these tests ask for.
CALLERS = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TORCH", "TORCH_SPEC", "TORCH_INDEX",
           "FAIRSEQ_SPEC", "WHEELS", "WHEELS_PYTHON", "WHEELS_PLATFORM", "PYTHON", "VENV",
           "PUBLISH")


def make(*args, env=None):
    environ = {k: v for k, v in os.environ.items() if k not in CALLERS}
    return subprocess.run(["make", *args], cwd=REPO, capture_output=True, text=True,
                          env={**environ, **(env or {})})


@pytest.fixture
def venv(tmp_path):
    """A stand-in for .venv/: its python logs its arguments (with `` +pth`` while the link to
    a system torch is there) and what the requirements files named with ``-r`` hold, and
    says fairseq is missing."""
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text('#!/bin/bash\nhere="$(dirname "$0")/.."\n'
                      'pth=$(ls "$here"/lib/python*/site-packages/_system_torch.pth 2>/dev/null)\n'
                      'echo "$@${pth:+ +pth}" >> "$here/calls"\n'
                      'for a; do [ "$r" = -r ] && cat "$a" >> "$here/required"; r=$a; done\n'
                      'case "$2" in "import fairseq"|"import sys, fairseq;"*) exit 1;; esac\n'
                      'exit 0\n')
    python.chmod(0o755)
    (tmp_path / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    return tmp_path


@pytest.fixture
def system_python(tmp_path):
    """A stand-in for a cluster's python with a CUDA torch and triton."""
    python = tmp_path / "system" / "python"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\necho "{SYSTEM}"\n')
    python.chmod(0o755)
    return python


def make_install(venv, *assignments):
    proc = make("-s", "install", f"VENV={venv}", *assignments)
    assert proc.returncode == 0, proc.stderr
    calls = (venv / "calls").read_text() if (venv / "calls").exists() else ""
    (venv / "calls").unlink(missing_ok=True)
    return proc.stdout, calls


def recorded(spec, without=""):
    """What the stamp holds after an install of ``spec`` with ``WITHOUT=without``."""
    return f"{spec}\nwithout: {without}".strip()


def stamp(venv, text, *, stale=False):
    (venv / ".installed").write_text(text + "\n")
    if stale:  # older than the Makefile: install runs again for that reason alone
        os.utime(venv / ".installed", (0, 0))


def test_an_install_with_the_same_specs_is_a_no_op(venv):
    stamp(venv, recorded(DEFAULT))
    assert make_install(venv) == ("", "")


def test_a_one_line_stamp_of_the_same_spec_installs_in_place(venv):
    stamp(venv, DEFAULT)  # written before the stamp recorded WITHOUT
    printed, calls = make_install(venv)
    assert "uninstall" not in calls and "install -e ." in calls.replace(
        "--no-build-isolation ", "")
    assert (venv / ".installed").read_text().strip() == recorded(DEFAULT)


def test_without_leaves_optional_parts_out_and_a_later_install_adds_them(venv):
    stamp(venv, recorded(DEFAULT))
    printed, calls = make_install(venv, "WITHOUT=meteor lint hf")
    assert "uninstall" not in calls
    for part in ("pycocoevalcap", "ruff", "transformers"):
        assert part not in calls
    assert "-r requirements-dev.txt" in calls
    assert (venv / ".installed").read_text().strip() == recorded(DEFAULT, "hf lint meteor")
    assert make_install(venv, "WITHOUT=hf meteor lint") == ("", "")  # the order is free
    printed, calls = make_install(venv)
    assert "uninstall" not in calls
    assert '--no-deps pycocoevalcap==1.2' in calls
    assert "ruff>=0.6 transformers>=5.24,<6" in calls
    assert (venv / ".installed").read_text().strip() == recorded(DEFAULT)


def test_without_names_only_optional_parts():
    proc = make("-n", "install", "WITHOUT=meteor fairseq")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "WITHOUT=meteor fairseq: the optional parts are meteor lint hf." in proc.stderr


def test_a_changed_project_reinstalls_without_replacing_torch(venv):
    stamp(venv, DEFAULT, stale=True)
    printed, calls = make_install(venv)
    assert "uninstall" not in calls and "--no-cache-dir" not in calls
    assert "install torch==2.13.0" in calls and "install -e ." in calls.replace(
        "--no-build-isolation ", "")
    assert (venv / ".installed").read_text().strip() == recorded(DEFAULT)


def test_another_torch_replaces_torch_and_rebuilds_fairseq(venv):
    stamp(venv, DEFAULT)
    index = "--index-url https://download.pytorch.org/whl/cu128"
    printed, calls = make_install(venv, "TORCH_SPEC=torch==2.8.0", f"TORCH_INDEX={index}")
    assert f"installed with '{DEFAULT}', asked for 'torch==2.8.0 {index} " \
           "fairseq-fixed==0.12.3.1': replacing torch and rebuilding fairseq" in printed
    lines = calls.splitlines()

    def first(words, but="\0"):
        return next(i for i, line in enumerate(lines) if words in line and but not in line)

    uninstall = first("uninstall -y torch fairseq-fixed")
    torch, fairseq = first(f"install {index} torch==2.8.0"), first("fairseq-fixed==0.12.3.1",
                                                                    but="uninstall")
    assert uninstall < torch < fairseq and "--no-cache-dir" in lines[fairseq]
    assert (venv / ".installed").read_text().strip() == recorded(
        f"torch==2.8.0 {index} fairseq-fixed==0.12.3.1")
    assert not (venv / ".rebuild").exists()
    assert make_install(venv, "TORCH_SPEC=torch==2.8.0", f"TORCH_INDEX={index}") == ("", "")


def test_a_stamp_from_before_specs_were_recorded_installs_in_place(venv):
    stamp(venv, "")
    printed, calls = make_install(venv)
    assert "uninstall" not in calls and "--no-cache-dir" not in calls
    assert (venv / ".installed").read_text().strip() == recorded(DEFAULT)


@pytest.mark.parametrize("publish,where", [([], ".work"), (["PUBLISH=results"], "results")])
def test_demo_and_bench_write_under_work_unless_published(venv, publish, where):
    stamp(venv, DEFAULT)
    for target, outs in (("demo", ["demo"]), ("bench", ["bench", "evaluation"])):
        proc = make("-n", target, f"VENV={venv}", *publish)
        assert proc.returncode == 0, proc.stderr
        planned = proc.stdout
        found = {line.split("--out ")[1].split()[0] for line in planned.splitlines()
                 if "--out " in line}
        assert found == {f"{where}/{out}" for out in outs}


def test_make_test_runs_the_unit_and_e2e_tiers_and_test_gpu_the_gpu_tier(venv):
    stamp(venv, DEFAULT)
    for target, tiers in (("test", "tests/unit tests/e2e"), ("test-gpu", "tests/gpu")):
        proc = make("-n", target, f"VENV={venv}")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[-1].endswith(f"-m pytest -q -n 2 --dist loadgroup "
                                                     f"--no-loadscope-reorder {tiers}")


def pip_installs(calls):
    return [line for line in calls.splitlines() if " pip " in line and " install " in line]


def test_a_system_torch_is_linked_and_pinned_never_installed(venv, system_python):
    printed, calls = make_install(venv, "TORCH=system", f"PYTHON={system_python}")
    site = venv / "lib" / "python3.12" / "site-packages"
    assert (site / "_system_torch.pth").read_text() == \
        "import site; site.addsitedir('/opt/sys/site')\n"
    pins = venv / "system-torch.txt"
    assert pins.read_text() == "torch==2.11.0+cu130\ntriton==3.6.0\n"
    installs = pip_installs(calls)
    assert len(installs) == 6 and all(f"-c {pins}" in line for line in installs)
    assert not any(word in line.split() for line in installs for word in ("torch==2.13.0",
                                                                          "torch", "triton"))
    assert "uninstall" not in calls
    # its own fairseq, though the system's site folders may hold one
    fairseq = next(line for line in installs if "fairseq-fixed==0.12.3.1" in line)
    assert "--no-deps --no-build-isolation --ignore-installed" in fairseq
    required = (venv / "required").read_text()  # what the -r files held: triton left out
    assert "pytest" in required and not re.search("^triton", required, re.M)
    assert (venv / ".installed").read_text().strip() == recorded(SYSTEM_SPEC)
    assert make_install(venv, "TORCH=system", f"PYTHON={system_python}") == ("", "")


def test_a_spec_change_to_and_from_the_system_torch_unlinks_it_before_uninstalling(
        venv, system_python):
    stamp(venv, DEFAULT)
    printed, calls = make_install(venv, "TORCH=system", f"PYTHON={system_python}")
    assert f"asked for '{SYSTEM_SPEC}': replacing torch and rebuilding fairseq" in printed
    lines = calls.splitlines()
    uninstall = next(i for i, line in enumerate(lines) if "uninstall -y torch" in line)
    assert not lines[uninstall].endswith("+pth") and lines[-1].endswith("+pth")
    assert "--no-cache-dir" in next(line for line in lines if "fairseq-fixed==" in line)

    printed, calls = make_install(venv)
    assert f"installed with '{SYSTEM_SPEC}', asked for '{DEFAULT}'" in printed
    assert "uninstall -y torch fairseq-fixed" in calls and "+pth" not in calls
    assert "install torch==2.13.0" in calls and not (venv / "system-torch.txt").exists()
    assert (venv / ".installed").read_text().strip() == recorded(DEFAULT)


def test_wheels_dir_installs_everything_from_it_and_no_index(venv):
    stamp(venv, DEFAULT, stale=True)
    index = "--index-url https://download.pytorch.org/whl/cu128"
    printed, calls = make_install(venv, "WHEELS=/some/wheels", f"TORCH_INDEX={index}")
    installs = pip_installs(calls)
    assert len(installs) == 7 and "index-url" not in calls
    assert all(" install --no-index --find-links /some/wheels " in line for line in installs)
    assert "--no-index --find-links /some/wheels torch==2.13.0" in installs[0]


@pytest.mark.parametrize("torch", ["system", "default"])
def test_make_wheels_plans_binary_downloads_for_the_python_and_platform_named(
        system_python, torch):
    assignments = ["TORCH=system"] if torch == "system" else [
        "TORCH_INDEX=--index-url https://download.pytorch.org/whl/cu128"]
    proc = make("-n", "wheels", "WHEELS=/w", "WHEELS_PYTHON=3.12", f"PYTHON={system_python}",
                *assignments)
    assert proc.returncode == 0, proc.stderr
    # each pip command on a line of its own, its words unquoted
    planned = "\n".join(" ".join(shlex.split(line)) for line in proc.stdout.splitlines()
                        if " -m pip " in line)
    downloads = [line for line in planned.splitlines() if " download " in line]
    for line in downloads:
        assert "--dest /w --only-binary=:all: --python-version 3.12" in line
        # pip takes a manylinux_2_X tag literally: the older ones are named too
        assert all(f"--platform {tag}_x86_64" in line for tag in (
            "manylinux_2_28", "manylinux_2_17", "manylinux2014", "manylinux1"))
    torch_downloads = [line for line in downloads if "torch==2.13.0" in line.split()]
    if torch == "system":
        assert not torch_downloads and "-r requirements-dev.txt" not in downloads[-1]
        assert "/requirements-dev-without-triton.txt " in downloads[-1]
    else:
        assert len(torch_downloads) == 1 and "--index-url" in torch_downloads[0]
        assert downloads[-1].endswith("-r requirements-dev.txt ruff>=0.6 "
                                      "transformers>=5.24,<6")
    # what needs torch is downloaded without its dependencies; nothing else may pull torch
    assert re.search(r" -c \S+/no-torch\.txt ", downloads[-1])
    assert "--no-deps pycocoevalcap==1.2 entmax>=1.3" in planned
    assert "pip wheel --no-deps --wheel-dir /w antlr4-python3-runtime==4.9.3" in planned
    # a clean copy of the checkout
    assert re.search(r"pip wheel --no-deps --wheel-dir /w \S+/source$", planned, re.M)


def test_make_wheels_needs_a_folder():
    proc = make("wheels")
    assert proc.returncode != 0 and "make wheels: name the folder" in proc.stderr


# --- for real --------------------------------------------------------------------------

def real(test):
    """Installs for real (minutes): the tests share their installs, on one worker."""
    return pytest.mark.slow(pytest.mark.xdist_group("install_for_real")(test))


def imported_from(python, tmp_path, names=("torch", "fairseq", "entmax", "numpy",
                                          "sparse_attn_plugin")):
    """Where ``python`` imports each of ``names`` from, run outside the checkout."""
    where = f"import json, {', '.join(names)}; print(json.dumps({{m.__name__: m.__file__ " \
            f"for m in ({', '.join(names)},)}}))"
    proc = subprocess.run([str(python), "-W", "ignore", "-c", where], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def own_packages(venv):
    return {path.name.lower() for path in (venv / "lib" / PY / "site-packages").iterdir()}


def offline():
    """How to run a command with no network: its own network namespace where unshare
    allows it, and, in any case, pip's indexes and configuration pointed nowhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k not in CALLERS}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple")
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"], env
    return [], env


@pytest.fixture(scope="module")
def system_install(tmp_path_factory):
    """make install TORCH=system PYTHON=<this run's python> into a new folder."""
    venv = tmp_path_factory.mktemp("system-install") / "venv"
    proc = make("-s", "install", "TORCH=system", f"PYTHON={sys.executable}", f"VENV={venv}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return venv


@pytest.fixture(scope="module")
def torch_only_python(tmp_path_factory):
    """A Python that has torch, triton and their needs, and nothing else."""
    return venv_with_this_torch(tmp_path_factory.mktemp("torch-only") / "python",
                                "--without-pip")


@pytest.fixture(scope="module")
def offline_install(tmp_path_factory, torch_only_python):
    """make wheels (this machine's Python and platform, TORCH=system) with this run's
    python, then make install WHEELS=DIR TORCH=system for the torch-only Python, offline."""
    folder = tmp_path_factory.mktemp("offline-install")
    wheels, venv = folder / "wheels", folder / "venv"
    proc = make("-s", "wheels", f"WHEELS={wheels}", "TORCH=system", f"PYTHON={sys.executable}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    prefix, env = offline()
    args = ["install", f"WHEELS={wheels}", "TORCH=system", f"PYTHON={torch_only_python}",
            f"VENV={venv}"]
    proc = subprocess.run([*prefix, "make", "-s", *args], cwd=REPO, capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return wheels, venv, prefix, env, args


@real
def test_install_with_the_system_torch_for_real(system_install, tmp_path):
    import torch

    found = imported_from(system_install / "bin" / "python", tmp_path)
    assert found["torch"] == torch.__file__  # this run's python's torch
    own = own_packages(system_install)
    assert not any(name.split("-")[0] in ("torch", "triton") for name in own), own
    assert found["fairseq"].startswith(f"{system_install}/")  # its own fairseq
    assert found["sparse_attn_plugin"] == str(REPO / "sparse_attn_plugin" / "__init__.py")
    again = make("-s", "install", "TORCH=system", f"PYTHON={sys.executable}",
                 f"VENV={system_install}")
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")


@real
def test_install_from_a_wheels_folder_offline_for_real(offline_install, torch_only_python,
                                                      tmp_path):
    wheels, venv, prefix, env, args = offline_install
    names = {path.name.split("-")[0].lower() for path in wheels.iterdir()}
    assert {"fairseq_fixed", "sparse_attn", "antlr4_python3_runtime", "entmax",
            "numpy", "pycocoevalcap", "pytest"} <= names
    assert not names & {"torch", "triton"}
    found = imported_from(venv / "bin" / "python", tmp_path)
    assert found["torch"] == imported_from(torch_only_python, tmp_path, ["torch"])["torch"]
    own = own_packages(venv)
    assert not any(name.split("-")[0] in ("torch", "triton") for name in own), own
    for name in ("fairseq", "entmax", "numpy"):  # the torch-only python has none: from DIR
        assert found[name].startswith(f"{venv}/"), found
    assert found["sparse_attn_plugin"] == str(REPO / "sparse_attn_plugin" / "__init__.py")
    again = subprocess.run([*prefix, "make", "-s", *args], cwd=REPO, capture_output=True,
                           text=True, env=env)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")


def test_install_with_the_system_torch_of_a_python_without_one_fails_in_one_line(tmp_path):
    python = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(python)], check=True)
    venv = tmp_path / "venv"
    proc = make("install", "TORCH=system", f"PYTHON={python}/bin/python", f"VENV={venv}")
    assert proc.returncode != 0 and proc.stdout == ""
    said = re.escape(f"make install TORCH=system: {python}/bin/python has no torch; name one "
                     "that has: PYTHON=/path/to/python.  Stop.")
    assert re.fullmatch(rf"Makefile:\d+: \*\*\* {said}\n", proc.stderr), proc.stderr
    assert not venv.exists()


@real
def test_pip_install_gives_the_library_without_fairseq(tmp_path):
    """``pip install '.[metrics]'`` in a fresh venv that has a CPU torch: the normalisers'
    functional API and the scoring command work, fairseq is neither installed nor
    imported, and the wheel's top-level packages are the project's three (no generic
    name). Without the extra: tests/e2e/test_slim_install.py."""
    python = venv_with_this_torch(tmp_path / "fresh")
    source = checkout_copy(tmp_path / "source")
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q",
                           "--disable-pip-version-check", f"{source}[metrics]"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    use = ("import sys, torch\n"
           "from sparse_attn_plugin.functional import entmax15, sparsemax\n"
           "p = sparsemax(torch.tensor([[3.0, 1.0, -1.0, float('-inf')]]))\n"
           "assert p.tolist() == [[1.0, 0.0, 0.0, 0.0]], p\n"
           "assert abs(float(entmax15(torch.randn(2, 7)).sum()) - 2.0) < 1e-5\n"
           "import importlib.util\n"
           "assert importlib.util.find_spec('fairseq') is None\n"
           "assert not [m for m in sys.modules if m.startswith('fairseq')]\n")
    proc = subprocess.run([str(python), "-c", use], cwd=tmp_path, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    site = tmp_path / "fresh" / "lib" / PY / "site-packages"
    top_level = {path.name for path in site.iterdir() if (path / "__init__.py").exists()}
    ours = {name for name in top_level if name.startswith(("sparse_attn", "data_prep"))}
    assert ours == {"sparse_attn_plugin", "sparse_attn_data", "sparse_attn_experiments"}
    assert not (site / "data_prep").exists()
    (tmp_path / "hyp").write_text("the cat sat on the mat\n")
    (tmp_path / "ref").write_text("the cat sat on the mat\n")
    proc = subprocess.run([str(python.parent / "sparse-attn-score"), "--hyp", "hyp", "--ref",
                           "ref", "--metrics", "bleu"], cwd=tmp_path, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "100.0" in proc.stdout, proc.stdout + proc.stderr
