"""The output guards every command shares (sparse_attn_plugin.files): outputs refused
before any work, written all or none, errors naming the user's path, never a temporary
one; and what counts as an empty input."""

import re

import pytest

from sparse_attn_plugin.files import OutputError, atomic_path, check_outputs, write_texts_atomic
from sparse_attn_plugin.reading import read_lines


def test_outputs_that_are_fine_pass(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    check_outputs({"--json": tmp_path / "old.json", "--tsv": tmp_path / "new.tsv", "--x": None},
                  {"--hyp": tmp_path / "hyp", "--src": None})


@pytest.mark.parametrize("outputs, message", [
    ({"--json": "nowhere/s.json"}, "--json {d}/nowhere/s.json: no such folder {d}/nowhere "
                                   "(create it first)"),
    ({"--json": "file/s.json"}, "--json {d}/file/s.json: {d}/file is not a folder"),
    ({"--json": "folder"}, "--json {d}/folder: is a folder"),
    ({"--json": "hyp"}, "--json {d}/hyp: the same file as --hyp: choose another name"),
    ({"--json": "link"}, "--json {d}/link: the same file as --hyp: choose another name"),
    ({"--json": "folder/../hyp"}, "--json {d}/folder/../hyp: the same file as --hyp"),
    ({"--json": "a", "--tsv": "a"}, "--tsv {d}/a: the same file as --json"),
])
def test_outputs_that_would_fail_or_destroy_are_refused(tmp_path, outputs, message):
    for name in ("hyp", "file"):
        (tmp_path / name).write_text("x\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "hyp")
    with pytest.raises(OutputError, match="^" + re.escape(message.format(d=tmp_path))):
        check_outputs({flag: tmp_path / path for flag, path in outputs.items()},
                      {"--hyp": tmp_path / "hyp"})
    assert not (tmp_path / "nowhere").exists()


def test_a_write_error_names_the_destination_not_the_temporary_name(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(OutputError, match=f"^{re.escape(str(target))}: cannot write "
                                          r"\(No such file or directory\)$"):
        with atomic_path(target) as tmp:
            (tmp / "inside").write_text("x")  # the temporary folder was never made
    assert sorted(tmp_path.iterdir()) == []


def test_outputs_are_written_all_or_none(tmp_path):
    """The second output cannot be put in place (a folder is there): the first is neither
    written nor replaced, and no temporary file stays."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text("before")
    second.mkdir()
    with pytest.raises(OutputError, match=f"^{re.escape(str(second))}: is a folder$"):
        write_texts_atomic({first: "after", second: "text"})
    assert first.read_text() == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first", "second"]
    write_texts_atomic({first: "after", tmp_path / "third": "3"})
    assert (first.read_text(), (tmp_path / "third").read_text()) == ("after", "3")


@pytest.mark.parametrize("text, blank, message", [
    ("", True, "file is empty"),
    ("\n\n", False, "holds only blank lines (2)"),
    (" \n", False, "holds only blank lines (1)"),
])
def test_empty_means_no_line_and_blank_lines_only_where_asked(tmp_path, text, blank, message):
    path = tmp_path / "f"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^{re.escape(f'{path}: {message}')}$"):
        read_lines(path, nonempty=True, blank=blank)
    if text:
        assert read_lines(path, nonempty=True, blank=True) == text.split("\n")[:-1]
