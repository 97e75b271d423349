"""alpha-entmax at every alpha > 0, beyond the (1, 2] of :mod:`.entmax_newton`.

With ``x = (alpha - 1)(s - max s)`` and ``r = 1 / (alpha - 1)`` (Peters et al. 2019)::

    p_j = (x_j - tau)_+ ^ r,   F(tau) = sum_j p_j = 1

For alpha > 2 (``0 < r < 1``) every ``(x_j - tau)_+^r`` has an infinite slope where ``j``
enters the support, which stalls plain Newton; for alpha < 1 (``r < 0``) every entry is in
the support and ``F`` increases in ``tau``. Both are solved by Newton steps on ``F - 1``
inside a bracket that must halve every two steps, else the step bisects it (docs/methods.md,
"alpha-entmax at any alpha"), eagerly or compiled (:mod:`.entmax_family` picks among these,
the Triton kernel of :mod:`.fused_triton` and the partial sort of long rows).
alpha = 1 is softmax, the limit of both sides.
"""

from typing import Union

import torch
from torch import Tensor

from .compiled import compiled

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


def _step(x: Tensor, r: Tensor, increasing: Tensor, tau: Tensor, lo: Tensor, hi: Tensor,
          width: Tensor, tol: float, check: bool):
    """One step from ``tau`` in the bracket ``[lo, hi]``: Newton's where it stays inside
    (and, on a ``check`` step, the bracket has halved since ``width``), else the bracket's
    middle; rows already within ``tol`` stay. Returns the new state and whether every row
    was within ``tol`` at ``tau``."""
    h, slope, _ = _powers(x, tau, r)
    done = h.abs() <= tol
    below = (h < 0) != increasing                 # the root lies left of tau
    lo, hi = torch.where(below, lo, tau), torch.where(below, tau, hi)
    newton = tau - h / slope
    inside = (newton > lo) & (newton < hi)         # NaN fails both
    if check:
        halved = (hi - lo) <= width / 2
        width = torch.where(halved, hi - lo, width)
        inside &= halved
    tau = torch.where(done, tau, torch.where(inside, newton, (lo + hi) / 2))
    return tau, lo, hi, width, done.all()


def _two_steps(x, r, increasing, tau, lo, hi, width, tol: float):
    """Two :func:`_step` s, the second a check: what the compiled kernel fuses."""
    tau, lo, hi, width, _ = _step(x, r, increasing, tau, lo, hi, width, tol, False)
    return _step(x, r, increasing, tau, lo, hi, width, tol, True)


def _solve(x: Tensor, alpha: Tensor, max_steps: int, tol: float, fused: bool) -> Tensor:
    """The weights ``p`` at the root of ``F(tau) = 1`` in every row of ``x``, by steps one
    at a time, or ``fused`` two at a time by the compiled kernel (convergence checked in
    between, which waits for the device)."""
    r = 1 / (alpha - 1)
    lo, hi = _bracket(x, alpha)
    state = (hi.clone(), lo, hi, (hi - lo) * 2)
    for step in range(0, max_steps, 2 if fused else 1):
        if fused:
            *state, done = compiled(_two_steps, "general")(x, r, alpha < 1, *state, tol)
        else:
            *state, done = _step(x, r, alpha < 1, *state, tol, step % 2 == 1)
        if bool(done):
            break
    p = _powers(x, state[0], r)[2]
    return p / p.sum(-1, keepdim=True)


def entmax_general(scores: Tensor, alpha: Union[float, Tensor], max_steps: int = MAX_STEPS,
                   fused: bool = False):
    """alpha-entmax weights over the last dim of float32/float64 ``scores`` for any alpha
    > 0, solved in float64 and returned in the scores' dtype, and ``None`` for ``g``: the
    solver for :func:`.entmax_grad.entmax_function`. ``alpha``: a number or a tensor
    broadcastable to the scores with size 1 in the last dim (not checked here). Rows at
    alpha = 1 get softmax; rows with every entry ``-inf`` zeros, with a NaN or ``+inf``
    NaN. ``fused``: the steps by the compiled kernel, on the scores as rows."""
    given = scores.dtype
    scores = scores.double()     # u^r near alpha = 1 or far above 2 needs the digits
    alpha = torch.as_tensor(alpha, dtype=scores.dtype, device=scores.device)
    alpha = alpha.expand(*scores.shape[:-1], 1)
    top = scores.amax(-1, keepdim=True)
    special = ~torch.isfinite(top)
    shifted = torch.where(special, torch.zeros_like(scores), scores - top)
    at_one = alpha == 1
    solved = torch.where(at_one, torch.full_like(alpha, 2.0), alpha)   # any alpha but 1
    rows = shifted.reshape(-1, shifted.size(-1))
    p = _solve(rows * (solved.reshape(-1, 1) - 1), solved.reshape(-1, 1), max_steps, TOLERANCE,
               fused).view_as(shifted)
    if bool(at_one.any()):
        p = torch.where(at_one, torch.softmax(shifted, -1), p)
    fill = torch.where(torch.isneginf(top), 0.0, float("nan")).to(p.dtype)
    return torch.where(special, fill, p).to(given), None
