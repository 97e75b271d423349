"""The kernel transformer through fairseq's own commands: every kernel and positional
variant trains and decodes, and bad flags give one line."""

import pytest

from sparse_attn_plugin.models.kernel_transformer import INPUT_PE
from sparse_attn_plugin.modules.kernel_attention import PE_INTEGRATIONS
from sparse_attn_plugin.normalizers.kernels import KERNELS

from helpers import BIN, PLUGIN
from helpers.fairseq_runs import run
from helpers.models import TINY

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
INTEGRATIONS = PE_INTEGRATIONS[:-1]  # "none" is what --pe-sites leaves out


def fairseq_train(data, save_dir, *flags, check=True):
    return run([BIN / "fairseq-train", data, "--user-dir", PLUGIN, "--arch", "kernel_transformer",
                "--cpu", *TINY, "--optimizer", "adam", "--lr", "5e-3", "--max-tokens", "1000",
                "--max-update", "4", "--save-dir", save_dir, "--no-epoch-checkpoints",
                "--no-progress-bar", "--seed", "1", *flags], check=check)


def test_bad_pe_sites_give_one_line(synthetic_bin, tmp_path):
    proc = fairseq_train(synthetic_bin, tmp_path, "--pe-sites", "encoder,decoder", check=False)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "--pe-sites takes 'none' or a comma-separated list" in last


VARIANTS = [["--kernel", kind] for kind in KERNELS] + \
    [["--pe-integration", pe, "--no-value-pe"] for pe in INTEGRATIONS if pe != "direct_sum"] + \
    [["--kernel-symmetric", "--kernel", "rbf"], ["--pe-sites", "none"],
     ["--pe-integration", INPUT_PE]]


@pytest.mark.parametrize("flags", VARIANTS, ids=[" ".join(v) for v in VARIANTS])
def test_train_then_generate(synthetic_bin, tmp_path, flags):
    fairseq_train(synthetic_bin, tmp_path, *flags)
    out = run([BIN / "fairseq-generate", synthetic_bin, "--user-dir", PLUGIN, "--path",
               tmp_path / "checkpoint_last.pt", "--beam", "3", "--max-len-b", "20",
               "--batch-size", "16", "--required-batch-size-multiple", "1", "--cpu"]).stdout
    assert sum(line.startswith("H-") for line in out.splitlines()) == 40
