"""End to end through fairseq's own commands on the tiny synthetic corpus:
fairseq-train -> checkpoint -> fairseq-generate for every normaliser, decode-time
overrides, 2-process CPU data parallelism, and start-up errors."""

import subprocess

import pytest
import torch
from fairseq import checkpoint_utils

from sparse_attn_plugin.normalizers import NAMES

from helpers import BIN, PLUGIN, fairseq_env
from helpers.fairseq_runs import ROUNDING, fairseq, gap, generate, run, train, translations
from helpers.models import TINY, attn_flags

# One worker trains the module's checkpoints (make test distributes by --dist loadgroup).
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.xdist_group("fairseq_cli"), pytest.mark.slow]

DECODER_HARD = {"decoder_self_attn_fn": "hard", "decoder_cross_attn_fn": "hard"}
DECODER_SOFT = {"decoder_self_attn_fn": "softmax", "decoder_cross_attn_fn": "softmax"}
ALL_SOFT = {"encoder_self_attn_fn": "softmax", **DECODER_SOFT}
#: What each normaliser's checkpoint is decoded with again, to show that its normaliser
#: made the decode: softmax for those that replace it at every site; the unconstrained
#: counterpart of a constrained one (cross-attention only); softmax on the decoder sites
#: for hard retrieval (Xu et al. 2021, Table 4). Softmax itself, the others' reference,
#: against sparsemax (and, in test_softmax_decodes_as_fairseqs_transformer, against
#: fairseq's own transformer).
SWITCHED = {name: {"attn_fn": "softmax"} for name in NAMES}
SWITCHED.update(softmax={"attn_fn": "sparsemax"}, hard=DECODER_SOFT,
                csoftmax={"decoder_cross_attn_fn": "softmax"},
                csparsemax={"decoder_cross_attn_fn": "sparsemax"})


def overridden(overrides):
    return ["--model-overrides", repr(overrides)]


@pytest.fixture(scope="module")
def checkpoints(synthetic_bin, tmp_path_factory):
    """One briefly trained checkpoint per normaliser (fairseq-train in process), and one
    decoder-hard model (``hard-decoder``)."""
    root = tmp_path_factory.mktemp("ckpt")
    trained = {name: train(synthetic_bin, root / name, *attn_flags(name, topk=3),
                           in_process=True) for name in NAMES}
    trained["hard-decoder"] = train(synthetic_bin, root / "hard-decoder", *[
        f"--{k.replace('_', '-')}=hard" for k in DECODER_HARD], in_process=True)
    return trained


def test_console_scripts_train_then_generate(synthetic_bin, tmp_path):
    """The user's path: fairseq-train and fairseq-generate as typed, with the plugin; the
    decode is 1.5-entmax's: not the one the same checkpoint gives with softmax (decoded
    in process)."""
    checkpoint = train(synthetic_bin, tmp_path, "--attn-fn", "entmax15", updates=4)
    decode = translations(synthetic_bin, checkpoint)
    assert len(decode) == 40
    softmax = translations(synthetic_bin, checkpoint, *overridden({"attn_fn": "softmax"}),
                           in_process=True)
    assert gap(decode, softmax) > ROUNDING, "entmax15 decoded as softmax"


@pytest.mark.parametrize("name", NAMES)
def test_train_then_generate(synthetic_bin, checkpoints, name):
    """Each normaliser's checkpoint decodes with its normaliser: hypotheses or scores
    differ from the same checkpoint's decode with :data:`SWITCHED`."""
    decode = translations(synthetic_bin, checkpoints[name], in_process=True)
    assert len(decode) == 40  # one per test sentence
    switched = translations(synthetic_bin, checkpoints[name], *overridden(SWITCHED[name]),
                            in_process=True)
    assert gap(decode, switched) > ROUNDING, f"{name} decoded as with {SWITCHED[name]}"
    state = torch.load(checkpoints[name], weights_only=True)  # torch>=2.6 default loading
    cfg = state["cfg"]["model"]
    assert (cfg.decoder_cross_attn_fn or cfg.attn_fn) == name


@pytest.mark.parametrize("trained,decode", [("entmax_alpha", "softmax"), ("softmax", "topk")])
def test_model_overrides_switch_the_normaliser(synthetic_bin, checkpoints, trained, decode):
    overrides = {"attn_fn": decode}
    switched = translations(synthetic_bin, checkpoints[trained], *overridden(overrides),
                            in_process=True)
    assert len(switched) == 40
    assert gap(switched, translations(synthetic_bin, checkpoints[trained],
                                      in_process=True)) > ROUNDING, "the switch changed nothing"
    models, _ = checkpoint_utils.load_model_ensemble([str(checkpoints[trained])],
                                                     arg_overrides=overrides)
    kinds = {type(m).__name__ for n, m in models[0].named_modules() if n.endswith("normalizer")}
    assert kinds == {"Softmax" if decode == "softmax" else "TopK"}


