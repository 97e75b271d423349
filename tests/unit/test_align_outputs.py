"""``sparse-attn-align fertility`` and ``align`` as typed: outputs that cannot be written
are refused with one line and exit status 1, and ``fertility``'s two outputs are written
all or nothing (issue 44, finding 9: it wrote ``--out-fert``, then failed on
``--out-guided`` and left the first file)."""

import subprocess

import pytest

from sparse_attn_plugin.evaluation.aligner import train_aligner

from helpers import BIN

SRC = ["a b c", "b c", "c a", "a c b"]
TGT = ["A B C", "B C", "C A", "A C B"]


@pytest.fixture
def folder(tmp_path):
    """A tiny parallel text (``s``, ``t``) and an aligner trained on it (``m``)."""
    (tmp_path / "s").write_text("\n".join(SRC) + "\n", encoding="utf-8")
    (tmp_path / "t").write_text("\n".join(TGT) + "\n", encoding="utf-8")
    train_aligner(SRC, TGT, iterations=2, progress=False).save(tmp_path / "m")
    return tmp_path


def align(folder, *argv):
    """(exit status, stderr lines) of ``sparse-attn-align ARGV`` run in ``folder``."""
    proc = subprocess.run([str(BIN / "sparse-attn-align"), *argv], cwd=folder,
                          capture_output=True, text=True)
    return proc.returncode, proc.stderr.splitlines()


def fertility(folder, out_fert, out_guided):
    return align(folder, "fertility", "--model", "m", "--src", "s", "--tgt", "t",
                 "--out-fert", out_fert, "--out-guided", out_guided)


def test_fertility_writes_both_outputs(folder):
    status, err = fertility(folder, "f", "g")
    assert status == 0, err
    assert [len(line.split()) for line in (folder / "f").read_text().splitlines()] == [
        len(s.split()) for s in SRC]
    assert {line.split("\t")[0] for line in (folder / "g").read_text().splitlines()} == {
        "a", "b", "c"}


@pytest.mark.parametrize("out_guided,message", [
    ("taken", "--out-guided taken: is a folder"),
    ("file/g", "--out-guided file/g: file is not a folder"),
    ("missing/g", "--out-guided missing/g: no such folder missing"),
    ("f", "--out-guided f: the same file as --out-fert"),
    ("s", "--out-guided s: the same file as --src"),
])
def test_an_output_that_cannot_be_written_leaves_neither(folder, out_guided, message):
    """Refused with one line, and nothing replaced: ``--out-fert``'s earlier contents
    stay (or it stays absent), no folder is created, no input is overwritten."""
    (folder / "taken").mkdir()
    (folder / "file").write_text("not a folder\n")
    (folder / "f").write_text("old\n")
    status, err = fertility(folder, "f", out_guided)
    assert status == 1 and len(err) == 1, err
    assert err[0].startswith("sparse-attn-align: error: ") and message in err[0], err
    assert (folder / "f").read_text() == "old\n", "--out-fert written though --out-guided failed"
    assert not (folder / "missing").exists()
    assert (folder / "s").read_text() == "\n".join(SRC) + "\n"


def test_align_refuses_to_overwrite_its_input(folder):
    status, err = align(folder, "align", "--model", "m", "--src", "s", "--tgt", "t",
                        "--out", "t")
    assert status == 1 and err == [
        "sparse-attn-align: error: --out t: the same file as --tgt: choose another name"]
    assert (folder / "t").read_text() == "\n".join(TGT) + "\n"
