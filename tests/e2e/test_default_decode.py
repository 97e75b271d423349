"""The default ``--attn-impl`` in a whole decode of more than 1,000 normaliser calls, in
process and through ``fairseq-generate`` as a user types it: nothing compiles, nothing is
timed (every call runs exactly one kernel), and the kernel is the one the rule names (a
decoding step's lean one, ``step_weights``, counted as the kernel it trims), the same from
the first batch to the last, so that the decode is the eager one, hypothesis for
hypothesis. (The old default timed candidates on each new kind of scores and let compiled
ones join after 600 calls, in the middle of a decode.)"""

import os
import re

import pytest
import torch
from torch._dynamo.utils import counters

from sparse_attn_plugin.normalizers import dispatch, entmax_family, entmax_newton, topk
from sparse_attn_plugin.normalizers.dispatch import NEWTON_FROM
from sparse_attn_plugin.normalizers.entmax_family import ENTMAX15, SPARSEMAX, _entmax_alpha
from sparse_attn_plugin.normalizers.topk import _topk

from helpers import PLUGIN, REPO
from helpers.fairseq_runs import decoded, fairseq, generate, train

pytestmark = [pytest.mark.xdist_group("default_decode"), pytest.mark.slow]

#: Every family with several implementations, at some site: sparsemax in the encoder,
#: learned alpha in decoder self-attention, top-k in cross-attention; 1.5-entmax in a
#: second model.
MODELS = {
    "sparsemax, alpha, top-k": ["--encoder-self-attn-fn", "sparsemax",
                                "--decoder-self-attn-fn", "entmax_alpha",
                                "--decoder-cross-attn-fn", "topk", "--topk", "3"],
    "entmax15": ["--attn-fn", "entmax15"],
}
FAMILIES = {"sparsemax, alpha, top-k": {"sparsemax", "alpha-entmax", "top-k"},
            "entmax15": {"1.5-entmax"}}
#: The eager kernels of each family.
EAGER = {"sparsemax": {"sort", "newton"}, "1.5-entmax": {"sort", "newton"},
         "top-k": {"topk kernel"}, "alpha-entmax": {"newton"}}
REFUSE_COMPILE = REPO / "tests" / "helpers" / "refuse_compile"
#: Batches of 4 sentences, every hypothesis forced to 30 tokens: 10 batches of 31 steps.
DECODE = ["--batch-size", "4", "--min-len", "30", "--max-len-a", "0", "--max-len-b", "30",
          "--beam", "5", "--required-batch-size-multiple", "1"]


def expected_kernel(family, numel):
    """The rule, said again here: on a CPU, auto runs the eager kernels; sparsemax and
    1.5-entmax sort below NEWTON_FROM scores and solve by Newton from there on."""
    if family in ("sparsemax", "1.5-entmax"):
        return "sort" if numel < NEWTON_FROM else "newton"
    return {"top-k": "topk kernel", "alpha-entmax": "newton"}[family]


@pytest.fixture(scope="module")
def checkpoints(synthetic_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("default-decode")
    return {name: train(synthetic_bin, root / str(i), *flags, updates=6, in_process=True)
            for i, (name, flags) in enumerate(MODELS.items())}


@pytest.fixture
def watched(monkeypatch):
    """Every dispatch and every kernel run, recorded; compiling refused."""
    calls, runs = [], []

    def refuse(*args, **kwargs):
        raise AssertionError("something compiled during a default decode")

    monkeypatch.setattr(torch, "compile", refuse)
    for module in (entmax_newton, topk):  # compiled() caches what earlier tests compiled
        monkeypatch.setattr(module, "compiled", refuse)
    call = dispatch.Implementations.__call__

    def recorded_call(self, impl, scores, *args):
        calls.append((self.family, impl, scores.numel()))
        return call(self, impl, scores, *args)

    monkeypatch.setattr(dispatch.Implementations, "__call__", recorded_call)

    def recorded_step(module, name, family_of, kernel):
        """A decoding step's lean kernel (``step_weights``): a call and its run."""
        step = getattr(module, name)

        def run(scores, *args):
            family = family_of(*args)
            calls.append((family, "auto", scores.numel()))
            runs.append((family, kernel))
            return step(scores, *args)
        monkeypatch.setattr(module, name, run)

    recorded_step(entmax_family, "sorted_step",
                  lambda alpha: "sparsemax" if alpha == 2.0 else "1.5-entmax", "sort")
    recorded_step(topk, "softmax_step", lambda: "top-k", "topk kernel")
    for kernels in (SPARSEMAX, ENTMAX15, _entmax_alpha(30), _topk(3)):
        def counted(name, fn, family=kernels.family):
            return lambda *args: runs.append((family, name)) or fn(*args)

        monkeypatch.setattr(kernels, "eager", {name: counted(name, fn)
                                               for name, fn in kernels.eager.items()})
        for fused in ("compiled", "triton"):
            name, fn = getattr(kernels, fused)
            monkeypatch.setattr(kernels, fused, (name, counted(name, fn)))
    return calls, runs


@pytest.mark.parametrize("model", MODELS)
def test_a_default_decode_in_process_runs_the_rules_kernel_once_per_call(
        synthetic_bin, checkpoints, watched, model):
    calls, runs = watched
    graphs = counters["stats"]["unique_graphs"]
    hypotheses = generate(synthetic_bin, checkpoints[model], *DECODE, in_process=True)
    assert len(hypotheses) == 40
    assert len(calls) >= 1000, len(calls)
    assert {impl for _, impl, _ in calls} == {"auto"}
    assert runs == [(family, expected_kernel(family, numel)) for family, _, numel in calls]
    assert counters["stats"]["unique_graphs"] == graphs
    assert {family for family, _ in runs} == FAMILIES[model]


@pytest.mark.parametrize("model", MODELS)
def test_fairseq_generate_with_the_default_compiles_nothing_and_decodes_as_torch(
        synthetic_bin, checkpoints, monkeypatch, model):
    """The console script, with ``torch.compile`` made to raise in its process
    (``helpers/refuse_compile``): it succeeds, logs eager kernels only, and gives the
    hypotheses and scores of an explicit ``--attn-impl torch`` decode."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(REFUSE_COMPILE), os.environ.get("PYTHONPATH")])))
    outputs = {}
    for impl in ("auto", "torch"):
        overrides = [] if impl == "auto" else ["--model-overrides", "{'attn_impl': 'torch'}"]
        proc = fairseq("fairseq-generate", [
            synthetic_bin, "--user-dir", PLUGIN, "--path", checkpoints[model], "--cpu",
            *DECODE, *overrides])
        outputs[impl] = proc.stdout + proc.stderr
    for impl, stdout in outputs.items():
        chosen = set(re.findall(rf"dispatch\W+([\w.-]+) on cpu with --attn-impl {impl}: (.+)",
                                stdout))
        assert {family for family, _ in chosen} == FAMILIES[model], stdout[-2000:]
        assert all(kernel in EAGER[family] for family, kernel in chosen), chosen
    assert len(decoded(outputs["auto"])) == 40          # H- and P- lines of 40 sentences
    assert decoded(outputs["auto"]) == decoded(outputs["torch"])