def test_a_mistyped_override_is_named(synthetic_bin, checkpoints):
    """fairseq sets any --model-overrides key on the checkpoint's arguments: a key that
    names no argument gets a warning with the nearest one; a real key gets none."""
    decode = [synthetic_bin, "--user-dir", PLUGIN, "--path", checkpoints["softmax"],
              "--beam", "2", "--cpu"]
    typed = fairseq("fairseq-generate", [*decode, *overridden({"attn_fnn": "sparsemax"})])
    assert typed.returncode == 0
    assert ("'attn_fnn' (a --model-overrides key?) is no argument of sparse_transformer "
            "or fairseq and changes nothing; did you mean 'attn_fn'?") in typed.stderr
    right = fairseq("fairseq-generate", [*decode, *overridden({"attn_fn": "sparsemax"})],
                    in_process=True)
    assert "S-0" in right.stdout and "is no argument" not in right.stdout


def site_kinds(checkpoint, overrides):
    models, _ = checkpoint_utils.load_model_ensemble([str(checkpoint)], arg_overrides=overrides)
    return {n.split(".layers.")[0] + "." + n.split(".")[-2]: type(m).__name__
            for n, m in models[0].named_modules() if n.endswith("normalizer")}


@pytest.mark.parametrize("trained,overrides,kinds", [
    ("soft", DECODER_HARD, {"encoder.self_attn": "Softmax", "decoder.self_attn": "HardRetrieval",
                            "decoder.encoder_attn": "HardRetrieval"}),
    ("hard", DECODER_SOFT, {"encoder.self_attn": "Softmax", "decoder.self_attn": "Softmax",
                            "decoder.encoder_attn": "Softmax"}),
])
def test_hard_retrieval_switched_at_decoding_time(synthetic_bin, checkpoints, trained,
                                                  overrides, kinds):
    """Xu et al. 2021, Table 4: a soft-trained model decoded with hard decoder
    attention, and a hard-trained model decoded with softmax."""
    checkpoint = checkpoints["softmax" if trained == "soft" else "hard-decoder"]
    assert site_kinds(checkpoint, {}) != kinds
    assert site_kinds(checkpoint, overrides) == kinds
    switched = generate(synthetic_bin, checkpoint, "--model-overrides", repr(overrides),
                        in_process=True)
    assert len(switched) == 40
    assert switched != generate(synthetic_bin, checkpoint, in_process=True), \
        "the switch changed nothing"


def test_compiled_kernels_train_and_generate(synthetic_bin, tmp_path):
    """--attn-impl compiled through the console scripts: top-k, learned alpha-entmax and
    sparsemax by torch.compile'd kernels in training and in incremental decoding."""
    sites = ["--encoder-self-attn-fn", "topk", "--topk", "3", "--decoder-self-attn-fn",
             "entmax_alpha", "--decoder-cross-attn-fn", "sparsemax", "--attn-impl", "compiled"]
    checkpoint = train(synthetic_bin, tmp_path, *sites, updates=3)
    compiled = translations(synthetic_bin, checkpoint)
    assert len(compiled) == 40
    # the compiled kernels decode as the eager ones (to rounding), and the normalisers
    # they compute matter: softmax at the three sites decodes otherwise (both in process)
    eager = translations(synthetic_bin, checkpoint, *overridden({"attn_impl": "torch"}),
                         in_process=True)
    assert gap(compiled, eager) <= ROUNDING
    softmax = translations(synthetic_bin, checkpoint, *overridden(ALL_SOFT), in_process=True)
    assert gap(compiled, softmax) > ROUNDING, "the compiled kernels computed softmax"
    cfg = torch.load(checkpoint, weights_only=True)["cfg"]["model"]
    assert cfg.attn_impl == "compiled"


def test_softmax_decodes_as_fairseqs_transformer(synthetic_bin, checkpoints, tmp_path):
    """The softmax checkpoint holds the weights of fairseq's own ``transformer``: decoded
    as that model it gives the same hypotheses, and the same scores to rounding."""
    state = torch.load(checkpoints["softmax"], weights_only=False)
    state["cfg"]["model"]._name = state["cfg"]["model"].arch = "transformer"
    torch.save(state, tmp_path / "transformer.pt")
    ours = translations(synthetic_bin, checkpoints["softmax"], in_process=True)
    assert gap(ours, translations(synthetic_bin, tmp_path / "transformer.pt",
                                  in_process=True)) <= ROUNDING


