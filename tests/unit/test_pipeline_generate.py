"""``pipeline.generate``, the one place compare and reproduce read fairseq-generate's
output, with a stand-in for fairseq-generate (a script printing a prepared log): the log
read as the scorer reads it, and the scorer's warning where its T- lines hold ``<<unk>>``
(issue 55: compare and reproduce scored them without a word)."""

import logging
import sys

from sparse_attn_experiments import pipeline

LOG = """INFO:fairseq.tasks.translation:data test de-en 2 examples
S-0\tein haus
T-0\ta <<unk>> house
H-0\t-0.3\ta small house
S-1\tein hund
T-1\ta dog
H-1\t-0.2\ta dog
Translated 2 sentences (6 tokens) in 0.1s (20.00 sentences/s, 60.00 tokens/s)
"""


def warnings(caplog, tmp_path):
    """``pipeline.generate``'s warnings, caught at its own logger (another test's progress
    handler may have stopped its records from reaching the root's)."""
    pipeline.logger.addHandler(caplog.handler)
    propagates, pipeline.logger.propagate = pipeline.logger.propagate, False
    try:
        result = pipeline.generate(tmp_path, tmp_path / "model.pt", [], tmp_path / "gen.log")
    finally:
        pipeline.logger.removeHandler(caplog.handler)
        pipeline.logger.propagate = propagates
    return result, [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def stand_in(monkeypatch, tmp_path, log: str):
    printed = tmp_path / "printed.log"
    printed.write_text(log)
    monkeypatch.setattr(pipeline, "fairseq_command", lambda name: [
        sys.executable, "-c", f"print(open({str(printed)!r}).read(), end='')"])
    monkeypatch.setattr(pipeline, "generate_arguments", lambda data, checkpoint, flags: [])


def test_references_with_unk_are_warned_about_where_compare_scores_them(
        monkeypatch, tmp_path, caplog):
    stand_in(monkeypatch, tmp_path, LOG)
    result, [warning] = warnings(caplog, tmp_path)
    assert result.output.references == ["a <<unk>> house", "a dog"]
    assert result.sentences_per_second == 20.0
    assert warning == (
        f"1 of the 2 references (T- lines) in {tmp_path / 'gen.log'} hold <<unk>>, fairseq's "
        "mark for a word outside the model's vocabulary: they are not the real references, "
        "and the scores differ from theirs; the scores here are against those lines, as "
        "fairseq-generate's own BLEU")


def test_clean_references_give_no_warning(monkeypatch, tmp_path, caplog):
    stand_in(monkeypatch, tmp_path, LOG.replace("<<unk>>", "small"))
    assert warnings(caplog, tmp_path)[1] == []
