"""``pip install .`` without extras, as a user of the library alone has it: a fresh venv
with this run's torch and numpy linked in (nothing downloaded) and the package installed
from a folder holding its wheel alone, no index: so it needs nothing else. There the
library imports (the normalisers, their functional API, the losses, the Hugging Face
functions) and no extra's package is importable; every command that needs an extra, as
a console script and as ``python -m``, ends in one line naming what to install, exit
status 1, before it writes anything (sparse_attn_plugin/extras.py, the one table); those
that need none run. With the extras: tests/e2e/test_install.py."""

import re
import subprocess
import sys

import pytest

from sparse_attn_plugin import extras

from helpers.commands import console_scripts, python_m_modules
from helpers.venvs import checkout_copy, venv_with_this_torch

# One venv for the module, made on one worker; about 30 s, most of it importing torch.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slim_install")]


def commands():
    """(how it is typed, the module it runs, the arguments that add a need) of every
    command: each console script and ``python -m`` entry, and each with every option that
    adds a need (sparse-attn-synth --bin)."""
    typed = [(name, module) for name, module in console_scripts().items()]
    typed += [(f"python -m {module}", module) for module in python_m_modules()]
    return [(command, module, args) for command, module in typed
            for args in [[], *([option, "x"] for option in extras.needs_of(module).options)]]


NEEDING = [case for case in commands() if extras.needed(case[1], case[2])]


@pytest.fixture(scope="module")
def slim(tmp_path_factory):
    """The venv's bin folder: torch, triton and numpy linked, this package installed from
    its wheel with pip's default dependencies, offline."""
    folder = tmp_path_factory.mktemp("slim")
    python = venv_with_this_torch(folder / "venv", "--without-pip",
                                  packages=("torch", "triton", "numpy"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels = folder / "wheels"
    for argv in ([*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", wheels,
                  checkout_copy(folder / "source")],
                 [*pip, "--python", python, "install", "--no-index", "--find-links", wheels,
                  "sparse-attn"]):
        done = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return python.parent


def run(slim, command, args, cwd):
    """``command`` (as typed) with ``args``, from the venv, in the folder ``cwd``."""
    argv = ([slim / "python", "-m", command.split()[-1]] if command.startswith("python -m")
            else [slim / command])
    return subprocess.run([str(a) for a in [*argv, *args]], cwd=cwd, capture_output=True,
                          text=True)


def test_the_library_imports_without_any_extra_and_no_extra_is_there(slim, tmp_path):
    code = (
        "import importlib.util, sys, torch\n"
        "import sparse_attn_plugin.functional as F, sparse_attn_plugin.losses as L\n"
        "import sparse_attn_plugin.huggingface as hf\n"
        "p = F.sparsemax(torch.tensor([[3.0, 1.0, -1.0, float('-inf')]]))\n"
        "assert p.tolist() == [[1.0, 0.0, 0.0, 0.0]], p\n"
        "loss = L.sparsemax_loss(torch.tensor([[3.0, 1.0]]), torch.tensor([0]))\n"
        "assert loss.tolist() == [0.0], loss\n"
        "hf.attention_function('entmax15')\n"
        "from sparse_attn_plugin.extras import EXTRAS, missing\n"
        "print(sorted(set(missing(list(EXTRAS))[0])), missing(['fairseq'])[1])\n"
        "print(sorted(m for m in ('matplotlib', 'sentencepiece', 'sacrebleu', 'entmax',\n"
        "                         'transformers', 'fairseq') if importlib.util.find_spec(m)))\n"
        "try:\n"
        "    hf.register('sparsemax')\n"
        "except ImportError as error:\n"
        "    print(error)\n")
    done = subprocess.run([str(slim / "python"), "-c", code], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    absent, importable, refused = done.stdout.splitlines()
    with_modules = sorted(name for name, needs in extras.EXTRAS.items()
                          if any(module for _, module in needs))
    assert (absent, importable) == (f"{with_modules} True", "[]")
    assert refused == ("sparse_attn_plugin.huggingface.register needs the 'hf' extra: "
                       "pip install 'sparse-attn[hf]'")


@pytest.mark.parametrize("command,module,args", NEEDING,
                         ids=[" ".join([c, *a]) for c, _, a in NEEDING])
def test_a_command_without_its_extras_says_what_to_install_in_one_line(slim, tmp_path,
                                                                      command, module, args):
    """Before any work: nothing is written, whatever the arguments name."""
    argv = [*args, "--out", "out", "--dest-dir", "bin", "--work-dir", "work"]
    done = run(slim, command, argv, tmp_path)
    needed = extras.needed(module, argv)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"{command}: error: "
                           f"{extras.install_hint(needed, 'fairseq' in needed)}\n")
    assert list(tmp_path.iterdir()) == []


def test_the_hint_names_each_extra_and_fairseq_as_a_user_reads_it(slim, tmp_path):
    done = run(slim, "sparse-attn-score", ["--hyp", "h", "--ref", "r"], tmp_path)
    assert done.stderr == ("sparse-attn-score: error: needs the 'metrics' extra: "
                           "pip install 'sparse-attn[metrics]'\n")
    done = run(slim, "sparse-attn-synth", ["--out", "raw", "--bin", "bin"], tmp_path)
    assert re.fullmatch(r"sparse-attn-synth: error: needs fairseq and the 'fairseq' extra: "
                        r"make install, or pip install 'sparse-attn\[fairseq\]', then pip "
                        r"install --no-deps --no-build-isolation fairseq-fixed==\S+ "
                        r"\(README, Installing\)\n", done.stderr), done.stderr


def test_the_commands_that_need_no_extra_run(slim, tmp_path):
    assert sorted(command for command, module, args in commands()
                  if not extras.needed(module, args) and command.startswith("sparse-attn")) \
        == ["sparse-attn-synth", "sparse-attn-toy-example"]
    done = run(slim, "sparse-attn-synth", ["--out", "raw", "--train", "20", "--valid", "4",
                                           "--test", "4"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len((tmp_path / "raw" / "train.src").read_text().splitlines()) == 20
    done = run(slim, "sparse-attn-toy-example", ["--out", "toy"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "toy" / "figure1.md").is_file()
