"""One parameter per slice of the scores (normmax's ``alpha``, budget sparsemax's ``budget``):
a number, or a tensor broadcast to the scores with size 1 along the normalised dim.

:func:`checked` refuses values outside the parameter's domain in one line (a tensor's values
are read back, which waits for a GPU); :func:`along_rows` checks a tensor's shape against
the scores and moves ``dim`` last, as the scores will be.
"""

import math
from typing import Callable, Union

import numpy as np
import torch
from torch import Tensor

Parameter = Union[float, Tensor]


def checked(value, inside: Callable[[Tensor], Tensor], name: str, domain: str,
            what: str) -> Parameter:
    """``value`` as a float (a number) or as it is (a floating-point tensor) if
    ``inside(value)`` holds for all of it; otherwise a one-line ValueError
    ``WHAT needs NAME in DOMAIN...``. A bool is no number here."""
    if isinstance(value, Tensor):
        if not value.is_floating_point():
            raise ValueError(f"{what} needs a floating-point {name} tensor, got {value.dtype}")
        outside = ~inside(value.detach())
        if bool(outside.any()):
            raise ValueError(f"{what} needs {name} in {domain}: {int(outside.sum())} of "
                             f"{value.numel()} values are not (e.g. "
                             f"{value.detach()[outside].flatten()[0].item():.4g})")
        return value
    number = math.nan
    if not isinstance(value, (bool, np.bool_)):
        try:
            number = float(value)
        except (TypeError, ValueError):
            pass
    if not bool(inside(torch.tensor(number, dtype=torch.float64))):
        raise ValueError(f"{what} needs {name} in {domain}, got {value!r}")
    return number


def along_rows(value: Parameter, x: Tensor, dim: int, name: str, what: str) -> Parameter:
    """A tensor ``value`` that broadcasts to ``x`` with size 1 along ``dim``, given as many
    dims as ``x`` and with ``dim`` moved last, as ``x``'s will be; a number as it is.
    ValueError (IndexError for ``dim``), one line, otherwise."""
    if not isinstance(value, Tensor):
        return value
    if value.dim() > x.dim():
        raise ValueError(f"{what}: {name} of shape {tuple(value.shape)} has more dimensions "
                         f"than x of shape {tuple(x.shape)}")
    if not -x.dim() <= dim < max(x.dim(), 1):
        raise IndexError(f"{what}: dim {dim} is out of range for x of {x.dim()} dimensions")
    value = value.reshape((1,) * (x.dim() - value.dim()) + tuple(value.shape))
    if x.dim() == 0:
        return value
    dim %= x.dim()
    reduced = x.shape[:dim] + (1,) + x.shape[dim + 1:]
    try:
        fits = torch.broadcast_shapes(value.shape, reduced) == reduced
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{what}: {name} of shape {tuple(value.shape)} must broadcast to x's "
                         f"shape {tuple(x.shape)} with size 1 along dim {dim}")
    return value.movedim(dim, -1)
