"""alpha-entmax with its threshold found by a safeguarded Newton solver.

alpha-entmax (Peters et al. 2019, "Sparse Sequence-to-Sequence Models")::

    p_j = [(alpha - 1) s_j - tau]_+ ^ r,   r = 1 / (alpha - 1),   tau such that sum_j p_j = 1

``tau`` is the root of ``||(x - tau)_+||_r - 1`` with ``x = (alpha - 1)(s - max s)``, found
by Newton steps kept inside the shrinking bracket ``[-1, 0]`` (docs/methods.md, "alpha-entmax:
the safeguarded Newton solver"); the gradients are :mod:`.entmax_grad`'s. A row with every
entry ``-inf`` gets zero weights and gradient; one with a NaN or ``+inf``, NaN weights.
"""

import math
from functools import partial
from typing import Optional, Union

import torch
from torch import Tensor

from .compiled import compiled
from .entmax_grad import entmax_function, grads, scores_grad

#: Default tolerance on ``|h|`` per dtype: a few units of rounding in a sum of ~1.
TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-6}


def _power(u: Tensor, exponent: Union[float, Tensor]) -> Tensor:
    """``u ** exponent`` for ``u >= 0`` and ``exponent >= 0``, with ``0 ** 0 = 0`` (so a
    masked key never counts as support, even at alpha = 2). As ``exp(exponent log u)``:
    torch's CPU ``pow`` is several times slower than ``exp`` and ``log``, and both take
    slow paths on zeros and underflow, hence the clamps (values under ``e^-80``, far
    below rounding, are raised to it); ``sign`` restores the exact zeros."""
    log_u = torch.log(u.clamp_min(torch.finfo(u.dtype).tiny))
    return torch.exp((log_u * exponent).clamp_min_(-80.0)) * torch.sign(u)


def _newton_step(x: Tensor, tau: Tensor, r: Union[float, Tensor]):
    """``h(tau)``, the Newton update of ``tau``, and ``u`` and ``u^(r-1)`` at ``tau``."""
    u = (x - tau).clamp_min_(0)
    if isinstance(r, float) and r == 1.0:           # sparsemax: h = sum u - 1
        ur1 = torch.sign(u)
        norm = u.sum(-1, keepdim=True)
        slope = ur1.sum(-1, keepdim=True)
    elif isinstance(r, float) and r == 2.0:         # 1.5-entmax: h = sqrt(sum u^2) - 1
        ur1 = u
        norm = (u * u).sum(-1, keepdim=True).sqrt()
        slope = u.sum(-1, keepdim=True) / norm
    else:
        ur1 = _power(u, r - 1)
        norm = (ur1 * u).sum(-1, keepdim=True).pow(1 / r)
        slope = ur1.sum(-1, keepdim=True) / norm.pow(r - 1)
    return norm - 1, tau + (norm - 1) / slope, u, ur1


def _newton_steps(x: Tensor, tau: Tensor, lo: Tensor, hi: Tensor, r: Union[float, Tensor],
                  tol: float, steps: int):
    """``steps`` safeguarded Newton steps from ``tau`` in the bracket ``[lo, hi]``: the new
    ``tau``, ``lo``, ``hi``; whether any row moved in the last step; and ``u``, ``u^(r-1)``
    at that step's start (so at the root when nothing moved)."""
    for _ in range(steps):
        h, step, u, ur1 = _newton_step(x, tau, r)
        above = h > 0
        lo = torch.where(above, tau, lo)
        hi = torch.where(above, hi, tau)
        inside = (step >= lo) & (step <= hi)          # NaN fails both
        new = torch.where(h.abs() <= tol, tau, torch.where(inside, step, (lo + hi) / 2))
        moved = (new != tau).any()
        tau = new
    return tau, lo, hi, moved, u, ur1


def _weights(u: Tensor, ur1: Tensor, alpha: Union[float, Tensor], top: Tensor):
    """The weights ``p = u^r / sum u^r`` and ``g = p^(2 - alpha) = u^(r-1) / (sum u^r)^(2 -
    alpha)`` (no power of ``p`` needed); on special rows (maximum ``top`` not finite) both
    are 0 where every entry is ``-inf`` and NaN where one is NaN or ``+inf``."""
    p = ur1 * u
    total = p.sum(-1, keepdim=True)
    fill = torch.where(torch.isneginf(top), 0.0, math.nan)
    special = ~torch.isfinite(top)
    return (torch.where(special, fill, p / total),
            torch.where(special, fill, ur1 / total ** (2 - alpha)))


