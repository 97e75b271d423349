"""Learned alphas under fairseq's mixed precision: in a model cast to float16 or
bfloat16 (fairseq's trainer does so under --fp16 / --bf16), ``alpha_logit`` stays
float32, every optimiser wrapper fairseq uses for them moves it by the float32 step of
the wrapped optimiser, and loading a checkpoint into a half model keeps its value."""

import pytest
import torch
from fairseq import optim, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim.fp16_optimizer import FP16Optimizer, MemoryEfficientFP16Optimizer

from helpers.models import batch, build, parse

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# alpha = 1.03 (z = log(0.03 / 0.97) = -3.476): float16 spaces numbers near z by 2^-9.
ALPHA_FLAGS = ["--attn-fn", "entmax_alpha", "--entmax-alpha-init", "1.03"]
# Adam's first step moves every z by about lr: below half of float16's spacing there, so
# a float16 z would not move at all.
OPTIMIZER_FLAGS = ["--optimizer", "adam", "--lr", "1e-4"]

#: fairseq's precision flags -> (the dtype its trainer casts the model to, the wrapper).
WRAPPERS = {
    "--fp16": (torch.float16, FP16Optimizer),  # a flattened float32 copy of all parameters
    "--fp16 --fp16-no-flatten-grads": (torch.float16, FP16Optimizer),
    "--memory-efficient-fp16": (torch.float16, MemoryEfficientFP16Optimizer),
    "--bf16": (torch.bfloat16, FP16Optimizer),  # no loss scaling, never flattened
    "--memory-efficient-bf16": (torch.bfloat16, MemoryEfficientFP16Optimizer),
}


def alpha_logits(model):
    return {name: p for name, p in model.named_parameters() if name.endswith("alpha_logit")}


def loss_of(model, task):
    sample = batch(task)
    inp = {k: sample["net_input"][k] for k in ("src_tokens", "src_lengths", "prev_output_tokens")}
    return model(**inp)[0].float().logsumexp(-1).mean()


@pytest.mark.parametrize("flags", list(WRAPPERS))
def test_fairseq_optimiser_wrappers_update_float32_alphas_by_the_float32_step(
        synthetic_bin, monkeypatch, flags):
    dtype, wrapper = WRAPPERS[flags]
    # The flattened float32 copy is kept on torch.cuda.current_device(); on this CPU-only
    # machine the parameters' device index is None, so that is where it goes.
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    args = parse(synthetic_bin, extra=[*ALPHA_FLAGS, *OPTIMIZER_FLAGS, *flags.split()])
    cfg = convert_namespace_to_omegaconf(args)
    task, model = build(synthetic_bin, extra=ALPHA_FLAGS)
    model = model.half() if dtype == torch.float16 else model.to(dtype=dtype)  # as the trainer
    alphas = alpha_logits(model)
    assert len(alphas) == 6 and {p.dtype for p in alphas.values()} == {torch.float32}
    assert {p.dtype for p in model.parameters()} == {dtype, torch.float32}

    optimizer = wrapper.build_optimizer(cfg, [p for p in model.parameters() if p.requires_grad])
    optimizer.zero_grad()
    optimizer.backward(loss_of(model, task))
    scale = optimizer.scaler.loss_scale if optimizer.scaler is not None else 1.0
    # The wrapped optimiser's own step on float32 copies of z with the unscaled gradients.
    references = {}
    for name, p in alphas.items():
        references[name] = torch.nn.Parameter(p.detach().clone())
        references[name].grad = p.grad / scale
    optim.build_optimizer(cfg.optimizer, list(references.values())).step()
    before = {name: p.detach().clone() for name, p in alphas.items()}
    optimizer.step()

    for name, p in alphas.items():
        assert p.dtype == torch.float32, name
        torch.testing.assert_close(p.detach(), references[name].detach(), rtol=1e-6, atol=0)
        step = (p - before[name]).abs()
        assert (step > 0).all() and (step < 2 ** -10).all(), (name, step)
    assert {p.dtype for p in model.parameters()} == {dtype, torch.float32}


def test_checkpoint_loaded_into_a_half_model_keeps_float32_alphas(synthetic_bin, tmp_path):
    """fairseq saves ``utils.move_to_cpu(model.state_dict())`` and fairseq-generate
    --fp16 calls ``model.half()`` after loading: z comes back bit for bit."""
    task, trained = build(synthetic_bin, extra=ALPHA_FLAGS)
    with torch.no_grad():
        for p in alpha_logits(trained).values():
            p.add_(torch.randn_like(p) * 1e-3)  # values float16 cannot hold
    want = {name: p.detach().clone() for name, p in alpha_logits(trained).items()}
    trained.half()
    torch.save(utils.move_to_cpu(trained.state_dict()), tmp_path / "model.pt")

    _, loaded = build(synthetic_bin, extra=ALPHA_FLAGS)
    loaded.half().load_state_dict(torch.load(tmp_path / "model.pt"))
    loaded.half()
    for name, p in alpha_logits(loaded).items():
        assert p.dtype == torch.float32 and torch.equal(p.detach(), want[name]), name
        assert not torch.equal(p.detach().half().float(), want[name])
