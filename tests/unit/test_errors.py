"""The plugin's errors (:mod:`sparse_attn_plugin.errors`): every error type the plugin,
the experiment tooling and the corpus recipes define is a SparseAttnError, model and task
flags fail with SettingsError, and under a fairseq command an uncaught one ends the process
with one line (through fairseq itself: ``test_fairseq_cli.test_bad_flags_give_one_clear_line``
and the constrained and kernel CLI tests)."""

import importlib
import inspect
import pkgutil
import sys
from argparse import Namespace

import pytest

import sparse_attn_data
import sparse_attn_experiments
import sparse_attn_plugin
from sparse_attn_data.steps import PrepError
from sparse_attn_experiments.pipeline import FairseqFailed
from sparse_attn_plugin import errors
from sparse_attn_plugin.errors import SettingsError, SparseAttnError
from sparse_attn_plugin.files import OutputError
from sparse_attn_plugin.models.attention_args import check_attention_args, set_attention_defaults
from sparse_attn_plugin.models.fertility_args import check_fertility_args, set_fertility_defaults
from sparse_attn_plugin.normalizers import NormalizerOptions
from sparse_attn_plugin.site_normalizers import normalizer_options

from helpers.models import build, parse


def defined_exception_types():
    for package in (sparse_attn_plugin, sparse_attn_experiments, sparse_attn_data):
        yield from _defined_in(package)


def _defined_in(package):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == info.name:
                yield value


def test_every_error_type_the_plugin_defines_is_a_sparse_attn_error():
    found = list(defined_exception_types())
    assert {t.__name__ for t in found} >= {"SettingsError", "FertilityError", "CorpusError",
                                            "ConfigError", "AlignerError", "InfeasibleBounds",
                                            "PrepError"}
    assert [t.__name__ for t in found if not issubclass(t, SparseAttnError)] == []
    # bad settings and input are ValueErrors; a step that fails (a download, a tool, a
    # fairseq command) is not, nor an output that cannot be written (an OSError)
    assert [t.__name__ for t in found if t not in (SparseAttnError, PrepError, FairseqFailed)
            and not issubclass(t, (ValueError, OutputError))] == []
    assert issubclass(OutputError, OSError)


@pytest.mark.parametrize("flags,message", [
    ({"attn_fn": "topk", "topk": 0}, "--topk must be >= 1, got 0"),
    ({"attn_fn": "nope"}, "unknown attention normaliser 'nope'"),
    ({"decoder_cross_attn_fn": "csparsemax", "encoder_self_attn_fn": "csparsemax"},
     "cannot be used for encoder self attention"),
    ({"decoder_cross_attn_fn": "csoftmax", "encoder_self_attn_fn": "csoftmax"},
     "'csoftmax' cannot be used for encoder self attention; it fits: decoder_cross"),
    ({"decoder_self_attn_fn": "csoftmax"},
     "'csoftmax' cannot be used for decoder self attention; it fits: decoder_cross"),
    ({"attn_fn": "entmax_alpha", "entmax_alpha_init": "2.5"}, "--entmax-alpha-init must be"),
])
def test_attention_flags_fail_with_a_settings_error(flags, message):
    args = Namespace(**flags)
    set_attention_defaults(args)
    with pytest.raises(SettingsError, match=message):
        check_attention_args(args)


@pytest.mark.parametrize("flags,message", [
    ({"fertility": "guided"}, "--fertility guided needs --fertility-table FILE"),
    ({"exhaustion_c": -1.0}, "--exhaustion-c must be >= 0, got -1.0"),
])
def test_fertility_flags_fail_with_a_settings_error(flags, message):
    args = Namespace(**flags)
    set_fertility_defaults(args)
    with pytest.raises(SettingsError, match=message):
        check_fertility_args(args)


@pytest.fixture
def hook(monkeypatch):
    """The hook installed over a recording stand-in for Python's own."""
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *info: seen.append(info[0]))
    errors.one_line_errors_at_fairseq_cli()
    errors.one_line_errors_at_fairseq_cli()  # idempotent: not wrapped twice
    return sys.excepthook, seen


def test_an_uncaught_plugin_error_is_one_line_and_others_keep_their_traceback(hook, capsys):
    excepthook, previous_saw = hook
    error = SettingsError("--topk must be >= 1, got 0\n(a second line is not shown)")
    excepthook(SettingsError, error, None)
    assert capsys.readouterr().err == "error: --topk must be >= 1, got 0\n"
    assert previous_saw == []
    excepthook(KeyError, KeyError("a bug"), None)  # not ours: Python's traceback, as before
    assert previous_saw == [KeyError] and capsys.readouterr().err == ""


def test_both_models_take_the_normaliser_flags_from_one_declaration(synthetic_bin):
    """``NormalizerOptions``'s fields are the flags of the transformer and of the LSTM,
    with the same defaults; the LSTM has no per-site overrides (it has one attention)."""
    for arch in ("sparse_transformer", "sparse_lstm"):
        args = parse(synthetic_bin, arch, ["--topk", "3", "--entmax-alpha-init", "random"])
        assert (args.topk, args.entmax_alpha_init) == (3, "random")
        defaults = parse(synthetic_bin, arch)
        assert normalizer_options(defaults) == NormalizerOptions()
        assert defaults.attn_fn == "softmax"
        assert hasattr(defaults, "encoder_self_attn_fn") == (arch == "sparse_transformer")


@pytest.mark.parametrize("flags,message", [
    (["--attn-fn", "topk", "--topk", "0"], "--topk must be >= 1, got 0"),
    (["--attn-fn", "entmax_alpha", "--entmax-max-iter", "0"], "--entmax-max-iter"),
    (["--attn-fn", "entmax_alpha", "--entmax-alpha-init", "3"], "--entmax-alpha-init must be"),
])
def test_the_lstm_checks_the_normaliser_flags_as_the_transformer_does(synthetic_bin, flags,
                                                                       message):
    with pytest.raises(SettingsError, match=message):
        build(synthetic_bin, "sparse_lstm", flags)
