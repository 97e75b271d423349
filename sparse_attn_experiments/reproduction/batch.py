"""The paper's batch per update on the GPUs a training runs on.

fairseq-train's batch per update is ``B x F x W``: ``B`` = ``--max-tokens`` (tokens per
GPU batch; ``--batch-size``, sentences, where no ``--max-tokens`` is given), ``F`` =
``--update-freq`` (batches accumulated per update) and ``W`` = the world size (one
process per GPU: ``--distributed-world-size``, else every visible GPU, or one process
on the CPU where none is visible). A config's
flags are the paper's per-GPU settings for its ``G`` GPUs (the config's ``batch``), so
on ``W`` GPUs the paper's ``B x F x G`` is kept with ``F' = F G / W``, which must be a
whole number: Zhao et al.'s WMT14 En-De, 3584 tokens x 32 x 4 GPUs, trains with
update-freq 128 on one GPU and 64 on two, and is refused on three.
"""

from typing import List, Optional, Tuple

from sparse_attn_plugin.errors import SparseAttnError

from .plan import flag_value


class BatchError(SparseAttnError, ValueError):
    """The paper's batch cannot be kept exactly; the message is one line."""


def visible_gpus() -> int:
    """The GPUs fairseq-train sees (0 where none: it then trains in one CPU process)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def world_size(flags: List[str]) -> int:
    """Training processes of fairseq-train run with ``flags``: every visible GPU, or one
    on the CPU."""
    given = flag_value(flags, "--distributed-world-size")
    return int(given) if given else max(1, visible_gpus())


def where() -> str:
    """Where the trainings run, as the plan says it: ``on 2 GPUs (NAME)``, or ``on the
    CPU (no GPU visible)``."""
    import torch

    count = visible_gpus()
    if not count:
        return "on the CPU (no GPU visible)"
    name = f" ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""
    return f"on {_gpus(count)}{name}"


def _update_freq(flags: List[str]) -> int:
    value = flag_value(flags, "--update-freq", "1")
    if not value.isdigit() or int(value) < 1:
        raise BatchError(f"--update-freq {value}: the driver keeps the paper's batch with one "
                         "positive --update-freq for every epoch")
    return int(value)


def keep_batch(flags: List[str], paper_gpus: Optional[int]) -> Tuple[List[str], str]:
    """``flags`` with ``--update-freq`` set so that the batch per update is the paper's
    on :func:`world_size` GPUs (``paper_gpus`` None: as given), and a line saying what
    that batch is. Raises :class:`BatchError` where it cannot be kept exactly."""
    world, freq = world_size(flags), _update_freq(flags)
    tokens = flag_value(flags, "--max-tokens")
    size, unit = (tokens, "tokens") if tokens else (flag_value(flags, "--batch-size", "?"),
                                                    "sentences")
    paper = ""
    if paper_gpus is not None:
        if freq * paper_gpus % world:
            raise BatchError(
                f"the paper's batch ({size} {unit} x update-freq {freq} x {_gpus(paper_gpus)}) "
                f"cannot be kept on {_workers(world)}: update-freq {freq * paper_gpus}/{world} is "
                "not a whole number; train on a number of GPUs that divides "
                f"{freq * paper_gpus} (--distributed-world-size, CUDA_VISIBLE_DEVICES)")
        paper = f" (the paper's: {_gpus(paper_gpus)} x update-freq {freq})"
        freq = freq * paper_gpus // world
        flags = _without(flags, "--update-freq") + ["--update-freq", str(freq)]
    total = f"{int(size) * freq * world:,}" if size.isdigit() else "?"
    return flags, (f"{size} {unit} x update-freq {freq} x {_workers(world)} = {total} "
                   f"{unit} per update{paper}")


def _gpus(count: int) -> str:
    return f"{count} GPU" + ("s" if count > 1 else "")


def _workers(count: int) -> str:
    """``count`` training processes: GPUs, or CPU processes where no GPU is visible."""
    return _gpus(count) if visible_gpus() else f"{count} CPU process" + (
        "es" if count > 1 else "")


def _without(flags: List[str], name: str) -> List[str]:
    """``flags`` without ``name`` and its value (``--name V`` or ``--name=V``)."""
    kept, skip = [], False
    for flag in flags:
        if skip:
            skip = False
        elif flag == name:
            skip = True
        elif not flag.startswith(name + "="):
            kept.append(flag)
    return kept
