"""The plugin registers with fairseq when fairseq loads it (``--user-dir``: fairseq first)
or when a caller asks (``sparse_attn_plugin.register()``), and importing it has no other
effect: the library and the commands that only read or prepare files start without
torch's models or fairseq, and nothing is added to Python's import machinery. Each case
runs in a fresh interpreter (this one has both imported)."""

import subprocess
import sys

import pytest

from helpers import REPO

REGISTERED = ("from fairseq.criterions import CRITERION_REGISTRY as c\n"
              "from fairseq.models import ARCH_MODEL_REGISTRY as a\n"
              "from fairseq.tasks import TASK_REGISTRY as t\n"
              "assert {'sparse_transformer', 'sparse_lstm', 'kernel_transformer'} <= set(a)\n"
              "assert 'sparse_translation' in t\n"
              "assert 'label_smoothed_cross_entropy_with_fertility' in c\n"
              "import torch, argparse\n"
              "assert argparse.Namespace in torch.serialization.get_safe_globals()\n")


def python(code):
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("first", [
    "import fairseq\nimport sparse_attn_plugin\n",  # as fairseq's --user-dir does
    "import sparse_attn_plugin\nsparse_attn_plugin.register()\n",
    "import sparse_attn_plugin\nimport fairseq\nsparse_attn_plugin.register()\n"
    "sparse_attn_plugin.register()\n"])
def test_registered_when_fairseq_loads_it_or_the_caller_asks(first):
    python(first + REGISTERED)


def test_importing_the_library_has_no_side_effect():
    """Importing the package, its normalisers and its functional API imports no fairseq,
    touches no import hook and registers nothing; fairseq imported afterwards knows none
    of our architectures until ``register()``."""
    python("import sys\n"
           "hooks = list(sys.meta_path), list(sys.path_hooks)\n"
           "import sparse_attn_plugin, sparse_attn_plugin.normalizers\n"
           "import sparse_attn_plugin.functional\n"
           "assert (list(sys.meta_path), list(sys.path_hooks)) == hooks\n"
           "assert not {m for m in sys.modules if m.split('.')[0] in "
           "('fairseq', 'fairseq_cli')}\n"
           "from fairseq.models import ARCH_MODEL_REGISTRY\n"
           "assert 'sparse_transformer' not in ARCH_MODEL_REGISTRY\n")


@pytest.mark.parametrize("module", [
    "sparse_attn_plugin.evaluation.cli", "sparse_attn_plugin.evaluation.align_cli",
    "sparse_attn_experiments.compare", "sparse_attn_experiments.results_index",
    "sparse_attn_data.synthetic", "sparse_attn_data.parallel", "sparse_attn_data.iwslt14_de_en"])
def test_file_commands_start_without_torch_or_fairseq(module):
    loaded = python(f"import sys, {module}\nprint(sorted({{'torch', 'fairseq'}} & "
                    "set(sys.modules)))")
    assert loaded.strip() == "[]", f"{module} imports {loaded.strip()}"


def test_importing_the_plugin_after_torch_lets_torch_load_a_fairseq_checkpoint(alpha_run):
    """README: ``import torch, sparse_attn_plugin`` and torch >= 2.6's weights-only
    ``torch.load`` reads a fairseq checkpoint (its ``argparse.Namespace`` allow-listed),
    without importing fairseq; torch alone refuses it (issue 44: it did until
    ``register()``)."""
    load = f"torch.load({str(alpha_run / 'checkpoint_last.pt')!r})\n"
    loaded = python("import sys, torch, sparse_attn_plugin\n" + load +
                    "print(sorted(m for m in sys.modules if m.split('.')[0] == 'fairseq'))")
    assert loaded.strip() == "[]"
    refused = subprocess.run([sys.executable, "-c", "import torch\n" + load], cwd=REPO,
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "argparse.Namespace" in refused.stderr
