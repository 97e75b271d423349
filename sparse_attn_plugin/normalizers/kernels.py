"""Attention as a kernel smoother (Tsai et al. 2019, "Transformer Dissection")::

    out(q) = sum_k  k(q, k) v(k) / sum_k' k(q, k')

with linear, polynomial, exponential or rbf kernels on ``x_q = f_q W_q``, ``x_k = f_k W_k``
and positional kernels for the product integrations (docs/methods.md, "Kernel attention").
A kernel is a :class:`Gram` matrix of log values (the exponential family: products add,
nothing overflows) or plain values (linear, polynomial). Masked keys get weight 0; a row
with nothing to normalise (every key masked or every value 0) gets zeros; a row whose values
cancel is divided by a denominator kept ``EPS * sum_k |k(q, k)|`` away from zero, sign kept.
"""

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

KERNELS = ("linear", "polynomial", "exponential", "rbf")
#: Relative floor of the smoother's denominator for kernels that can cancel.
EPS = 1e-6


@dataclass
class Gram:
    """Kernel values between queries and keys, ``(..., T, S)``: ``log`` holds
    ``log k(q, k)`` (exponential family), otherwise ``value`` holds ``k(q, k)``."""

    log: Optional[Tensor] = None
    value: Optional[Tensor] = None

    def __mul__(self, other: "Gram") -> "Gram":
        """The product kernel ``k1(q, k) k2(q, k)``."""
        if self.log is not None and other.log is not None:
            return Gram(log=self.log + other.log)
        return Gram(value=self.values() * other.values())

    def values(self) -> Tensor:
        """Plain kernel values; log values are shifted by their row maximum first (the
        smoother divides the shift out)."""
        if self.value is not None:
            return self.value
        top = self.log.amax(-1, keepdim=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        return torch.exp(self.log - top)


def gram(kind: str, queries: Tensor, keys: Tensor) -> Gram:
    """The kernel ``kind`` between ``queries`` ``(..., T, d)`` and ``keys`` ``(..., S, d)``
    (already projected: ``f W``)."""
    scale = math.sqrt(queries.size(-1))
    dots = torch.matmul(queries, keys.transpose(-1, -2))
    if kind == "linear":
        return Gram(value=dots)
    if kind == "polynomial":
        return Gram(value=dots.square())
    if kind == "exponential":
        return Gram(log=dots / scale)
    if kind == "rbf":
        distances = (queries.square().sum(-1, keepdim=True) - 2 * dots
                     + keys.square().sum(-1).unsqueeze(-2))
        return Gram(log=-distances.clamp_min(0) / scale)
    raise ValueError(f"unknown kernel {kind!r}; choose from {', '.join(KERNELS)}")


def sinusoid(positions: Tensor, dim: int) -> Tensor:
    """Sinusoidal embeddings ``(..., dim)`` of (possibly negative) ``positions``:
    ``sin(p / 10000^(2i/dim))`` in the first half, ``cos`` in the second."""
    half = dim // 2
    rates = torch.exp(torch.arange(half, dtype=torch.float64, device=positions.device)
                      * (-math.log(10000.0) / max(half, 1)))
    angles = positions.to(torch.float64).unsqueeze(-1) * rates
    table = torch.cat([torch.sin(angles), torch.cos(angles)], -1)
    if dim % 2:
        table = torch.nn.functional.pad(table, (0, 1))
    return table.to(torch.get_default_dtype())


def relative_distances(query_positions: Tensor, key_positions: Tensor) -> Tensor:
    """``t_q - t_k`` for every query and key: ``(..., T, S)``."""
    return query_positions.unsqueeze(-1) - key_positions.unsqueeze(-2)


def lookup_gram(queries: Tensor, table: Tensor, distances: Tensor) -> Gram:
    """Shaw et al.'s kernel ``exp(<x_q, a_{clip(t_q - t_k)}>)``: ``table`` holds
    ``a_{-m} .. a_{m}`` (``(2m + 1, d)``), distances are clipped to ``[-m, m]``.
    Each query meets the ``2m + 1`` table rows once; the pairs gather from that."""
    reach = (table.size(0) - 1) // 2
    per_row = torch.matmul(queries, table.to(queries.dtype).T)            # (..., T, 2m+1)
    index = (distances.clamp(-reach, reach) + reach).expand(*per_row.shape[:-1],
                                                            distances.size(-1))
    return Gram(log=per_row.gather(-1, index))


def relative_sinusoid_gram(coefficients: Tensor, distances: Tensor,
                           span: Optional[Tuple[int, int]] = None) -> Gram:
    """Transformer-XL's positional kernel ``exp(<c_q, r(t_q - t_k)>)`` for per-query
    coefficients ``c_q`` ``(..., T, dim)``: each query meets the embeddings of the
    distances in ``span`` (``low, high``, bounds of ``distances``) once; the pairs gather
    from that. Without ``span`` the bounds are read from ``distances`` (a device sync)."""
    low, high = span if span is not None else (int(distances.min()), int(distances.max()))
    table = sinusoid(torch.arange(low, high + 1, device=distances.device),
                     coefficients.size(-1)).to(coefficients.dtype)           # (D, dim)
    per_distance = torch.matmul(coefficients, table.T)                      # (..., T, D)
    index = (distances - low).expand(*per_distance.shape[:-1], distances.size(-1))
    return Gram(log=per_distance.gather(-1, index))


def smoother_weights(kernel: Gram, mask: Optional[Tensor] = None) -> Tensor:
    """Weights ``k(q, k) / sum_k' k(q, k')`` over the keys ``mask`` (True = keep,
    broadcastable to ``(..., T, S)``) lets through; see the module docstring for rows
    that cannot be normalised."""
    if kernel.log is not None:
        log = kernel.log if mask is None else kernel.log.masked_fill(~mask, float("-inf"))
        top = log.amax(-1, keepdim=True)
        empty = ~torch.isfinite(top)
        weights = torch.exp(log - torch.where(empty, torch.zeros_like(top), top))
        total = weights.sum(-1, keepdim=True)
        return weights / torch.where(empty, torch.ones_like(total), total)
    values = kernel.value if mask is None else kernel.value.masked_fill(~mask, 0.0)
    total = values.sum(-1, keepdim=True)
    floor = EPS * values.abs().sum(-1, keepdim=True)
    floor = torch.where(floor > 0, floor, torch.ones_like(floor))   # all zero: weights 0
    sign = torch.where(total < 0, -torch.ones_like(total), torch.ones_like(total))
    return values / (sign * torch.maximum(total.abs(), floor))


__all__ = ["EPS", "Gram", "KERNELS", "gram", "lookup_gram", "relative_distances",
           "relative_sinusoid_gram", "sinusoid", "smoother_weights"]
