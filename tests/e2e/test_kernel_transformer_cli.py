"""The kernel transformer through fairseq's own commands: it trains and decodes through
the console scripts, every kernel and positional variant through fairseq's train and
generate in process, and bad flags give one line. Each decode is compared with one of the
same weights whose attention is switched (see :func:`test_every_variant_trains_then_generates`)."""

import pytest
import torch

from sparse_attn_plugin.models.kernel_transformer import INPUT_PE
from sparse_attn_plugin.modules.kernel_attention import PE_INTEGRATIONS
from sparse_attn_plugin.normalizers.kernels import KERNELS
from sparse_attn_plugin.sites import SITES

from helpers import PLUGIN
from helpers.fairseq_runs import ROUNDING, decoded, fairseq, gap
from helpers.models import TINY

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
INTEGRATIONS = PE_INTEGRATIONS[:-1]  # "none" is what --pe-sites leaves out


def fairseq_train(data, save_dir, *flags, check=True, in_process=False):
    return fairseq("fairseq-train", [
        data, "--user-dir", PLUGIN, "--arch", "kernel_transformer", "--cpu", *TINY,
        "--optimizer", "adam", "--lr", "5e-3", "--max-tokens", "1000", "--max-update", "4",
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--no-progress-bar", "--seed", "1",
        *flags], in_process, check)


def generate(data, checkpoint, *flags, in_process=True):
    """fairseq-generate's hypotheses and scores (:func:`~helpers.fairseq_runs.decoded`)."""
    return decoded(fairseq("fairseq-generate", [
        data, "--user-dir", PLUGIN, "--path", checkpoint, "--beam", "3", "--max-len-b", "20",
        "--batch-size", "16", "--required-batch-size-multiple", "1", "--cpu", *flags],
        in_process).stdout)


def train_then_generate(data, save_dir, *flags, in_process):
    fairseq_train(data, save_dir, *flags, in_process=in_process)
    decode = generate(data, save_dir / "checkpoint_last.pt", in_process=in_process)
    assert len(decode) == 40
    return decode


def switched_kernel(flags):
    """``--model-overrides`` to another kernel: the exponential one, which is softmax
    attention, for a model trained with another kernel; the rbf kernel for one trained
    with the exponential kernel (its switch to softmax attention would change nothing)."""
    kernel = flags[flags.index("--kernel") + 1] if "--kernel" in flags else "exponential"
    return ["--model-overrides", repr({"kernel": "rbf" if kernel == "exponential"
                                       else "exponential"})]


def test_console_scripts_train_then_generate(synthetic_bin, tmp_path):
    """The exponential kernel (the default) through the console scripts; the same weights
    with the rbf kernel (decoded in process) decode otherwise."""
    decode = train_then_generate(synthetic_bin, tmp_path, in_process=False)
    rbf = generate(synthetic_bin, tmp_path / "checkpoint_last.pt", *switched_kernel([]))
    assert gap(decode, rbf) > ROUNDING, "the kernel does not reach the decode"


def test_bad_pe_sites_give_one_line(synthetic_bin, tmp_path):
    proc = fairseq_train(synthetic_bin, tmp_path, "--pe-sites", "encoder,decoder", check=False)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "--pe-sites takes 'none' or a comma-separated list" in last


VARIANTS = [["--kernel", kind] for kind in KERNELS] + \
    [["--pe-integration", pe, "--no-value-pe"] for pe in INTEGRATIONS if pe != "direct_sum"] + \
    [["--kernel-symmetric", "--kernel", "rbf"], ["--pe-sites", "none"],
     ["--pe-integration", INPUT_PE]]


#: Integrations that multiply a positional kernel (with weights of its own) onto the
#: feature kernel.
PRODUCTS = ("lookup", "product_xl", "product_sym")


def without_positions(checkpoint, out):
    """The checkpoint as the ``--pe-sites none`` model its weights make: no positional
    kernel at any site (values carry no positions either: the variants that use this
    train with --no-value-pe), the positional kernels' own weights dropped."""
    state = torch.load(checkpoint, weights_only=False)
    state["cfg"]["model"].pe_sites = "none"
    state["model"] = {k: v for k, v in state["model"].items()
                      if not k.endswith((".relative_table", ".r_proj.weight", ".t_proj.weight"))}
    torch.save(state, out)
    return out


def as_fairseq_transformer(checkpoint, out):
    """The checkpoint as fairseq's own ``transformer`` (the same parameter names)."""
    state = torch.load(checkpoint, weights_only=False)
    state["cfg"]["model"]._name = state["cfg"]["model"].arch = "transformer"
    torch.save(state, out)
    return out


@pytest.mark.parametrize("flags", VARIANTS, ids=[" ".join(v) for v in VARIANTS])
def test_every_variant_trains_then_generates(synthetic_bin, tmp_path, flags):
    """Every variant's decode differs from the same weights' decode with
    :func:`switched_kernel`; where positions enter as a product kernel, from the one of
    the same weights without positions (:func:`without_positions`); with ``--pe-sites
    none``, from the one with positions added at every site (``direct_sum`` needs no
    weights). Theory says where it must be equal: the exponential kernel with positions
    on the input (``direct_sum_input``) is fairseq's transformer, decode for decode."""
    decode = train_then_generate(synthetic_bin, tmp_path, *flags, in_process=True)
    checkpoint = tmp_path / "checkpoint_last.pt"
    assert gap(decode, generate(synthetic_bin, checkpoint, *switched_kernel(flags))) \
        > ROUNDING, "decoded as with another kernel"
    if any(pe in flags for pe in PRODUCTS):
        blind = without_positions(checkpoint, tmp_path / "no-positions.pt")
        assert gap(decode, generate(synthetic_bin, blind)) > ROUNDING, \
            "decoded as without positions"
    if "--pe-sites" in flags:
        everywhere = ["--model-overrides", repr({"pe_sites": ",".join(SITES)})]
        assert gap(decode, generate(synthetic_bin, checkpoint, *everywhere)) > ROUNDING, \
            "decoded as with positions"
    if INPUT_PE in flags:
        transformer = as_fairseq_transformer(checkpoint, tmp_path / "transformer.pt")
        assert gap(decode, generate(synthetic_bin, transformer)) <= ROUNDING
