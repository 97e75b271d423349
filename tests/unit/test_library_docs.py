"""docs/library.md cannot lie: every code block in it is Python, and each runs as written,
on its own (as a reader would paste it), with nothing downloaded: a hub model a block
loads (:data:`STAND_INS`) is replaced by a random tiny one saved in a folder, the block
then running in a scratch folder."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO
from helpers.tiny_marian import tiny_marian

DOC = REPO / "docs" / "library.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
#: The hub models the page's blocks load, each with what saves a stand-in in a folder.
STAND_INS = {"Helsinki-NLP/opus-mt-de-en": tiny_marian}


def blocks():
    return [(language, code) for language, code in FENCE.findall(DOC.read_text())]


def test_every_code_block_is_python():
    found = blocks()
    assert len(found) >= 4 and [language for language, _ in found] == ["python"] * len(found)
    assert DOC.read_text().count("```") == 2 * len(found)     # no fence the pattern missed


def test_every_stand_in_is_used():
    assert all(any(f'"{name}"' in code for _, code in blocks()) for name in STAND_INS)


@pytest.mark.parametrize("index", range(len(blocks())))
def test_code_block_runs(index, tmp_path):
    code = blocks()[index][1]
    if "transformers" in code:
        pytest.importorskip("transformers")
    cwd = REPO
    for name, save in STAND_INS.items():
        if f'"{name}"' in code:
            code = code.replace(f'"{name}"', repr(str(save(tmp_path / "stand-in"))))
            cwd = tmp_path
    # run by the environment's python with that environment not activated (its scripts
    # off PATH): the page's commands must not count on a shell finding them (issue 55)
    scripts = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p != scripts)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PATH=path)
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"docs/library.md block {index + 1}:\n{code}\n{done.stderr}"
