"""The tiers and the fixtures the whole session shares.

Tests under ``tests/unit`` (pure functions, models built in-process) are marked ``unit``;
those under ``tests/e2e`` (fairseq's commands, recipes, the comparison and reproduction
drivers, scripts and benchmarks) ``e2e``: ``make test-unit`` runs the first tier,
``make test`` both. Helpers live in the ``helpers`` package beside this file."""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

TIERS = ("unit", "e2e", "gpu")
HELPERS = Path(__file__).parent / "helpers"
# One thread for every test and every subprocess it starts: the tests' models are tiny,
# and two threads per test on a busy 2-core machine spend most of their time waiting on
# each other (a test that takes 0.5 s on one thread took 6-8 s). Speed ratios are the
# benchmarks' job, each with its own --threads.
os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
# The Triton kernels (--attn-impl triton) run on CPU tensors under Triton's interpreter.
# Set before triton is first imported, which reads it (TRITON_INTERPRET=0 keeps a GPU's).
os.environ.setdefault("TRITON_INTERPRET", "1")


#: Skips CI may have, each with its reason: none. Under CI any other skip fails the run.
EXPECTED_CI_SKIPS = {}
_skipped = []


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)


def pytest_runtest_setup(item):
    """A test marked ``requires(NAME)`` whose NAME (:data:`helpers.REQUIREMENTS`) this
    machine lacks is skipped; under CI, which has them all, it fails with one line."""
    from helpers import REQUIREMENTS

    for marker in item.iter_markers("requires"):
        for name in marker.args:
            present, what = REQUIREMENTS[name]
            if not present():
                if os.environ.get("CI"):
                    pytest.fail(f"CI lacks {what}, which this test needs", pytrace=False)
                pytest.skip(f"needs {what}")


def pytest_runtest_logreport(report):
    """Record each skipped test and its reason (xfails are not skips)."""
    if report.skipped and not hasattr(report, "wasxfail") and report.when in ("setup", "call"):
        _skipped.append((report.nodeid, report.longrepr[-1] if isinstance(
            report.longrepr, tuple) else str(report.longrepr)))


def pytest_terminal_summary(terminalreporter):
    """The run's skips, counted with their reasons; under CI, those not in
    :data:`EXPECTED_CI_SKIPS`, which fail the run (:func:`pytest_sessionfinish`)."""
    reasons = {}
    for nodeid, reason in _skipped:
        reasons.setdefault(reason, []).append(nodeid)
    terminalreporter.write_line(f"skips: {len(_skipped)}" + "".join(
        f"\n  {len(ids)} x {reason}" for reason, ids in sorted(reasons.items())))
    for nodeid in _unexpected():
        terminalreporter.write_line(f"CI: unexpected skip of {nodeid} (a skip under CI must "
                                    "be listed in EXPECTED_CI_SKIPS with its reason)")


def _unexpected():
    if not os.environ.get("CI"):
        return []
    return [nodeid for nodeid, _ in _skipped if nodeid not in EXPECTED_CI_SKIPS]


def pytest_sessionfinish(session, exitstatus):
    """Under CI, an unexpected skip fails the run (in the process that reports it, not
    in pytest-xdist's workers)."""
    if not hasattr(session.config, "workerinput") and _unexpected() and exitstatus == 0:
        session.exitstatus = 1


def pytest_collection_modifyitems(items):
    """Mark each test with its tier, and put the ``slow`` ones first: with
    ``-n 2 --dist loadgroup --no-loadscope-reorder`` (make test) a worker takes the next
    test (or xdist group) in this order when it is free, so the long ones start at once
    and the short ones fill in beside them."""
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def synthetic_bin(tmp_path_factory):
    """A small binarised synthetic corpus (300 / 40 / 40 pairs) shared by the session."""
    from sparse_attn_data.synthetic import binarize, write_corpus

    root = tmp_path_factory.mktemp("synthetic")
    write_corpus(root / "raw", train=300, valid=40, test=40)
    return Path(binarize(root / "raw", root / "bin"))


@pytest.fixture(scope="session")
def aligned_synthetic(tmp_path_factory):
    """The one word aligner the session trains: a synthetic corpus of 2,000 training and
    300 test pairs (gold alignments and fertilities beside them) in ``folder``, and
    ``aligner``, trained on the training pairs with the sink (as Malaviya et al.) and
    saved in ``folder / "aligner"`` for the commands."""
    from sparse_attn_data.synthetic import write_corpus
    from sparse_attn_plugin.evaluation.aligner import train_aligner

    folder = tmp_path_factory.mktemp("aligned")
    write_corpus(folder, train=2000, valid=20, test=300)
    sides = [(folder / name).read_text(encoding="utf-8").splitlines()
             for name in ("train.src", "train.tgt")]
    aligner = train_aligner(*sides, sink=True)
    aligner.save(folder / "aligner")
    return SimpleNamespace(folder=folder, aligner=aligner)


@pytest.fixture(scope="session")
def alpha_run(synthetic_bin, tmp_path_factory):
    """A tiny model trained on :func:`synthetic_bin` with learned alpha-entmax in the
    decoder (heads started at random, as Correia et al.'s code does) and sparsemax in the
    encoder, a checkpoint saved after each of its 3 updates."""
    from helpers.fairseq_runs import train

    save_dir = tmp_path_factory.mktemp("alpha-run")
    train(synthetic_bin, save_dir, "--attn-fn", "entmax_alpha", "--entmax-alpha-init", "random",
          "--encoder-self-attn-fn", "sparsemax", "--lr", "5e-2", "--save-interval-updates", "1",
          updates=3, in_process=True)
    return save_dir


@pytest.fixture(scope="session")
def fairseq_server():
    """The session's fork servers for fairseq-train and fairseq-generate
    (``helpers/fairseq_server.py``): the folder of their sockets, a short path under
    /tmp (a socket's path may not pass 107 bytes, and pytest's temporary folders can)."""
    import shutil
    import subprocess
    import sys
    import tempfile

    from helpers import fairseq_env

    folder = Path(tempfile.mkdtemp(prefix="fairseq-", dir="/tmp"))
    servers = [subprocess.Popen(
        [sys.executable, str(HELPERS / "fairseq_server.py"), str(folder), command],
        stdout=subprocess.PIPE, text=True, env=fairseq_env())
        for command in ("fairseq-train", "fairseq-generate")]
    for server in servers:
        assert server.stdout.readline().strip() == "ready", "a fairseq fork server did not start"
    yield folder
    for server in servers:
        server.kill()
        server.wait()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def fast_fairseq(fairseq_server, monkeypatch):
    """The drivers' ``fairseq-train`` and ``fairseq-generate`` (``pipeline.fairseq_command``)
    run by the fork server: the same commands with the same arguments, output and exit
    status, without an interpreter start-up each. For tests whose subject is the driver;
    the commands as a user types them are tested in test_fairseq_cli.py and the others."""
    import sys

    from sparse_attn_experiments import pipeline

    client = [sys.executable, "-S", str(HELPERS / "fairseq_client.py"), str(fairseq_server)]
    monkeypatch.setattr(pipeline, "fairseq_command", lambda name: [*client, name])
