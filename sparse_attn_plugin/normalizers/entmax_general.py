"""alpha-entmax at every alpha > 0, beyond the (1, 2] of :mod:`.entmax_newton`.

With ``x = (alpha - 1)(s - max s)`` and ``r = 1 / (alpha - 1)`` (Peters et al. 2019)::

    p_j = (x_j - tau)_+ ^ r,   F(tau) = sum_j p_j = 1

For alpha > 2 (``0 < r < 1``) every ``(x_j - tau)_+^r`` has an infinite slope where ``j``
enters the support, which stalls plain Newton; for alpha < 1 (``r < 0``) every entry is in
the support and ``F`` increases in ``tau``. Both are solved by Newton steps on ``F - 1``
inside a bracket that must halve every two steps, else the step bisects it (docs/methods.md,
"alpha-entmax at any alpha"), eagerly or by :mod:`.fused_triton`'s bracketed kernel.
alpha = 1 is softmax, the limit of both sides.
"""

from functools import partial
from typing import Union

import torch
from torch import Tensor

from .dispatch import Implementations
from .entmax_grad import entmax_function
from .fused_triton import entmax_any_triton

#: Steps at most: the bracket halves every two, so this reaches float64's rounding.
MAX_STEPS = 140
#: On ``|F(tau) - 1|``, in float64, where every alpha is solved.
TOLERANCE = 1e-13


def _bracket(x: Tensor, alpha: Tensor):
    """Ends ``lo < hi`` holding the root, per row: ``F(lo) - 1`` and ``F(hi) - 1`` have
    opposite signs (``n`` counts the unmasked entries; ``x``'s smallest is 0 when alpha < 1,
    its largest 0 when alpha > 1)."""
    n = torch.isfinite(x).sum(-1, keepdim=True).clamp_min(1).to(x.dtype)
    dense = alpha < 1
    far = torch.where(dense, n ** (1 - alpha), torch.ones_like(n))
    near = torch.where(dense, torch.ones_like(n), n ** (1 - alpha))
    return -far, -near


def _powers(x: Tensor, tau: Tensor, r: Tensor):
    """``F(tau) - 1`` and ``F'(tau)`` per row, and ``p = (x - tau)_+^r`` (0 off the support
    and on masked entries, whose ``x`` is ``+inf`` when alpha < 1 and ``-inf`` otherwise)."""
    u = x - tau
    on = (u > 0) & torch.isfinite(u)
    safe_u = torch.where(on, u, torch.ones_like(u))
    p = torch.where(on, safe_u ** r, torch.zeros_like(u))
    slope = -r * torch.where(on, p / safe_u, torch.zeros_like(u)).sum(-1, keepdim=True)
    return p.sum(-1, keepdim=True) - 1, slope, p


def _solve(x: Tensor, alpha: Tensor, max_steps: int, tol: float) -> Tensor:
    """The weights ``p`` at the root of ``F(tau) = 1`` in every row of ``x``."""
    r = 1 / (alpha - 1)
    lo, hi = _bracket(x, alpha)
    increasing = alpha < 1
    tau, width = hi.clone(), (hi - lo) * 2
    for step in range(max_steps):
        h, slope, p = _powers(x, tau, r)
        done = h.abs() <= tol
        if bool(done.all()):
            break
        below = (h < 0) != increasing             # the root lies left of tau
        lo, hi = torch.where(below, lo, tau), torch.where(below, tau, hi)
        newton = tau - h / slope
        inside = (newton > lo) & (newton < hi)     # NaN fails both
        if step % 2:
            halved = (hi - lo) <= width / 2
            width = torch.where(halved, hi - lo, width)
            inside &= halved
        tau = torch.where(done, tau, torch.where(inside, newton, (lo + hi) / 2))
    else:
        _, _, p = _powers(x, tau, r)
    return p / p.sum(-1, keepdim=True)


def entmax_general(scores: Tensor, alpha: Union[float, Tensor], max_steps: int = MAX_STEPS):
    """alpha-entmax weights over the last dim of float32/float64 ``scores`` for any alpha
    > 0, solved in float64 and returned in the scores' dtype, and ``None`` for ``g``: the
    solver for :func:`.entmax_grad.entmax_function`. ``alpha``: a number or a tensor
    broadcastable to the scores with size 1 in the last dim (not checked here). Rows at
    alpha = 1 get softmax; rows with every entry ``-inf`` zeros, with a NaN or ``+inf``
    NaN."""
    given = scores.dtype
    scores = scores.double()     # u^r near alpha = 1 or far above 2 needs the digits
    alpha = torch.as_tensor(alpha, dtype=scores.dtype, device=scores.device)
    alpha = alpha.expand(*scores.shape[:-1], 1)
    top = scores.amax(-1, keepdim=True)
    special = ~torch.isfinite(top)
    shifted = torch.where(special, torch.zeros_like(scores), scores - top)
    at_one = alpha == 1
    solved = torch.where(at_one, torch.full_like(alpha, 2.0), alpha)   # any alpha but 1
    p = _solve(shifted * (solved - 1), solved, max_steps, TOLERANCE)
    if bool(at_one.any()):
        p = torch.where(at_one, torch.softmax(shifted, -1), p)
    fill = torch.where(torch.isneginf(top), 0.0, float("nan")).to(p.dtype)
    return torch.where(special, fill, p).to(given), None


def _eager(scores: Tensor, alpha: Union[float, Tensor]) -> Tensor:
    return entmax_function(scores, alpha, entmax_general)


#: The implementations ``--attn-impl`` picks among for alpha outside (1, 2]: ``compiled``
#: runs the eager solver (only (1, 2] has compiled kernels).
GENERAL = Implementations(
    "alpha-entmax (any alpha)", {"bracketed newton": _eager},
    ("bracketed newton, eager", _eager),
    ("bracketed newton, triton", partial(entmax_any_triton, max_steps=MAX_STEPS,
                                         tol=TOLERANCE)))


def general_weights(scores: Tensor, alpha: Union[float, Tensor], n_iter: int = 30,
                    impl: str = "auto") -> Tensor:
    """alpha-entmax of the last dim for any alpha > 0, by the eager solver or the Triton
    kernel as ``impl`` picks (``n_iter`` is for the (1, 2] solvers; this one stops on
    convergence), differentiable in the scores and a tensor alpha, twice."""
    if isinstance(alpha, Tensor):
        alpha = alpha.to(scores.dtype)
    return GENERAL(impl, scores, alpha)
