"""Shared fixtures: the repository root and the virtualenv's executables."""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PLUGIN = str(REPO / "sparse_attn_plugin")  # --user-dir, whatever the working directory


def fairseq_env():
    """Environment for fairseq subprocesses: one thread each, quiet warnings."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return env


@pytest.fixture(scope="session")
def synthetic_bin(tmp_path_factory):
    """A small binarised synthetic corpus (300 / 40 / 40 pairs) shared by the session."""
    from data_prep.synthetic import binarize, write_corpus

    root = tmp_path_factory.mktemp("synthetic")
    write_corpus(root / "raw", train=300, valid=40, test=40)
    return Path(binarize(root / "raw", root / "bin"))


@pytest.fixture(scope="session")
def alpha_run(synthetic_bin, tmp_path_factory):
    """A tiny model trained on :func:`synthetic_bin` with learned alpha-entmax in the
    decoder (heads started at random, as Correia et al.'s code does) and sparsemax in the
    encoder, a checkpoint saved after each of its 3 updates."""
    from test_fairseq_cli import train

    save_dir = tmp_path_factory.mktemp("alpha-run")
    train(synthetic_bin, save_dir, "--attn-fn", "entmax_alpha", "--entmax-alpha-init", "random",
          "--encoder-self-attn-fn", "sparsemax", "--lr", "5e-2", "--save-interval-updates", "1",
          updates=3)
    return save_dir
