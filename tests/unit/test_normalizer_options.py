"""One record per hyper-parameter (issue 56, item 2): an entry added to
``normalizer_options.OPTIONS``, and nothing else, is a flag of the models (listed with its
help, checked in one line, given to the normaliser that reads it), a field of the options
the normalisers are built with, and a keyword of the Hugging Face attention functions
(checked the same way). The built-in options keep their flags, keywords and defaults."""

import dataclasses

import pytest
import torch

from sparse_attn_plugin import functional, normalizer_options
from sparse_attn_plugin.errors import SettingsError
from sparse_attn_plugin.flag_listing import flag_groups
from sparse_attn_plugin.huggingface import attention_function
from sparse_attn_plugin.normalizer_options import OPTIONS, Option, by_name
from sparse_attn_plugin.normalizer_registry import SPECS, NormalizerSpec
from sparse_attn_plugin.normalizers import Normalizer, NormalizerOptions

from helpers.models import build


def positive(value, label):
    number = float(value)
    if not number > 0:
        raise SettingsError(f"{label} must be > 0, got {value!r}")
    return number


TEMPERATURE = Option("softmax_temperature", "temperature", 1.0, positive,
                     "temperature of the warm softmax", "T")


class Warm(Normalizer):
    """Softmax of the scores over a temperature: a throwaway normaliser reading the
    throwaway option."""

    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def normalize(self, scores):
        return torch.softmax(scores / self.temperature, dim=-1)


def warm(x, dim=-1, temperature=1.0):
    return functional.softmax(x / temperature, dim)


@pytest.fixture
def temperature(monkeypatch):
    """The option, one entry, and a normaliser reading it, for this test only."""
    monkeypatch.setattr(normalizer_options, "OPTIONS", (*OPTIONS, TEMPERATURE))
    monkeypatch.setitem(SPECS, "warm", NormalizerSpec(
        "warm", Warm, ("softmax_temperature",), function=warm, transformers=True))


def test_a_new_option_is_a_flag_given_to_the_normaliser_that_reads_it(synthetic_bin,
                                                                       temperature):
    assert "--softmax-temperature T" in flag_groups("sparse_transformer").format_help()
    assert "temperature of the warm softmax (default 1.0)" in \
        flag_groups("sparse_transformer").format_help()
    _, model = build(synthetic_bin, extra=["--attn-fn", "warm", "--softmax-temperature", "4"])
    assert {module.temperature for module in model.modules() if isinstance(module, Warm)} \
        == {4.0}
    with pytest.raises(SettingsError, match=r"^--softmax-temperature must be > 0, got '0'$"):
        build(synthetic_bin, extra=["--attn-fn", "warm", "--softmax-temperature", "0"])


def test_a_new_option_is_a_keyword_of_the_hugging_face_functions(temperature):
    query, key, value = (torch.randn(1, 2, length, 4, generator=torch.Generator().manual_seed(0))
                         for length in (3, 5, 5))
    out, weights = attention_function("warm", temperature=2.0)(
        torch.nn.Module(), query, key, value, None, scaling=1.0, is_causal=False)
    expected = torch.softmax(query @ key.transpose(-1, -2) / 2.0, dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, (expected @ value).transpose(1, 2))
    with pytest.raises(SettingsError, match="temperature must be > 0, got -1"):
        attention_function("warm", temperature=-1)


def test_a_new_option_is_a_field_of_the_options_record(temperature):
    record = normalizer_options.options_record()
    assert record().softmax_temperature == 1.0
    assert record(softmax_temperature=3.0).softmax_temperature == 3.0


def test_the_built_in_options_keep_their_flags_keywords_and_defaults():
    assert [(o.flag, o.keyword, o.default) for o in OPTIONS] == [
        ("--topk", "k", 8), ("--topk-train-only", None, False),
        ("--entmax-alpha-init", "alpha", 1.5), ("--attn-impl", "impl", "auto"),
        ("--entmax-max-iter", "n_iter", 30)]
    assert {field.name: field.default for field in dataclasses.fields(NormalizerOptions)} \
        == {name: option.default for name, option in by_name().items()}
    assert SPECS["entmax_alpha"].keywords == ("alpha", "n_iter", "impl")
    assert SPECS["topk"].keywords == ("k", "impl")
