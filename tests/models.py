"""Building tiny models in-process through fairseq's own argument parsing."""

from fairseq import options, tasks

from sparse_attn_plugin.normalizers import CONSTRAINED

from conftest import PLUGIN

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
