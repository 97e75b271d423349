"""``sparse_attn_plugin.entmax_compat`` is a drop-in for the entmax package (1.3): every
public name with entmax's signature, and entmax's own shipped test suite passing against
it (run with ``entmax`` and its submodules aliased to the compatibility module)."""

import importlib
import inspect
import shutil
import subprocess
import sys
import types
from pathlib import Path

import entmax
import pytest
import torch

import sparse_attn_plugin
from sparse_attn_plugin import entmax_compat

from helpers import REPO

PUBLIC = sorted(name for name, value in vars(entmax).items()
                if not name.startswith("_") and not isinstance(value, types.ModuleType))
ALIASES = """import sys
import sparse_attn_plugin.entmax_compat as compat
for name in ("entmax", "entmax.activations", "entmax.root_finding", "entmax.losses"):
    sys.modules[name] = compat
"""


def test_every_public_name_of_entmax_is_here_with_its_signature():
    assert PUBLIC == sorted(entmax_compat.__all__) == sorted(entmax_compat.EQUIVALENTS)
    for name in PUBLIC:
        theirs = getattr(entmax, name)
        ours = getattr(entmax_compat, name)
        if inspect.isclass(theirs):
            theirs, ours = theirs.__init__, ours.__init__
        assert [(p.name, p.default) for p in inspect.signature(ours).parameters.values()] == \
            [(p.name, p.default) for p in inspect.signature(theirs).parameters.values()], name


def test_every_equivalent_names_a_public_object_of_this_library():
    for name, target in entmax_compat.EQUIVALENTS.items():
        module, attribute = target.split(".")
        owner = getattr(sparse_attn_plugin, module, None) or __import__(
            f"sparse_attn_plugin.{module}", fromlist=[attribute])
        assert callable(getattr(owner, attribute)), (name, target)


def equivalent(name: str):
    """The object of this library ``EQUIVALENTS[name]`` names."""
    module, attribute = entmax_compat.EQUIVALENTS[name].split(".")
    return getattr(importlib.import_module(f"sparse_attn_plugin.{module}"), attribute)


#: Arguments both sides take, chosen so that another target gives other numbers (alpha 1.3
#: is not 1.5's entmax15 nor normmax; normmax at 3 is not entmax at 3; budget 3 is not 1).
SHARED = {"entmax_bisect": {"alpha": 1.3}, "EntmaxBisect": {"alpha": 1.3},
          "entmax_bisect_loss": {"alpha": 1.3}, "EntmaxBisectLoss": {"alpha": 1.3},
          "normmax_bisect": {"alpha": 3.0}, "NormmaxBisect": {"alpha": 3.0},
          "normmax_bisect_loss": {"alpha": 3.0}, "NormmaxBisectLoss": {"alpha": 3.0},
          "budget_bisect": {"budget": 3}, "BudgetBisect": {"budget": 3}}


@pytest.mark.parametrize("name", sorted(entmax_compat.EQUIVALENTS))
def test_each_equivalent_computes_what_its_compat_name_computes(name):
    """Issue 57: the table is read by the benchmark and the docs, and pointing
    ``normmax_bisect`` at ``functional.entmax_alpha`` passed every test. Entry by entry,
    the compat object and the one the table names give the same numbers on the same
    scores (and targets, for a loss), with the same arguments (classes built with them)."""
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(5, 7, dtype=torch.float64, generator=generator)
    target = torch.randint(0, 7, (5,), generator=generator)
    inputs = (scores, target) if "loss" in name.lower() else (scores,)
    shared = SHARED.get(name, {})

    def run(thing):
        return thing(**shared)(*inputs) if isinstance(thing, type) else thing(*inputs, **shared)

    torch.testing.assert_close(run(getattr(entmax_compat, name)), run(equivalent(name)),
                               atol=1e-12, rtol=0)


@pytest.mark.slow
def test_entmax_own_test_suite_passes_against_the_compatibility_module(tmp_path):
    shipped = sorted(Path(entmax.__file__).parent.glob("test_*.py"))
    assert len(shipped) >= 4, shipped
    for path in shipped:
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "conftest.py").write_text(ALIASES)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                               "OMP_NUM_THREADS": "1"})
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in summary and "failed" not in summary and "error" not in summary


