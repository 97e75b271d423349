"""The suite's skips: a test needing what this machine lacks (``requires``: the real
corpora, Java, Triton) is skipped, and the skips are counted with their reasons at the end;
under CI, which has all of them, such a test fails with one line, and any skip not listed
in ``EXPECTED_CI_SKIPS`` fails the run. Each case runs pytest as a user or CI would."""

import os
import subprocess
import sys

import pytest

from helpers import BIN, REPO

pytestmark = pytest.mark.slow

WMT14 = ("tests/e2e/test_data_prep.py::"
         "test_wmt14_validates_on_the_real_newstest2012_and_2013_as_xu_et_al")
METEOR = "tests/e2e/test_score_cli.py::test_meteor_through_the_cli_equals_the_driver"


def run_pytest(*args, ci, **env):
    environ = {key: value for key, value in os.environ.items() if key != "CI"}
    environ.update(env, **({"CI": "true"} if ci else {}))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *args], cwd=REPO, env=environ, capture_output=True, text=True)


def test_missing_realdata_is_a_counted_skip_here_and_a_one_line_failure_under_ci(tmp_path):
    absent = str(tmp_path / "realdata")
    here = run_pytest(WMT14, ci=False, SPARSE_ATTN_REALDATA=absent)
    assert here.returncode == 0, here.stdout
    assert "1 skipped" in here.stdout
    assert f"skips: 1\n  1 x Skipped: needs ../shared/realdata ({absent})" in here.stdout
    ci = run_pytest(WMT14, ci=True, SPARSE_ATTN_REALDATA=absent)
    assert ci.returncode == 1 and "1 error" in ci.stdout       # in its setup
    assert f"CI lacks ../shared/realdata ({absent}), which this test needs" in ci.stdout
    assert "Traceback" not in ci.stdout


def test_missing_java_under_ci_fails_with_one_line():
    ci = run_pytest(METEOR, ci=True, PATH=str(BIN))               # no java on this PATH
    assert ci.returncode == 1 and "1 error" in ci.stdout       # in its setup
    assert "CI lacks Java, for METEOR (java on PATH), which this test needs" in ci.stdout


def test_any_skip_not_expected_fails_a_ci_run_and_is_named(tmp_path):
    (tmp_path / "test_one.py").write_text(
        "import pytest\n\ndef test_skipped():\n    pytest.skip('no reason given')\n\n"
        "def test_passes():\n    pass\n")
    args = ["-p", "conftest", "--rootdir", str(tmp_path), str(tmp_path / "test_one.py")]
    tests = str(REPO / "tests")
    here = run_pytest(*args, ci=False, PYTHONPATH=tests)
    assert here.returncode == 0 and "1 passed, 1 skipped" in here.stdout
    assert "skips: 1\n  1 x Skipped: no reason given" in here.stdout
    ci = run_pytest(*args, ci=True, PYTHONPATH=tests)
    assert ci.returncode == 1 and "1 passed, 1 skipped" in ci.stdout
    assert "CI: unexpected skip of test_one.py::test_skipped" in ci.stdout