def _prepare(scores: Tensor, alpha: Union[float, Tensor]):
    """``x = (alpha - 1)(s - max s)`` (shifted first, so that large scores lose nothing),
    whose largest entry in every row is 0, and the rows' maxima. Special rows (every entry
    ``-inf``, or a NaN or ``+inf``: a maximum that is not finite) get ``x = 0``, solved like
    any row, and :func:`_weights` fills their weights."""
    top = scores.amax(-1, keepdim=True)
    return torch.where(torch.isfinite(top), (scores - top) * (alpha - 1), 0.0), top


def _bracket(x: Tensor):
    """The solver's start: ``tau`` at the bracket's left end, and the bracket ``[-1, 0]``."""
    tau = torch.full_like(x[..., :1], -1.0)
    return tau, tau.clone(), torch.zeros_like(tau)


def _polish(x: Tensor, tau: Tensor, lo: Tensor, hi: Tensor, r: Union[float, Tensor]):
    """``u`` and ``u^(r-1)`` after one more Newton step from the converged ``tau`` (kept in
    the bracket): Newton's quadratic convergence takes float64 from the tolerance to
    rounding."""
    _, step, _, _ = _newton_step(x, tau, r)
    tau = torch.where((step >= lo) & (step <= hi), step, tau)
    _, _, u, ur1 = _newton_step(x, tau, r)
    return u, ur1


def _first_steps(scores: Tensor, alpha: Union[float, Tensor], tol: float, steps: int):
    """The whole forward when ``steps`` Newton steps suffice (as they do in 3-6 for almost
    every row), in one call: ``p``, ``g``, whether any row still moved, and the solver's
    state (``tau``, ``lo``, ``hi``) to go on from otherwise."""
    x, top = _prepare(scores, alpha)
    r = 1 / (alpha - 1)
    tau, lo, hi, moved, u, ur1 = _newton_steps(x, *_bracket(x), r, tol, steps)
    if x.dtype == torch.float64:
        u, ur1 = _polish(x, tau, lo, hi, r)
    p, g = _weights(u, ur1, alpha, top)
    return p, g, moved, tau, lo, hi


#: Compiled, the Newton steps of the fused first call and of each later block (a check
#: for convergence between blocks waits for the device, so compiled code checks rarely).
FIRST_STEPS, BLOCK = 6, 3


#: The alphas given to the compiled kernels as numbers (whose Newton steps need no general
#: power: a quarter of the time); any other alpha reaches them as a tensor (:func:`as_rows`).
SPECIAL_ALPHAS = (2.0, 1.5)


def _kernel(fn, impl: str, exponent: Union[float, Tensor, None] = None):
    """``fn`` as run by ``impl``; compiled, its copy for this kind of ``exponent`` (alpha or
    r; each special number, or any tensor), which keeps graphs of its own."""
    if impl != "compiled":
        return fn
    return compiled(fn, "tensor" if isinstance(exponent, Tensor) else repr(exponent))


def entmax_threshold(x: Tensor, r: Union[float, Tensor], max_iter: int = 30,
                     tol: Optional[float] = None, impl: str = "torch", start=None):
    """``u = (x - tau)_+`` and ``u^(r-1)`` at the root ``tau`` of ``||(x - tau)_+||_r = 1``
    in every row of ``x``, whose largest entry in every row must be 0 (``-inf`` allowed
    elsewhere). Eagerly, convergence is checked after every step; compiled, after every
    block of :data:`BLOCK` fused steps. ``start``: ``(tau, lo, hi)`` to go on from (the
    bracket's ends ``-1`` and ``0`` by default)."""
    tol = TOLERANCE.get(x.dtype, 1e-6) if tol is None else tol
    block = BLOCK if impl == "compiled" else 1
    steps = _kernel(_newton_steps, impl, r)
    tau, lo, hi = _bracket(x) if start is None else start
    for _ in range(0, max_iter, block):
        tau, lo, hi, moved, u, ur1 = steps(x, tau, lo, hi, r, tol, block)
        if not bool(moved):
            break
    else:
        _, _, u, ur1 = _newton_step(x, tau, r)
    if x.dtype == torch.float64:
        return _kernel(_polish, impl, r)(x, tau, lo, hi, r)
    return u, ur1


