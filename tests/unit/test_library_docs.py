"""docs/library.md cannot lie: every code block in it is Python, and each runs as written,
on its own (as a reader would paste it), with nothing downloaded."""

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO

DOC = REPO / "docs" / "library.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks():
    return [(language, code) for language, code in FENCE.findall(DOC.read_text())]


def test_every_code_block_is_python():
    found = blocks()
    assert len(found) >= 4 and [language for language, _ in found] == ["python"] * len(found)
    assert DOC.read_text().count("```") == 2 * len(found)     # no fence the pattern missed


@pytest.mark.parametrize("index", range(len(blocks())))
def test_code_block_runs(index):
    code = blocks()[index][1]
    if "transformers" in code:
        pytest.importorskip("transformers")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"docs/library.md block {index + 1}:\n{code}\n{done.stderr}"
