"""A model argument that no flag defines (a mistyped ``--model-overrides`` key) is named
in a warning when the model is built; the arguments fairseq-train parses are not."""

import copy

import pytest
from fairseq import tasks

from helpers.models import parse

ARCHS = ["sparse_transformer", "kernel_transformer", "sparse_lstm"]
WARNING = "is no argument of"


def built(data, arch, **overrides):
    """Build ``arch`` as fairseq-generate does from a checkpoint's arguments with
    ``overrides`` set on them."""
    args = parse(data, arch)
    task = tasks.setup_task(args)
    task.build_model(copy.deepcopy(args))  # as fairseq-train built it, its names set
    for key, value in overrides.items():
        setattr(args, key, value)
    return task.build_model(args)


@pytest.mark.parametrize("arch", ARCHS)
def test_parsed_arguments_and_their_overrides_build_without_warning(synthetic_bin, arch, caplog):
    own = {"kernel": "rbf"} if arch == "kernel_transformer" else {"attn_fn": "sparsemax"}
    built(synthetic_bin, arch, **own, dropout=0.0, bpe="subword_nmt", bpe_codes="codes", beam=2,
          adadelta_rho=0.9)  # the last: a legacy optimizer flag
    assert WARNING not in caplog.text


@pytest.mark.parametrize("arch", ARCHS)
def test_a_mistyped_key_is_named_with_the_nearest_argument(synthetic_bin, arch, caplog):
    built(synthetic_bin, arch, dropuot=0.5, not_a_name_at_all=1)
    warnings = [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]
    assert warnings == [
        f"model argument 'dropuot' (a --model-overrides key?) is no argument of {arch} or "
        "fairseq and changes nothing; did you mean 'dropout'?",
        f"model argument 'not_a_name_at_all' (a --model-overrides key?) is no argument of "
        f"{arch} or fairseq and changes nothing"]


def test_another_models_argument_is_not_this_ones(synthetic_bin, caplog):
    built(synthetic_bin, "sparse_lstm", kernel="rbf")
    assert "'kernel' (a --model-overrides key?) is no argument of sparse_lstm" in caplog.text
