"""One table of normalisers (issue 45, item 1): an entry added to
``normalizer_registry.SPECS``, and nothing else, is taken by ``--attn-fn`` (checked and
built at every site, listed in the flags' help), by ``build_normalizer``, by Hugging
Face's attention functions and by every transformer comparison; the lists derived from
the table keep their values, and the docs' tables list what it holds."""

import re
import subprocess
import sys
from dataclasses import fields, replace

import pytest
import torch

from sparse_attn_experiments.comparison.models import ARCHITECTURES, Row
from sparse_attn_experiments.comparison.switch import choices
from sparse_attn_plugin import functional, huggingface, normalizers
from sparse_attn_plugin.errors import SettingsError
from sparse_attn_plugin.flag_listing import flag_groups
from sparse_attn_plugin.models.sparse_lstm import LSTM_NAMES
from sparse_attn_plugin.normalizer_registry import (
    SPECS,
    TRANSFORMER,
    NormalizerSpec,
    names,
)
from sparse_attn_plugin.normalizers import Normalizer, NormalizerOptions, build_normalizer

from helpers import REPO
from helpers.models import build, parse

BUILT_IN = ("softmax", "topk", "sparsemax", "entmax15", "entmax_alpha", "hard", "csoftmax",
            "csparsemax")


class Halved(Normalizer):
    """A throwaway normaliser: softmax at temperature 2."""

    def normalize(self, scores):
        return torch.softmax(scores / 2, dim=-1)


def halved_softmax(x, dim=-1):
    """:class:`Halved` as a function of a tensor."""
    return functional.softmax(x / 2, dim)


@pytest.fixture
def halved(monkeypatch):
    """``halved`` registered, one entry, for this test only."""
    spec = NormalizerSpec("halved", Halved, function=halved_softmax, transformers=True)
    monkeypatch.setitem(SPECS, spec.name, spec)
    return spec


def test_a_new_entry_is_taken_by_attn_fn_and_built_at_every_site(synthetic_bin, halved):
    _, model = build(synthetic_bin, extra=["--attn-fn", "halved"])
    assert sum(isinstance(module, Halved) for module in model.modules()) == 6  # 2 + 2 * 2


def test_a_new_entry_is_listed_by_the_flags_and_by_their_refusal(synthetic_bin, halved):
    listed = " ".join(flag_groups("sparse_transformer").format_help().split())
    assert "entmax_alpha, hard, csoftmax, csparsemax, halved (default softmax)" in listed
    with pytest.raises(SettingsError, match=r"^--attn-fn: unknown attention normaliser "
                                            r"'nope'; choose from softmax, .*, halved$"):
        parse(synthetic_bin, extra=["--attn-fn", "nope"])


def test_a_new_entry_is_built_by_build_normalizer(halved):
    assert isinstance(build_normalizer("halved", 4), Halved)


def test_a_new_entry_is_offered_to_hugging_face(halved):
    torch.manual_seed(0)
    query, key, value = torch.randn(3, 2, 2, 5, 4).unbind(0)
    _, weights = huggingface.attention_function("halved")(
        torch.nn.Module(), query, key, value, None, is_causal=False)
    torch.testing.assert_close(weights, Halved()(query @ key.transpose(2, 3) / 2))


def test_a_new_entry_is_a_row_of_every_transformer_comparison(halved):
    for name in ("tiny", "small", "paper"):
        architecture = ARCHITECTURES[name]
        assert architecture.rows["halved"] == Row(("--attn-fn", "halved"))
        assert "halved" in choices(architecture)  # sparse-attn-compare --decode-with
    assert "halved" in choices(ARCHITECTURES["lstm"])


def test_an_entry_for_the_transformer_alone_is_refused_by_the_lstm(synthetic_bin, halved,
                                                                  monkeypatch):
    monkeypatch.setitem(SPECS, "halved", replace(halved, models=(TRANSFORMER,)))
    with pytest.raises(SettingsError, match=r"^--attn-fn: unknown attention normaliser "
                                            r"'halved'; choose from softmax, .*, csparsemax$"):
        parse(synthetic_bin, "sparse_lstm", ["--attn-fn", "halved"])
    assert ARCHITECTURES["lstm"].cannot_use == ("hard", "halved")


def test_the_derived_lists_keep_their_values_and_order():
    assert normalizers.NAMES == names() == BUILT_IN
    assert normalizers.COMPILED == ("topk", "sparsemax", "entmax15", "entmax_alpha")
    assert normalizers.CONSTRAINED == ("csoftmax", "csparsemax")
    assert huggingface.KINDS == BUILT_IN[:5]
    assert LSTM_NAMES == tuple(name for name in BUILT_IN if name != "hard")
    assert ARCHITECTURES["lstm"].cannot_use == ("hard",)
    assert list(ARCHITECTURES["tiny"].rows) == [*BUILT_IN[:6], "csparsemax", "kernel_rbf"]


def test_every_entry_names_real_options_and_functions():
    known = {option.name for option in fields(NormalizerOptions)}
    for spec in SPECS.values():
        assert set(spec.options) <= known, spec.name
        assert spec.function is None or spec.function.attr in functional.__all__, spec.name
        assert set(spec.keywords) <= {"k", "alpha", "n_iter", "impl"}, spec.name


def table_column(doc: str, heading: str):
    """The first column of the first table under ``heading`` in ``docs/{doc}``, its code
    names (up to a parenthesis)."""
    text = (REPO / "docs" / doc).read_text().split(f"\n{heading}\n", 1)[1]
    table = re.search(r"\n(\|.*\n)+", text).group(0).strip().splitlines()[2:]
    return [re.match(r"\| `(\w+)", row).group(1) for row in table]


def test_the_docs_tables_list_the_registry():
    assert table_column("methods.md", "## Attention normalisers") == \
        list(names(constrained=False))
    assert sorted(table_column("library.md", "## The functions")) == \
        sorted(functional.__all__)     # the registry's functions among them (test above)


def test_the_registry_imports_without_torch():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, sparse_attn_plugin.normalizer_registry\n"
                               "print('torch' in sys.modules)"],
        cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "False"
