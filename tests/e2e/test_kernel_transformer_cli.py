"""The kernel transformer through fairseq's own commands: it trains and decodes through
the console scripts, every kernel and positional variant through fairseq's train and
generate in process, and bad flags give one line."""

import pytest

from sparse_attn_plugin.models.kernel_transformer import INPUT_PE
from sparse_attn_plugin.modules.kernel_attention import PE_INTEGRATIONS
from sparse_attn_plugin.normalizers.kernels import KERNELS

from helpers import PLUGIN
from helpers.fairseq_runs import fairseq
from helpers.models import TINY

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
INTEGRATIONS = PE_INTEGRATIONS[:-1]  # "none" is what --pe-sites leaves out


def fairseq_train(data, save_dir, *flags, check=True, in_process=False):
    return fairseq("fairseq-train", [
        data, "--user-dir", PLUGIN, "--arch", "kernel_transformer", "--cpu", *TINY,
        "--optimizer", "adam", "--lr", "5e-3", "--max-tokens", "1000", "--max-update", "4",
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--no-progress-bar", "--seed", "1",
        *flags], in_process, check)


def train_then_generate(data, save_dir, *flags, in_process):
    fairseq_train(data, save_dir, *flags, in_process=in_process)
    out = fairseq("fairseq-generate", [
        data, "--user-dir", PLUGIN, "--path", save_dir / "checkpoint_last.pt", "--beam", "3",
        "--max-len-b", "20", "--batch-size", "16", "--required-batch-size-multiple", "1",
        "--cpu"], in_process).stdout
    assert sum(line.startswith("H-") for line in out.splitlines()) == 40


def test_console_scripts_train_then_generate(synthetic_bin, tmp_path):
    train_then_generate(synthetic_bin, tmp_path, in_process=False)


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
def test_every_variant_trains_then_generates(synthetic_bin, tmp_path, flags):
    train_then_generate(synthetic_bin, tmp_path, *flags, in_process=True)