def test_topk_train_only_switch_is_accepted(synthetic_bin, tmp_path):
    """--topk-train-only: top-k in training, plain softmax at inference. With k = 2 the
    top-k bites at inference (the same checkpoint decoded with the top-k kept differs),
    and the decode is the one of the same weights with --attn-fn softmax, exactly."""
    ckpt = train(synthetic_bin, tmp_path / "ck", "--attn-fn", "topk", "--topk", "2",
                 "--topk-train-only", updates=2, in_process=True)
    decode = translations(synthetic_bin, ckpt, in_process=True)
    assert len(decode) == 40
    softmax = translations(synthetic_bin, ckpt, *overridden({"attn_fn": "softmax"}),
                           in_process=True)
    assert gap(decode, softmax) == 0, "top-k applied at inference"
    topk = translations(synthetic_bin, ckpt, *overridden({"topk_train_only": False}),
                        in_process=True)
    assert gap(topk, softmax) > ROUNDING, "top-k kept at inference decoded as softmax"


def test_two_process_data_parallel_equals_update_freq_two(synthetic_bin, tmp_path):
    """legacy_ddp over gloo, one process per rank, ends with the parameters (learned
    alphas included) of one process accumulating two batches per update."""
    common = ["--attn-fn", "entmax_alpha", "--optimizer", "sgd", "--lr", "2.0",
              "--required-batch-size-multiple", "1", "--disable-validation",
              "--max-tokens", "500"]
    flags = [BIN / "fairseq-train", synthetic_bin, "--user-dir", PLUGIN, "--arch",
             "sparse_transformer", "--cpu", *TINY, "--max-update", "6", "--no-progress-bar",
             "--seed", "3", "--no-epoch-checkpoints", *common]
    single = run([*flags, "--save-dir", tmp_path / "single", "--update-freq", "2"])
    assert single.returncode == 0
    port = 20000 + (hash(str(tmp_path)) % 20000)
    ranks = [subprocess.Popen(
        [str(c) for c in flags] + ["--save-dir", str(tmp_path / "ddp"), "--ddp-backend",
                                   "legacy_ddp", "--distributed-no-spawn",
                                   "--distributed-backend", "gloo",
                                   "--distributed-world-size", "2", "--distributed-init-method",
                                   f"tcp://127.0.0.1:{port}", "--distributed-rank", str(rank)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=fairseq_env())
        for rank in (0, 1)]
    for proc in ranks:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    one = torch.load(tmp_path / "single" / "checkpoint_last.pt")["model"]
    two = torch.load(tmp_path / "ddp" / "checkpoint_last.pt")["model"]
    alphas = [k for k in one if k.endswith("alpha_logit")]
    assert len(alphas) == 6
    assert all(one[k].abs().max() > 1e-5 for k in alphas), "alphas were not trained"
    for key in one:
        torch.testing.assert_close(two[key], one[key], atol=1e-5, rtol=0, msg=key)


def test_fp16_training_keeps_learned_alphas_float32(synthetic_bin, tmp_path):
    """fairseq-train --fp16 casts the model to float16; the alphas' z must still train
    in float32: Adam's steps of about lr = 1e-4 are below float16's spacing at z = -3.48
    (alpha = 1.03), so a float16 z could not move. (--fp16-no-flatten-grads: the flat
    float32 copy fairseq uses by default lives on a GPU; test_mixed_precision.py checks
    that wrapper in-process.)"""
    ckpt = train(synthetic_bin, tmp_path, "--attn-fn", "entmax_alpha", "--entmax-alpha-init",
                 "1.03", "--fp16", "--fp16-no-flatten-grads", "--lr", "1e-4", updates=3,
                 in_process=True)
    state = torch.load(ckpt, weights_only=True)["model"]
    start = torch.tensor(1.03 - 1).div(2 - 1.03).log()
    alphas = {k: v for k, v in state.items() if k.endswith("alpha_logit")}
    assert len(alphas) == 6
    for key, z in alphas.items():
        assert z.dtype == torch.float32 and not torch.equal(z.half().float(), z), key
        assert (z != start).any(), f"{key} did not train"
    weight = state["decoder.layers.0.fc1.weight"]
    assert torch.equal(weight.half().float(), weight), "not trained in float16"
    assert len(generate(synthetic_bin, ckpt, "--fp16", in_process=True)) == 40


@pytest.mark.parametrize("flags,code,message", [
    (["--attn-fn", "nope"], 1, "error: --attn-fn: unknown attention normaliser 'nope'; "
     "choose from softmax, topk, sparsemax, entmax15, entmax_alpha, hard, csoftmax, csparsemax"),
    (["--decoder-cross-attn-fn", "sparsemaxx"], 1,
     "error: --decoder-cross-attn-fn: unknown attention normaliser 'sparsemaxx'"),
    (["--attn-impl", "cuda"], 1, "error: --attn-impl: unknown value 'cuda'; choose from "),
    (["--attn-fn", "sparsemax", "--attn-impl", "triton"], 1, "error: --attn-impl triton runs "
     "on a CUDA device (or under TRITON_INTERPRET=1, for testing); this run is on the CPU"),
    (["--attn-fn", "topk", "--topk", "0"], 1, "error: --topk must be >= 1, got 0"),
    (["--attn-fn", "entmax_alpha", "--entmax-alpha-init", "rand"], 1,
     "error: --entmax-alpha-init must be 'random' or a number in [1.01, 2.0), got 'rand'"),
    *[([f"--{site.replace('_', '-')}-attn-fn", kind], 1,
       f"error: attention normaliser '{kind}' cannot be used for {site.replace('_', ' ')} "
       "attention; it fits: decoder_cross")
      for kind in ("csoftmax", "csparsemax") for site in ("encoder_self", "decoder_self")],
])
def test_bad_flags_give_one_clear_line(synthetic_bin, tmp_path, monkeypatch, flags, code,
                                      message):
    monkeypatch.setenv("TRITON_INTERPRET", "0")           # as a user's run has it
    proc = run([BIN / "fairseq-train", synthetic_bin, "--user-dir", PLUGIN,
                "--arch", "sparse_transformer", "--cpu", "--max-tokens", "500",
                "--save-dir", tmp_path, *flags],
               check=False)
    assert proc.returncode == code
    assert message in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir()), "nothing may be written"