def test_weights_come_back_in_the_scores_dtype_as_entmax_gives_them():
    scores = torch.randn(3, 7).half()
    for function in (entmax_compat.sparsemax, entmax_compat.entmax15,
                     entmax_compat.entmax_bisect, entmax_compat.sparsemax_bisect):
        assert function(scores).dtype == torch.float16


@pytest.mark.parametrize("call", [
    lambda x: entmax_compat.sparsemax(x, k=0),
    lambda x: entmax_compat.entmax15(x, k=2.5),
    lambda x: entmax_compat.entmax_bisect(x, n_iter=0),
    lambda x: entmax_compat.entmax_bisect(x, alpha=-1.0),
])
def test_bad_settings_are_one_line_as_in_the_library(call):
    with pytest.raises(ValueError) as error:
        call(torch.randn(2, 5))
    assert "\n" not in str(error.value)


def test_k_and_n_iter_change_nothing():
    """``k`` is the partial sort's first guess: the same weights to rounding (the rows whose
    support passes it are solved by Newton steps, not the sort)."""
    scores = torch.randn(4, 9, dtype=torch.float64)
    torch.testing.assert_close(entmax_compat.sparsemax(scores, k=2),
                               entmax_compat.sparsemax(scores), rtol=0, atol=1e-12)
    assert torch.equal(entmax_compat.entmax_bisect(scores, 1.3, n_iter=3),
                       entmax_compat.entmax_bisect(scores, 1.3))


@pytest.mark.parametrize("name, settings", [
    ("Sparsemax", {"dim": 0, "k": 3}),
    ("Entmax15", {"dim": 0, "k": 3}),
    ("SparsemaxBisect", {"dim": 0, "n_iter": 80}),
    ("EntmaxBisect", {"alpha": 1.1, "dim": 0, "n_iter": 80}),
    ("NormmaxBisect", {"alpha": 3.0, "dim": 0, "n_iter": 80}),
    ("BudgetBisect", {"budget": 3, "dim": 0, "n_iter": 80}),
])
def test_modules_have_entmaxs_attributes_read_at_each_call(name, settings):
    """Each module has entmax 1.3's attributes with its defaults; set after construction
    (as code written for entmax does), they change what the next call computes, as in
    entmax (issue 55: ``m.alpha = 1.1`` used to leave alpha at 1.5)."""
    ours, theirs = getattr(entmax_compat, name)(), getattr(entmax, name)()
    for attribute in settings:
        assert getattr(ours, attribute) == getattr(theirs, attribute), attribute
    scores = torch.randn(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    before = ours(scores)
    for module in (ours, theirs):
        for attribute, value in settings.items():
            setattr(module, attribute, value)
    after = ours(scores)
    torch.testing.assert_close(after, theirs(scores), atol=1e-9, rtol=0)
    assert after.shape == before.shape and not torch.allclose(after, before)


def test_a_bad_alpha_or_n_iter_is_refused_at_construction():
    """As NormmaxLoss's: EntmaxBisectLoss(-1.0) and (1.5, n_iter=0) refuse when built, not
    at their first call."""
    with pytest.raises(ValueError, match="alpha"):
        entmax_compat.EntmaxBisectLoss(-1.0)
    with pytest.raises(ValueError, match="n_iter"):
        entmax_compat.EntmaxBisectLoss(1.5, n_iter=0)
    with pytest.raises(ValueError, match="n_iter"):
        entmax_compat.EntmaxBisect(1.5, n_iter=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["sparsemax_loss", "entmax15_loss", "sparsemax_bisect_loss",
                                  "entmax_bisect_loss", "normmax_bisect_loss", "SparsemaxLoss",
                                  "Entmax15Loss", "SparsemaxBisectLoss", "EntmaxBisectLoss",
                                  "NormmaxBisectLoss"])
def test_losses_come_back_in_the_scores_dtype_as_entmaxs(name, dtype):
    """Issue 55: half precision scores gave float32 losses (entmax: the scores' dtype);
    the gradient too is in the scores' dtype."""
    loss = getattr(entmax_compat, name)
    if name[0].isupper():
        loss = loss()
    scores = torch.randn(4, 6).to(dtype).requires_grad_()
    value = loss(scores, torch.tensor([0, 1, 2, 5]))
    assert value.dtype == dtype
    value.sum().backward()
    assert scores.grad.dtype == dtype
