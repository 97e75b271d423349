"""The command lines' edge: one-line errors with exit status 1, and progress lines from
the libraries' loggers."""

import logging

import pytest

from sparse_attn_plugin.command_line import CommandParser, show_progress


def test_a_usage_error_is_one_line_and_exit_status_1(capsys):
    parser = CommandParser(prog="tool")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(["--n", "x"])
    assert stopped.value.code == 1
    assert capsys.readouterr().err == (
        "tool: error: argument --n: invalid int value: 'x' (see tool --help)\n")
    with pytest.raises(SystemExit):
        parser.fail(ValueError("first line\nsecond line"))
    assert capsys.readouterr().err == "tool: error: first line\n"


def test_progress_is_shown_once_under_the_latest_commands_label(capsys):
    library = logging.getLogger("sparse_attn_experiments.comparison.run")
    recipe = logging.getLogger("sparse_attn_data.recipe")
    outside = logging.getLogger("sparse_attn_plugin.models.sparse_transformer")
    show_progress("compare")
    show_progress("multi30k_de_en")  # a second command in the same process
    library.info("1/2 softmax")
    recipe.info("[tokenise] 1.2 s")
    library.debug("not shown")
    outside.info("a model's own notice: not progress")
    assert capsys.readouterr().out == ("[multi30k_de_en] 1/2 softmax\n"
                                       "[multi30k_de_en] [tokenise] 1.2 s\n")


def test_progress_leaves_out_fairseqs_notices(caplog, monkeypatch):
    """Such as those of the datasets it loads for reproduce's fertility data."""
    caplog.set_level(logging.INFO)                                 # as fairseq's own set-up
    monkeypatch.setattr(logging.getLogger("fairseq"), "level", logging.NOTSET)
    assert logging.getLogger("fairseq.data.data_utils").isEnabledFor(logging.INFO)
    show_progress("reproduce")
    assert not logging.getLogger("fairseq.data.data_utils").isEnabledFor(logging.INFO)
