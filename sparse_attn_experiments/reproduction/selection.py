"""Choosing what a training run decodes by validation BLEU, as Zhao et al. (2019,
appendix A.2) did: among averages of checkpoint windows (their released script averages
the 10 epoch checkpoints up to epoch 50, 55, ..., 90 and keeps the best on the
validation set), and among trainings with different seeds (the best of three).

A window of ``size`` consecutive saved checkpoints is averaged as
:func:`~..checkpoint_averaging.average_checkpoints` does; the ``count``
windows end ``step`` saves apart, the last at the newest checkpoint. Ties go to the
earlier candidate.
"""

from pathlib import Path
from typing import Callable, Dict, List, Tuple, TypeVar

from sparse_attn_plugin.checkpoints import saved_checkpoints

from ..checkpoint_averaging import AveragingError, average_checkpoints

K = TypeVar("K")


def best(scores: Dict[K, float]) -> K:
    """The candidate with the highest score (the first of equals)."""
    return max(scores, key=lambda candidate: scores[candidate])


def windows_of(saved: List[Path], size: int, step: int, count: int) -> List[List[Path]]:
    """The ``count`` windows of ``size`` consecutive checkpoints of ``saved`` (oldest
    first) whose ends are ``step`` apart, the last ending at the newest; oldest first."""
    need = size + step * (count - 1)
    if len(saved) < need:
        raise AveragingError(
            f"{count} windows of {size} checkpoints, {step} apart, need the last {need} "
            f"checkpoints, but {saved[0].parent if saved else 'the save folder'} holds "
            f"{len(saved)}: keep more (--keep-last-epochs {need}, or --keep-interval-updates "
            f"{need}) or choose fewer windows")
    ends = [len(saved) - step * k for k in reversed(range(count))]
    return [saved[end - size:end] for end in ends]


def label(window: List[Path]) -> str:
    """``first..last`` checkpoint of a window, by file name without ``.pt``."""
    return f"{window[0].stem}..{window[-1].stem}"


def choose_window(save_dir: Path, windows: dict,
                  valid_bleu: Callable[[Path], float]) -> Tuple[Path, str, Dict[str, float]]:
    """Average each window of ``windows`` (``{"size", "step", "count"}``) of the
    checkpoints in ``save_dir`` and score it with ``valid_bleu``: the best average (the
    others are deleted), its :func:`label` and every window's score by label."""
    scores, averages = {}, {}
    for window in windows_of(saved_checkpoints(save_dir), **windows):
        name = label(window)
        averages[name] = average_checkpoints(
            window, Path(save_dir) / f"checkpoint_avg_{window[0].stem}_{window[-1].stem}.pt")
        scores[name] = valid_bleu(averages[name])
    chosen = best(scores)
    for name, path in averages.items():
        if name != chosen:
            path.unlink()
    return averages[chosen], chosen, scores
