"""fairseq-train --fp16 and fairseq-generate --fp16 on the CUDA device for every kind of
attention: softmax, top-k, sparsemax, 1.5-entmax, learned alpha-entmax, hard retrieval
(decoder self- and cross-attention), constrained sparsemax with fertilities (the
transformer's cross-attention with constant fertilities, the LSTM with predicted ones),
and the kernel transformer's smoothers; and the default ``--attn-impl auto``.

Each decode is checked against decodes it must agree with and one it must not:

* the same checkpoint decoded on the CPU in float32, the path the CPU tiers test: the
  same translation for most sentences (a half-precision decode can break a near tie of
  two beams the other way), with nearly the same score;
* for the normalisers with kernels, ``{'attn_impl': 'torch'}`` (eager) on the device: in
  float32 the same translations with scores equal to rounding (as
  tests/e2e/test_fairseq_cli.py checks the kernels under Triton's interpreter), and in
  float16 as close as the CPU's;
* the same checkpoint with its attention switched (to softmax, or another kernel): some
  translation or its score changes, so the attention decoded with is the one trained."""

from dataclasses import dataclass
from functools import partial
from typing import Callable, Dict, Tuple

import pytest

from sparse_attn_plugin.normalizers import COMPILED

from helpers import BIN, PLUGIN
from helpers.fairseq_runs import STRATEGY, fairseq_generate, fairseq_train, generate, run, train
from helpers.models import attn_flags

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: fairseq computes on the CUDA device (no ``--cpu``), in this process.
ON_DEVICE = {"cpu": False, "in_process": True}
#: Half precision; one process even where several GPUs are visible.
TRAIN_FP16 = ["--fp16", "--distributed-world-size", "1"]
UPDATES = 30
#: The test split of ``synthetic_bin``.
SENTENCES = 40
#: A float16 decode against a float32 one (or another float16 one): at least this share
#: of the sentences translated alike, their scores (log2-probabilities per token) this
#: close.
HALF_SAME = 0.8
HALF_SCORE_ATOL = 0.05
#: Two float32 decodes on the device that differ only in how the normalisers compute.
FLOAT_SCORE_ATOL = 1e-4

DECODER_HARD = ["--decoder-self-attn-fn", "hard", "--decoder-cross-attn-fn", "hard"]
DECODER_SOFT = {"decoder_self_attn_fn": "softmax", "decoder_cross_attn_fn": "softmax"}
Translations = Dict[str, Tuple[float, str]]


def transformer(*flags, arch="sparse_transformer"):
    """A tiny model of ``arch`` trained with ``flags`` (and the decoder of the same
    sizes), as the CPU tiers' ``train`` and ``generate``."""
    def train_it(data, save_dir):
        return train(data, save_dir, *flags, *TRAIN_FP16, updates=UPDATES, arch=arch,
                     **ON_DEVICE)
    return train_it, generate


def lstm(*flags):
    """The constrained LSTM of the CPU tiers (``--task sparse_translation``)."""
    def train_it(data, save_dir):
        fairseq_train(data, save_dir, *flags, *TRAIN_FP16, updates=UPDATES, **ON_DEVICE)
        return save_dir / "checkpoint_last.pt"
    return train_it, fairseq_generate


@dataclass
class Kind:
    """How to train a kind of attention and decode it, and ``switched``: model overrides
    that decode the same checkpoint with another attention."""

    made: Tuple[Callable, Callable]
    switched: Dict[str, str]
    kernels: bool = False  # whether --attn-impl chooses its code


def _sparse(name):
    return Kind(transformer(*attn_flags(name, topk=3), "--entmax-alpha-init", "random"),
                {"attn_fn": "softmax"}, kernels=name in COMPILED)


KINDS = {
    **{name: _sparse(name) for name in ("topk", "sparsemax", "entmax15", "entmax_alpha")},
    "softmax": Kind(transformer("--attn-fn", "softmax"), {"attn_fn": "sparsemax"}),
    "hard": Kind(transformer(*DECODER_HARD), DECODER_SOFT),
    "csparsemax": Kind(transformer(*attn_flags("csparsemax"), "--fertility", "constant",
                                   "--fertility-value", "2"),
                       {"decoder_cross_attn_fn": "csoftmax"}),
    "lstm-csparsemax-predicted": Kind(lstm(*STRATEGY["predicted"]), {"attn_fn": "csoftmax"}),
    **{f"kernel-{kernel}": Kind(
        transformer("--kernel", kernel, arch="kernel_transformer"),
        {"kernel": "rbf" if kernel == "exponential" else "exponential"})
       for kernel in ("linear", "polynomial", "exponential", "rbf")},
}