@pytest.mark.requires("triton")
def test_triton_kernels_train_and_decode_like_the_eager_ones(synthetic_bin, tmp_path):
    """--attn-impl triton through fairseq-train and fairseq-generate (the fused attention
    and row kernels under Triton's interpreter: tests/conftest.py sets TRITON_INTERPRET=1;
    short hypotheses, as the interpreter runs every attention call): the same hypotheses as
    the eager normalisers from the same checkpoint, their scores equal to rounding."""
    ckpt = train(synthetic_bin, tmp_path, "--attn-fn", "entmax_alpha",
                 "--decoder-cross-attn-fn", "topk", "--topk", "3", "--attn-impl", "triton",
                 "--max-tokens", "300", updates=1)
    short = ["--beam", "2", "--max-len-a", "0", "--max-len-b", "4"]  # the interpreter is slow
    fused = generate(synthetic_bin, ckpt, *short)
    eager = generate(synthetic_bin, ckpt, *short, "--model-overrides", "{'attn_impl': 'torch'}")
    assert len(fused) == 40
    fused, eager = ([line.split("\t") for line in lines] for lines in (fused, eager))
    assert [(i, text) for i, _, text in fused] == [(i, text) for i, _, text in eager]
    assert max(abs(float(a[1]) - float(b[1])) for a, b in zip(fused, eager)) < 1e-4


def test_the_lstm_learns_alpha_entmax_and_decodes_with_it(synthetic_bin, tmp_path):
    """``--arch sparse_lstm --attn-fn entmax_alpha`` (docs/methods.md): one learned alpha
    for the LSTM's one attention, trained with the model (it leaves its start, 1.5) and
    kept in the checkpoint that fairseq-generate decodes with."""
    run([BIN / "fairseq-train", synthetic_bin, "--user-dir", PLUGIN, "--cpu", "--arch",
         "sparse_lstm", "--encoder-embed-dim", "16", "--encoder-hidden-size", "16",
         "--attn-fn", "entmax_alpha", "--optimizer", "adam", "--lr", "5e-2", "--max-tokens",
         "1000", "--max-update", "3", "--save-dir", tmp_path, "--no-epoch-checkpoints",
         "--no-progress-bar", "--seed", "1"])
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)["model"]
    alphas = {k: v for k, v in state.items() if k.endswith("alpha_logit")}
    assert list(alphas) == ["decoder.attention.normalizer.alpha_logit"]
    assert alphas["decoder.attention.normalizer.alpha_logit"].shape == (1,)
    assert alphas["decoder.attention.normalizer.alpha_logit"].abs().item() > 1e-4  # z = 0: 1.5
    assert len(generate(synthetic_bin, tmp_path / "checkpoint_last.pt")) == 40

