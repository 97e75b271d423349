"""The plugin registers with fairseq whenever fairseq is imported, before or after it,
and the commands that only read or prepare files start without torch or fairseq. Each
case runs in a fresh interpreter (this one has both imported)."""

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
              "assert argparse.Namespace in torch.serialization.get_safe_globals()\n"
              "import sys\n"  # the import hook has left
              "assert not any('AfterFairseq' in repr(f) for f in sys.meta_path)\n")


def python(code):
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("first", ["import sparse_attn_plugin\nimport fairseq_cli.generate\n",
                                   "import fairseq\nimport sparse_attn_plugin\n"])
def test_registered_whichever_is_imported_first(first):
    python(first + REGISTERED)


@pytest.mark.parametrize("module", [
    "sparse_attn_plugin.evaluation.cli", "sparse_attn_plugin.evaluation.align_cli",
    "sparse_attn_plugin.experiments.compare", "sparse_attn_plugin.experiments.results_index",
    "data_prep.synthetic", "data_prep.parallel", "data_prep.iwslt14_de_en"])
def test_file_commands_start_without_torch_or_fairseq(module):
    loaded = python(f"import sys, {module}\nprint(sorted({{'torch', 'fairseq'}} & "
                    "set(sys.modules)))")
    assert loaded.strip() == "[]", f"{module} imports {loaded.strip()}"
