"""Reading what fairseq-train saved: a run's checkpoint files in save order, one
checkpoint's state, and its model with the task that reads a data folder.

Every failure is a :class:`CheckpointError` naming the file, one line, whatever the
unpickler or fairseq raised underneath.
"""

import re
from pathlib import Path
from typing import Callable, List

from .errors import SparseAttnError

#: fairseq's names: ``checkpointE.pt`` at the end of epoch E, ``checkpoint_E_U.pt``
#: after update U within epoch E (``--save-interval-updates``); one save writes one of them.
_EPOCH = re.compile(r"^checkpoint(\d+)\.pt$")
_UPDATE = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")


class CheckpointError(SparseAttnError, ValueError):
    """A checkpoint or data folder that cannot be read; the message is one line."""


def saved_checkpoints(save_dir: Path) -> List[Path]:
    """The epoch and update checkpoints fairseq-train saved in ``save_dir``, oldest
    first (``checkpoint_last.pt``, ``checkpoint_best.pt`` and averages are left out)."""
    order = []
    for path in Path(save_dir).glob("checkpoint*.pt"):
        epoch, update = _EPOCH.match(path.name), _UPDATE.match(path.name)
        if epoch:
            order.append(((int(epoch.group(1)), float("inf")), path))
        elif update:
            order.append(((int(update.group(1)), int(update.group(2))), path))
    return [path for _, path in sorted(order)]


def read_checkpoint(checkpoint: Path, read: Callable[[str], dict]) -> dict:
    """The state ``read`` gets from a fairseq checkpoint file; CheckpointError naming the
    file when it is missing or not one (unpickling some other file can raise nearly any
    exception: KeyError, IndexError, EOFError, UnpicklingError, ...)."""
    if Path(checkpoint).is_dir():
        raise CheckpointError(f"{checkpoint}: a folder, not a checkpoint file")
    if not Path(checkpoint).is_file():
        raise CheckpointError(f"{checkpoint}: no such checkpoint")
    try:
        state = read(str(checkpoint))
    except Exception as err:  # unpickling a stranger file can raise anything
        raise CheckpointError(f"{checkpoint}: not a fairseq checkpoint (reading it raised "
                              f"{type(err).__name__})") from None
    if not (isinstance(state, dict) and isinstance(state.get("model"), dict)
            and (state.get("cfg") is not None or state.get("args") is not None)):
        raise CheckpointError(f"{checkpoint}: not a fairseq checkpoint (no model weights and "
                              "configuration in it)")
    return state


def read_checkpoint_lazily(checkpoint: Path) -> dict:
    """A checkpoint's state with its tensors memory-mapped, not read (a few KB read for a
    checkpoint of any size); CheckpointError as :func:`read_checkpoint`."""
    import torch

    return read_checkpoint(checkpoint, lambda path: torch.load(
        path, map_location="cpu", weights_only=False, mmap=True))


def updates_of(state: dict) -> int:
    """The training updates a checkpoint's state records (0 where it records none)."""
    history = state.get("optimizer_history") or [{}]
    return int(history[-1].get("num_updates", 0))


def load_model(checkpoint: Path, data: Path):
    """``(model, task)``: the model of ``checkpoint`` (eval mode, CPU) and its task
    reading the binarised corpus ``data``."""
    from fairseq import checkpoint_utils

    from .registration import register

    register()  # the checkpoint's architecture may be ours

    overrides = {"data": str(data)}
    state = read_checkpoint(
        checkpoint, lambda path: checkpoint_utils.load_checkpoint_to_cpu(path, overrides))
    if not Path(data).is_dir():
        raise CheckpointError(f"{data}: no such data directory")
    if not any(Path(data).glob("dict.*.txt")):
        raise CheckpointError(f"{data}: not a binarised corpus (no dict.*.txt in it)")
    try:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(checkpoint)], arg_overrides=overrides, state=state)
    except (KeyError, ValueError, RuntimeError, OSError) as err:
        # e.g. a state_dict mismatch: a heading line, then the first mismatch
        detail = " ".join(line.strip() for line in str(err).strip().splitlines()[:2])
        raise CheckpointError(f"{checkpoint}: cannot build its model on {data}: "
                              f"{type(err).__name__}: {detail}") from None
    return models[0].eval(), task
