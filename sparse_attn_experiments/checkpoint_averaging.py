"""Average the parameters of a run's last checkpoints, as Vaswani et al. (2017) and
Zhao et al. (2019) did before decoding (the latter: the last 10).

The average of checkpoints ``theta_1 .. theta_N`` is ``(1/N) sum_i theta_i`` for every
floating-point tensor of the model (summed in float64, stored in the tensor's own
dtype); integer tensors must agree and are kept. Everything else in the file (the
training configuration, the last optimizer history) is the newest checkpoint's, so
``fairseq-generate --path`` reads the result like any checkpoint.
"""

from pathlib import Path
from typing import Sequence

import torch

from sparse_attn_plugin.checkpoints import saved_checkpoints
from sparse_attn_plugin.errors import SparseAttnError
from sparse_attn_plugin.files import atomic_path


class AveragingError(SparseAttnError, ValueError):
    """Checkpoints that cannot be averaged; the message is one line."""


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def average_checkpoints(paths: Sequence[Path], out: Path) -> Path:
    """Write the average of ``paths`` (see the module docstring) to ``out``, atomically."""
    if not paths:
        raise AveragingError("no checkpoints to average")
    sums, newest = {}, None
    for path in paths:
        newest = _load(path)
        model = newest["model"]
        if sums and set(model) != set(sums):
            odd = sorted(set(model) ^ set(sums))[0]
            raise AveragingError(f"{path} does not hold the same parameters as {paths[0]} "
                                 f"(e.g. {odd})")
        for name, tensor in model.items():
            if not tensor.is_floating_point():
                if name in sums and not torch.equal(sums[name], tensor):
                    raise AveragingError(f"{path}: integer tensor {name} differs from "
                                         f"{paths[0]}'s; these checkpoints are not one model")
                sums[name] = tensor
            else:
                sums[name] = sums.get(name, 0) + tensor.double()
    newest["model"] = {name: (total / len(paths)).to(newest["model"][name].dtype)
                       if total.is_floating_point() else total
                       for name, total in sums.items()}
    with atomic_path(out) as partial:
        torch.save(newest, partial)
    return Path(out)


def average_last(save_dir: Path, count: int) -> Path:
    """Average the last ``count`` checkpoints saved in ``save_dir`` into
    ``checkpoint_avg{count}.pt`` there."""
    saved = saved_checkpoints(save_dir)
    if len(saved) < count:
        raise AveragingError(
            f"averaging the last {count} checkpoints needs {count}, but {save_dir} holds "
            f"{len(saved)}: save more (--save-interval-updates N --keep-interval-updates "
            f"{count}, or --keep-last-epochs {count}) or average fewer")
    return average_checkpoints(saved[-count:], Path(save_dir) / f"checkpoint_avg{count}.pt")