def newton_solve(scores: Tensor, alpha: Union[float, Tensor], max_iter: int = 30,
                 tol: Optional[float] = None, impl: str = "torch"):
    """alpha-entmax weights ``p`` and ``g = p^(2 - alpha)`` over the last dim by the solver,
    eagerly or compiled (``impl``); no graph. Compiled, the usual case is one fused call
    (:func:`_first_steps`)."""
    tol = TOLERANCE.get(scores.dtype, 1e-6) if tol is None else tol
    start, steps_left = None, max_iter
    if impl == "compiled" and max_iter >= FIRST_STEPS:
        p, g, moved, *start = _kernel(_first_steps, impl, alpha)(scores, alpha, tol,
                                                                 FIRST_STEPS)
        if not bool(moved):
            return p, g
        steps_left = max_iter - FIRST_STEPS
    x, top = _kernel(_prepare, impl, alpha)(scores, alpha)
    u, ur1 = entmax_threshold(x, 1 / (alpha - 1), steps_left, tol, impl, start)
    return _kernel(_weights, impl, alpha)(u, ur1, alpha, top)


def _compiled_backward(p: Tensor, g: Tensor, dp: Tensor, alpha: Union[float, Tensor],
                       alpha_needed: bool):
    """:func:`.entmax_grad.eager_backward`'s gradients by the compiled kernels (``dp``
    made contiguous: an expanded or strided one, as ``sum().backward()`` gives, would
    compile another graph for each layout)."""
    dp = dp.contiguous()
    if alpha_needed:
        return _kernel(grads, "compiled", alpha)(p, g, dp, alpha)
    return _kernel(scores_grad, "compiled")(p, g, dp)[0], None


def entmax_newton(scores: Tensor, alpha: Union[float, Tensor] = 1.5, dim: int = -1,
                  max_iter: int = 30, tol: Optional[float] = None,
                  impl: str = "torch") -> Tensor:
    """alpha-entmax of ``scores`` along ``dim`` for ``alpha`` in (1, 2] (a number, or a
    tensor broadcastable to ``scores`` with size 1 along ``dim``, e.g. one per head);
    differentiable in both, twice. Special rows as the module docstring says. ``impl``:
    ``"torch"`` (eagerly) or ``"compiled"`` (fused by ``torch.compile``; the kernels see
    the scores as rows, :func:`as_rows`, and a single row or key, a graph of its own, is
    solved eagerly)."""
    if dim not in (-1, scores.dim() - 1):
        scores = scores.transpose(dim, -1)
        if isinstance(alpha, Tensor):
            alpha = alpha.transpose(dim, -1)
        return entmax_newton(scores, alpha, -1, max_iter, tol, impl).transpose(dim, -1)
    if impl == "compiled" and 1 < scores.size(-1) < scores.numel():
        rows, alphas = as_rows(scores, alpha)
        solve = partial(newton_solve, max_iter=max_iter, tol=tol, impl=impl)
        return entmax_function(rows, alphas, solve, _compiled_backward).view_as(scores)
    if not isinstance(alpha, Tensor):
        alpha = float(alpha)
    return entmax_function(scores, alpha, partial(newton_solve, max_iter=max_iter, tol=tol))


def as_rows(scores: Tensor, alpha: Union[float, Tensor]):
    """``scores`` as contiguous rows ``(N, S)``, and ``alpha`` as one of
    :data:`SPECIAL_ALPHAS` or as one value per row ``(N, 1)`` in the scores' dtype: the
    kinds of input the compiled kernels see, whatever the alpha (a number, or one per head)
    and the scores' shape and layout, so that no alpha, batch, length or layout compiles
    them again. (Any other number passed as a
    Python float would be a constant of the graph on torch versions that specialise floats,
    and each value a new compilation.)"""
    rows = scores.reshape(-1, scores.size(-1)).contiguous()
    if not isinstance(alpha, Tensor) and float(alpha) in SPECIAL_ALPHAS:
        return rows, float(alpha)
    alpha = torch.as_tensor(alpha, dtype=scores.dtype, device=scores.device)
    # strides (1, 1) whatever alpha's layout: contiguous (N, 1) leaves the second free
    return rows, alpha.expand(*scores.shape[:-1], 1).reshape(-1).contiguous().unsqueeze(-1)


def sparsemax_newton(scores: Tensor, dim: int = -1, impl: str = "torch") -> Tensor:
    """sparsemax (alpha = 2) by the same solver; exact after finitely many steps."""
    return entmax_newton(scores, 2.0, dim, impl=impl)


def entmax15_newton(scores: Tensor, dim: int = -1, impl: str = "torch") -> Tensor:
    """1.5-entmax (r = 2: squares and one square root per step, no general power)."""
    return entmax_newton(scores, 1.5, dim, impl=impl)