def translations(out) -> Translations:
    """``{"H-i": (score, text)}`` from ``generate``'s lines or ``fairseq_generate``'s dict."""
    if isinstance(out, dict):
        return {key: (float(score), text) for key, (score, text) in out.items()}
    return {key: (float(score), text) for key, score, text in
            (line.split("\t") for line in out)}


def assert_alike(ours: Translations, reference: Translations, same: float, atol: float,
                 what: str):
    """At least ``same`` of the sentences get the reference's translation, with scores
    within ``atol``."""
    assert len(ours) == SENTENCES and ours.keys() == reference.keys(), what
    alike = [key for key in ours if ours[key][1] == reference[key][1]]
    assert len(alike) >= same * SENTENCES, \
        f"{what}: {SENTENCES - len(alike)} of {SENTENCES} translations differ"
    worst = max(abs(ours[key][0] - reference[key][0]) for key in alike)
    assert worst <= atol, f"{what}: scores differ by up to {worst}"


@pytest.fixture(scope="module")
def trained(synthetic_bin, tmp_path_factory):
    """``trained(kind)``: the checkpoint of that kind, trained once per module."""
    done = {}

    def checkpoint(kind):
        if kind not in done:
            train_it, _ = KINDS[kind].made
            done[kind] = train_it(synthetic_bin, tmp_path_factory.mktemp(kind))
        return done[kind]
    return checkpoint


#: The linear smoother divides by a sum that can cancel: on the CPU in float16 its
#: gradients at random initialisation overflow at every loss scale down to fairseq's
#: minimum in some initialisations, with the smoother computed in float32 as without.
#: On an H100 (results/gpu) the test fails as expected.
LINEAR_FP16 = pytest.mark.xfail(reason="the linear kernel smoother's float16 gradients "
                                "overflow", strict=False)


@pytest.mark.parametrize("kind", [pytest.param(kind, marks=LINEAR_FP16)
                                  if kind == "kernel-linear" else kind for kind in KINDS])
def test_half_precision_train_and_generate_on_the_device(synthetic_bin, trained, kind):
    spec = KINDS[kind]
    checkpoint = trained(kind)
    decode = partial(spec.made[1], synthetic_bin, checkpoint)

    def decoded(*flags, on_device=True):
        where = ON_DEVICE if on_device else {"cpu": True, "in_process": True}
        return translations(decode(*flags, **where))

    ours = decoded("--fp16")
    assert len(ours) == SENTENCES
    assert all(abs(score) < float("inf") for score, _ in ours.values()), "a score is not finite"
    assert_alike(ours, decoded(on_device=False), HALF_SAME, HALF_SCORE_ATOL,
                 "float16 on the device against float32 on the CPU")
    if spec.kernels:
        eager = ["--model-overrides", repr({"attn_impl": "torch"})]
        assert_alike(decoded(), decoded(*eager), 1.0, FLOAT_SCORE_ATOL,
                     "float32 on the device, kernels against eager")
        assert_alike(ours, decoded("--fp16", *eager), HALF_SAME, HALF_SCORE_ATOL,
                     "float16 on the device, kernels against eager")
    other = decoded("--fp16", "--model-overrides", repr(spec.switched))
    assert len(other) == SENTENCES
    # As the CPU tier's switches are checked: a briefly trained model may translate alike
    # with another attention (hard retrieval and the LSTM's csoftmax do, on the CPU), but
    # not with the same scores.
    assert any(other[key] != ours[key] for key in ours), \
        f"decoding with {spec.switched} changed no translation and no score"


def test_auto_decodes_as_the_triton_kernels(synthetic_bin, trained):
    """The default ``--attn-impl auto`` through the console script as a user types it:
    the same output as ``{'attn_impl': 'triton'}``, scores included."""
    checkpoint = trained("entmax_alpha")
    command = [BIN / "fairseq-generate", synthetic_bin, "--user-dir", PLUGIN, "--path",
               checkpoint, "--beam", "3", "--max-len-b", "30", "--batch-size", "16", "--fp16"]
    default = run(command).stdout.splitlines()
    triton = run([*command, "--model-overrides", repr({"attn_impl": "triton"})])
    lines = [line for line in default if line.startswith("H-")]
    assert len(lines) == SENTENCES
    assert lines == [line for line in triton.stdout.splitlines() if line.startswith("H-")]
