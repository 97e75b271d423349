"""Shared fixtures: the repository root and the virtualenv's executables."""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def repo_root():
    return REPO


def fairseq_env():
    """Environment for fairseq subprocesses: one thread each, quiet warnings."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return env
