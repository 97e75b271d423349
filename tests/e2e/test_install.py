"""``make install`` as a user runs it, into a folder whose ``bin/python`` only records what
it is asked to do: the stamp holds the torch and fairseq specs, and another spec replaces
torch and rebuilds fairseq without pip's wheel cache; ``make demo`` and ``make bench``
write under .work/ unless told to publish into results/."""

import os
import subprocess

import pytest

from helpers import REPO

DEFAULT = "torch==2.13.0 fairseq-fixed==0.12.3.1"


@pytest.fixture
def venv(tmp_path):
    """A stand-in for .venv/: its python logs its arguments, and says fairseq is missing."""
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/../calls"\n'
                      '[ "$2" = "import fairseq" ] && exit 1\nexit 0\n')
    python.chmod(0o755)
    return tmp_path


def make_install(venv, *assignments):
    proc = subprocess.run(["make", "-s", "install", f"VENV={venv}", *assignments], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    calls = (venv / "calls").read_text() if (venv / "calls").exists() else ""
    (venv / "calls").unlink(missing_ok=True)
    return proc.stdout, calls


def stamp(venv, text, *, stale=False):
    (venv / ".installed").write_text(text + "\n")
    if stale:  # older than the Makefile: install runs again for that reason alone
        os.utime(venv / ".installed", (0, 0))


def test_an_install_with_the_same_specs_is_a_no_op(venv):
    stamp(venv, DEFAULT)
    assert make_install(venv) == ("", "")


def test_a_changed_project_reinstalls_without_replacing_torch(venv):
    stamp(venv, DEFAULT, stale=True)
    printed, calls = make_install(venv)
    assert "uninstall" not in calls and "--no-cache-dir" not in calls
    assert "install torch==2.13.0" in calls and "install -e ." in calls.replace(
        "--no-build-isolation ", "")
    assert (venv / ".installed").read_text().strip() == DEFAULT


def test_another_torch_replaces_torch_and_rebuilds_fairseq(venv):
    stamp(venv, DEFAULT)
    index = "--index-url https://download.pytorch.org/whl/cu128"
    printed, calls = make_install(venv, "TORCH_SPEC=torch==2.8.0", f"TORCH_INDEX={index}")
    assert f"installed with '{DEFAULT}', asked for 'torch==2.8.0 {index} " \
           "fairseq-fixed==0.12.3.1': replacing torch and rebuilding fairseq" in printed
    lines = calls.splitlines()

    def first(words, but="\0"):
        return next(i for i, line in enumerate(lines) if words in line and but not in line)

    uninstall = first("uninstall -y torch fairseq-fixed")
    torch, fairseq = first(f"install {index} torch==2.8.0"), first("fairseq-fixed==0.12.3.1",
                                                                    but="uninstall")
    assert uninstall < torch < fairseq and "--no-cache-dir" in lines[fairseq]
    assert (venv / ".installed").read_text().strip() == f"torch==2.8.0 {index} " \
        "fairseq-fixed==0.12.3.1"
    assert not (venv / ".rebuild").exists()
    assert make_install(venv, "TORCH_SPEC=torch==2.8.0", f"TORCH_INDEX={index}") == ("", "")


def test_a_stamp_from_before_specs_were_recorded_installs_in_place(venv):
    stamp(venv, "")
    printed, calls = make_install(venv)
    assert "uninstall" not in calls and "--no-cache-dir" not in calls
    assert (venv / ".installed").read_text().strip() == DEFAULT


@pytest.mark.parametrize("publish,where", [([], ".work"), (["PUBLISH=results"], "results")])
def test_demo_and_bench_write_under_work_unless_published(venv, publish, where):
    stamp(venv, DEFAULT)
    for target, outs in (("demo", ["demo"]), ("bench", ["bench", "evaluation"])):
        planned = subprocess.run(["make", "-n", target, f"VENV={venv}", *publish], cwd=REPO,
                                 capture_output=True, text=True, check=True).stdout
        found = {line.split("--out ")[1].split()[0] for line in planned.splitlines()
                 if "--out " in line}
        assert found == {f"{where}/{out}" for out in outs}
