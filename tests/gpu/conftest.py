"""The GPU tier (``make test-gpu``, i.e. ``pytest tests/gpu``): the Triton and compiled
kernels and fairseq's commands on a CUDA device.

Where no CUDA device is visible every test of the tier is skipped for one reason, printed
once at the end of the run, so CI on CPU machines is unchanged.

Triton's interpreter. ``tests/conftest.py`` sets ``TRITON_INTERPRET=1`` (unless it is
already set) when it is imported, before Triton is, so that the CPU tiers run the Triton
kernels on CPU tensors. Triton reads the variable when a kernel is *defined* (its
``@triton.jit`` decorator makes an interpreted function or a compiled one), and our
kernels are defined when ``normalizers/triton_kernels.py`` is first imported, on a
kernel's first call (``fused_triton._kernels``); torch.compile's generated kernels are
defined when they are compiled. So the tier sets ``TRITON_INTERPRET=0`` after collection
and before its first test (:func:`pytest_collection_modifyitems`): no module of the tier
imports the kernels or compiles anything when it is imported, and the kernel tests check
that the kernels they ran were compiled ones. The fairseq commands the tier starts inherit
the variable. A session that also runs the CPU tiers cannot give both the value they need
(the kernels are defined once per process), so there the GPU tier is skipped with one line
saying to run it on its own."""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
NO_CUDA = "no CUDA device: the GPU tier (make test-gpu) runs on a machine with one"
NOT_ALONE = ("the GPU tier runs in a pytest session of its own (make test-gpu): this one "
             "also runs the CPU tiers, which need TRITON_INTERPRET=1")
#: The module whose import defines our Triton kernels.
KERNELS_MODULE = "sparse_attn_plugin.normalizers.triton_kernels"


def _in_tier(item) -> bool:
    return HERE in Path(str(item.fspath)).parents


def pytest_collection_modifyitems(config, items):
    """Skip the tier for one reason where it cannot run; otherwise compile Triton's
    kernels for the device (``TRITON_INTERPRET=0``) before its first test."""
    ours = [item for item in items if _in_tier(item)]
    if not ours:
        return
    import torch

    reason = (NO_CUDA if not torch.cuda.is_available()
              else NOT_ALONE if len(ours) < len(items) else None)
    if reason is None:
        if KERNELS_MODULE in sys.modules and os.environ.get("TRITON_INTERPRET") == "1":
            raise pytest.UsageError("the Triton kernels were defined under "
                                    "TRITON_INTERPRET=1 before the GPU tier started")
        os.environ["TRITON_INTERPRET"] = "0"
        return
    for item in ours:
        item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter):
    """The one line that says why the tier was skipped, also without ``-rs`` and under
    pytest-xdist (read from the test reports, which its workers send back)."""
    said = {str(report.longrepr[2]) for report in terminalreporter.stats.get("skipped", [])
            if isinstance(report.longrepr, tuple)}
    for reason in (NO_CUDA, NOT_ALONE):
        if any(reason in line for line in said):
            terminalreporter.write_line(f"GPU tier skipped: {reason}")
