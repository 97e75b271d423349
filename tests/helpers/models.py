"""Building tiny models in-process through fairseq's own argument parsing."""

import torch
from fairseq import options, tasks

import sparse_attn_plugin
from sparse_attn_plugin.normalizers import CONSTRAINED

from helpers import PLUGIN

sparse_attn_plugin.register()  # fairseq knows our models and criterions, as under --user-dir

TINY = [
    "--encoder-layers", "2", "--decoder-layers", "2",
    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
    "--dropout", "0", "--attention-dropout", "0",
]


def parse(data, arch="sparse_transformer", extra=()):
    parser = options.get_training_parser()
    tiny = TINY if "transformer" in arch else []
    argv = [str(data), "--user-dir", PLUGIN, "--arch", arch, "--cpu", *tiny, *extra]
    return options.parse_args_and_arch(parser, argv)


def build(data, arch="sparse_transformer", extra=()):
    """(task, model) for a tiny model on ``data`` with extra command-line flags (a
    transformer gets the :data:`TINY` sizes)."""
    args = parse(data, arch, extra)
    task = tasks.setup_task(args)
    return task, task.build_model(args)


def batch(task, split="test", size=6):
    """A padded batch of ``size`` sentence pairs from a split."""
    task.load_dataset(split)
    dataset = task.dataset(split)
    return dataset.collater([dataset[i] for i in range(size)])


def attn_flags(name, topk=2):
    """Flags that put normaliser ``name`` wherever it fits: every site, or (constrained
    ones) cross-attention with a sink and the paper's exhaustion constant."""
    if name in CONSTRAINED:
        return ["--decoder-cross-attn-fn", name, "--sink-token", "--exhaustion-c", "0.2"]
    return ["--attn-fn", name, *(["--topk", str(topk)] if name == "topk" else [])]


def peaked(model, seed=0):
    """Large random weights, so attention is far from uniform and beams diverge."""
    torch.manual_seed(seed)
    for p in model.parameters():
        p.data.normal_(0, 0.5)
    return model.eval()


def decode_incrementally(model, sample):
    """Decoder outputs and attention ``(B, T, ...)``, step by step with fairseq's
    incremental state (attention None where the model returns none)."""
    inp = sample["net_input"]
    encoder_out = model.encoder(inp["src_tokens"], inp["src_lengths"])
    state, outs, attns = {}, [], []
    for t in range(inp["prev_output_tokens"].size(1)):
        out, extra = model.decoder(inp["prev_output_tokens"][:, : t + 1], encoder_out,
                                   incremental_state=state)
        outs.append(out)
        attns.append(extra["attn"][0] if extra.get("attn") else None)
    attn = None if any(a is None for a in attns) else torch.cat(attns, dim=1)
    return torch.cat(outs, dim=1), attn


def teacher_forced(model, src, tokens, eos):
    """Log-probabilities of ``tokens`` given ``src`` (one sentence, no padding) and the
    attention, from one full forward pass."""
    prev = torch.cat([tokens.new_tensor([eos]), tokens[:-1]])[None]
    with torch.no_grad():
        logits, extra = model(src[None], torch.tensor([src.numel()]), prev)
    lprobs = model.get_normalized_probs((logits, None), log_probs=True)[0]
    return lprobs.gather(-1, tokens[:, None])[:, 0], extra["attn"][0][0]
