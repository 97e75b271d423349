"""Seeded scores, weights with the gradient of a weighted sum of them beside a
reference's, and the library contract (docs/library.md, "The functions") checked on one
input, for normalisers with a per-slice parameter (normmax's alpha, budget sparsemax's
budget): half
precision computed and returned in float32, any dim, ``-inf`` entries exactly 0, all-masked
slices all 0, slices with a NaN or ``+inf`` all NaN, the others summing to their total, and
an offset changing float64 weights only by its rounding."""

import math
from typing import Callable, Optional

import torch
from torch import Tensor

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SPECIALS = ("none", "nan", "inf", "empty")


def seeded_scores(rows: int = 6, size: int = 7, seed: int = 0, scale: float = 1.0) -> Tensor:
    """``scale`` times standard normal float64 scores ``(rows, size)`` from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return scale * torch.randn(rows, size, dtype=torch.float64, generator=generator)


def with_gradients(ours: Callable[[Tensor], Tensor], reference: Callable[[Tensor], Tensor],
                   seed: int):
    """``(p, dp, p_ref, dp_ref)``: both functions' weights of the scores of ``seed`` (scale
    ``1 + seed``) and the gradients of ``sum(p * g)`` for one random ``g``."""
    x = seeded_scores(seed=seed, scale=1 + seed)
    g = seeded_scores(seed=seed + 10)
    out = []
    for function in (ours, reference):
        leaf = x.clone().requires_grad_()
        p = function(leaf)
        (p * g).sum().backward()
        out += [p.detach(), leaf.grad]
    return tuple(out)


def scores_with_specials(shape, dim: int, seed: int, special: str, target: int) -> Tensor:
    """float64 scores of ``shape`` with about 30% of entries ``-inf`` and, in the slice
    ``target`` along ``dim`` (counted as rows of ``x.movedim(dim, -1)``), ``special``: a NaN
    or ``+inf`` entry, or every entry ``-inf``."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, dtype=torch.float64, generator=generator)
    x = x.masked_fill(torch.rand(*shape, generator=generator) < 0.3, -math.inf)
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.size(-1)).clone()
    target %= rows.size(0)
    if special == "empty":
        rows[target] = -math.inf
    elif special != "none":
        rows[target, 0] = math.nan if special == "nan" else math.inf
    return rows.view(moved.shape).movedim(-1, dim)


def gradchecks_with_parameter(function: Callable[[Tensor, Tensor], Tensor], value: float,
                              scale: float = 1.0) -> bool:
    """float64 gradcheck and gradgradcheck of ``function(x, parameter)`` in both, for seeded
    scores (one entry masked) and one parameter per row, ``value`` (the first row's 0.2
    above)."""
    x = seeded_scores(rows=4, size=6, seed=5, scale=scale)
    x[1, 2] = -math.inf
    per_row = torch.full((4, 1), value, dtype=torch.float64)
    per_row[0] += 0.2
    inputs = (x.requires_grad_(), per_row.requires_grad_())
    return (torch.autograd.gradcheck(function, inputs)
            and torch.autograd.gradgradcheck(function, inputs))


def check_contract(normalize: Callable[..., Tensor], x: Tensor, dim: int, dtype, offset: float,
                   total: Tensor, infeasible: Optional[Tensor] = None) -> None:
    """``normalize(scores, dim=dim)`` on ``(x + offset).to(dtype)`` follows the contract;
    ``total``: what each slice's weights sum to, one per row of ``x.movedim(dim, -1)``;
    ``infeasible``: rows expected NaN besides those with a NaN or ``+inf``."""
    cast = (x + offset).to(dtype)
    p = normalize(cast, dim=dim)
    assert p.dtype == (torch.float32 if dtype in DTYPES[:2] else dtype)
    assert p.shape == x.shape
    # the float32 / float64 computation along the last dim, bit for bit
    ref = normalize(cast.to(p.dtype).movedim(dim, -1), dim=-1).movedim(-1, dim)
    torch.testing.assert_close(p, ref, rtol=0, atol=0, equal_nan=True)
    size = x.size(dim)
    rows = cast.to(p.dtype).movedim(dim, -1).reshape(-1, size)
    p_rows = p.movedim(dim, -1).reshape(-1, size)
    bad = rows.isnan().any(-1) | rows.isposinf().any(-1)
    empty = rows.isneginf().all(-1)
    nan = bad if infeasible is None else bad | (infeasible & ~empty)
    assert p_rows[nan].isnan().all()
    assert (p_rows[empty] == 0).all()
    good = ~nan & ~empty
    assert (p_rows[good][rows[good].isneginf()] == 0).all()
    assert (p_rows[good] >= 0).all()
    torch.testing.assert_close(p_rows[good].sum(-1).double(), total[good].double(), rtol=0,
                               atol=1e-5 * size if p.dtype == torch.float32 else 1e-12 * size)
    if dtype == torch.float64:
        plain = normalize(x, dim=dim).movedim(dim, -1).reshape(-1, size)
        torch.testing.assert_close(p_rows[good], plain[good], rtol=0,
                                   atol=1e-9 * max(1.0, abs(offset)) ** 0.5)
