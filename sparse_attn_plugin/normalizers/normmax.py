"""alpha-normmax: the simplex point that trades the score for its alpha-norm.

alpha-normmax (Santos, Niculae, McNamee & Martins 2024, "Sparse and Structured Hopfield
Networks", ICML), for ``alpha > 1``::

    normmax(x) = argmax_{p in simplex} <x, p> - ||p||_alpha,
    p_j = q_j / sum_k q_k,   q_j = (x_j - tau)_+ ^ (1 / (alpha - 1)),
    tau the root of sum_j (x_j - tau)_+ ^ (alpha / (alpha - 1)) = 1

(the optimality conditions ``x_j - tau = (p_j / ||p||_alpha)^(alpha - 1)`` on the support).
``tau`` is found by the safeguarded Newton solver of alpha-entmax
(:func:`.entmax_newton.entmax_threshold`, with ``r = alpha / (alpha - 1)``: it returns ``u =
(x - tau)_+``, and ``q = u^(r - 1)``), inside the bracket ``[max x - 1, max x]``; it stops
when ``|sum_j u_j^r - 1|`` is within its tolerance (1e-12 in float64, 1e-6 in float32), and
takes one more Newton step. The gradients are closed form, written on the weights alone (so
twice differentiable), with ``n = ||p||_alpha``, ``c_j = n (p_j / n)^(2 - alpha) /
(alpha - 1)`` on the support (0 off it) and ``t_j = log(p_j / n) - n K (p_j / n)^(1 - alpha) /
alpha``, ``K = sum_k (p_k / n)^alpha log(p_k / n)``::

    dx     = c * (g - <p, g>) - p * sum_j c_j (g_j - <p, g>)
    dalpha = -(<g * p, t> - <g, p> <p, t>) / (alpha - 1)

alpha = 2 is the root of ``sum (x - tau)_+^2 = 1``, 1.5-entmax's of ``2 x``; alpha -> inf
tends to weights uniform on a support. The contract: docs/library.md, "The functions".
"""

import math
from functools import partial
from typing import Union

import torch
from torch import Tensor, nn

from .base import check_count, check_scores, normalize_along
from .entmax_newton import entmax_threshold
from .row_parameters import along_rows, checked

Alpha = Union[float, Tensor]


def check_alpha(alpha, what: str = "normmax") -> Alpha:
    """``alpha`` if every value of it is a finite number above 1, as a float if it is a
    number; a one-line ValueError otherwise."""
    return checked(alpha, lambda a: (a > 1) & torch.isfinite(a), "alpha", "(1, inf)", what)


def alpha_norm(p: Tensor, alpha: Alpha) -> Tensor:
    """``||p||_alpha`` of each row (last dim, kept) of non-negative ``p``, as ``m ||p /
    m||_alpha`` with ``m = max p`` (so that no power underflows at large alpha); 0 on a
    zero row."""
    top = p.amax(-1, keepdim=True)
    scale = torch.where(top > 0, top, torch.ones_like(top))
    return scale * ((p / scale) ** alpha).sum(-1, keepdim=True) ** (1 / alpha)


def _ratio_power(ratio: Tensor, on: Tensor, exponent: Alpha) -> Tensor:
    """``ratio ** exponent`` on ``on`` and 0 elsewhere, the power never taken at 0 (so its
    derivative is finite everywhere)."""
    return torch.where(on, torch.where(on, ratio, 1.0) ** exponent, 0.0)


def _grads(p: Tensor, alpha: Alpha, grad: Tensor, alpha_needed: bool):
    """The closed-form gradients of the module docstring, from the weights ``p`` (torch
    operations, so differentiable again); ``dalpha`` per row (last dim 1) or None."""
    on = p > 0
    norm = alpha_norm(p, alpha)
    ratio = p / torch.where(norm > 0, norm, torch.ones_like(norm))
    c = norm * _ratio_power(ratio, on, 2 - alpha) / (alpha - 1)
    centred = grad - (p * grad).sum(-1, keepdim=True)
    d_x = c * centred - p * (c * centred).sum(-1, keepdim=True)
    if not alpha_needed:
        return d_x, None
    log_ratio = torch.log(torch.where(on, ratio, 1.0))
    k = (_ratio_power(ratio, on, alpha) * log_ratio).sum(-1, keepdim=True)
    t = log_ratio - norm * k * _ratio_power(ratio, on, 1 - alpha) / alpha
    p_t = (p * t).sum(-1, keepdim=True)
    d_alpha = -((grad * p * t).sum(-1, keepdim=True)
                - (grad * p).sum(-1, keepdim=True) * p_t) / (alpha - 1)
    return d_x, d_alpha


def _solve(scores: Tensor, alpha: Alpha, n_iter: int) -> Tensor:
    """The weights of rows with a finite maximum, no graph. float32 takes one more Newton
    step from the converged ``tau = -max u`` (as the solver does in float64), unbracketed:
    at ``alpha > 2`` the weights are steep in ``u`` near 0, where the stop at the tolerance
    would cost them more than rounding. ``q`` is taken again from ``u`` by an exact power:
    the solver's raises powers below ``e^-80`` to it (harmless in its sums, not in a
    weight)."""
    x = scores - scores.amax(-1, keepdim=True)
    r = alpha / (alpha - 1)
    u, _ = entmax_threshold(x, r, n_iter)
    if x.dtype != torch.float64:
        tau = -u.amax(-1, keepdim=True)
        wide = torch.full_like(tau, math.inf)
        u, _ = entmax_threshold(x, r, 1, tol=0.0, start=(tau, -wide, wide))
    q = u ** (1 / (alpha - 1))
    return q / q.sum(-1, keepdim=True)


class _Normmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores: Tensor, alpha: Alpha, n_iter: int) -> Tensor:
        is_tensor = isinstance(alpha, Tensor)
        p = _solve(scores.detach(), alpha.detach() if is_tensor else alpha, n_iter)
        ctx.alpha = None if is_tensor else alpha
        ctx.save_for_backward(p, *([alpha] if is_tensor else []))
        return p

    @staticmethod
    def backward(ctx, grad: Tensor):
        p, *tensor_alpha = ctx.saved_tensors
        alpha = tensor_alpha[0] if tensor_alpha else ctx.alpha
        alpha_needed = bool(tensor_alpha) and ctx.needs_input_grad[1]
        d_x, d_alpha = _grads(p, alpha, grad, alpha_needed)
        if d_alpha is not None:
            d_alpha = d_alpha.sum_to_size(alpha.shape)
        return d_x, d_alpha, None


def _normmax_rows(scores: Tensor, alpha: Alpha, n_iter: int) -> Tensor:
    """normmax over the last dim of float32/float64 rows with a finite maximum."""
    if isinstance(alpha, Tensor):
        alpha = alpha.to(scores.dtype)
    return _Normmax.apply(scores, alpha, n_iter)


def normmax(x: Tensor, alpha: Alpha = 2, dim: int = -1, n_iter: int = 50) -> Tensor:
    """alpha-normmax (Santos et al. 2024, "Sparse and Structured Hopfield Networks")::

        normmax(x) = argmax_{p in simplex} <x, p> - ||p||_alpha,
        p_j proportional to (x_j - tau)_+ ^ (1 / (alpha - 1)),

    with ``tau`` such that ``sum_j (x_j - tau)_+ ^ (alpha / (alpha - 1)) = 1``. ``alpha``: a
    finite number above 1, or a tensor of them broadcastable to ``x`` with size 1 along
    ``dim`` (read back to check, which waits for a GPU), differentiable. ``n_iter`` caps the
    safeguarded Newton solver for ``tau``, which stops on convergence (the entmax package's
    ``normmax_bisect`` bisects ``n_iter`` times). Closed-form gradients, twice
    differentiable; the contract of docs/library.md ("The functions")."""
    check_scores(x, "normmax")
    n_iter = check_count(n_iter, "n_iter", "normmax")
    alpha = along_rows(check_alpha(alpha), x, dim, "alpha", "normmax")
    return normalize_along(partial(_normmax_rows, alpha=alpha, n_iter=n_iter), x, dim,
                           name="normmax")


class Normmax(nn.Module):
    """:func:`normmax` along ``dim`` with ``alpha`` and ``n_iter`` fixed."""

    def __init__(self, alpha: Alpha = 2, dim: int = -1, n_iter: int = 50):
        super().__init__()
        self.alpha, self.dim = check_alpha(alpha, "Normmax"), dim
        self.n_iter = check_count(n_iter, "n_iter", "Normmax")

    def forward(self, x: Tensor) -> Tensor:
        return normmax(x, self.alpha, self.dim, self.n_iter)

    def extra_repr(self) -> str:
        alpha = "tensor" if isinstance(self.alpha, Tensor) else self.alpha
        return f"alpha={alpha}, dim={self.dim}, n_iter={self.n_iter}"


__all__ = ["Normmax", "alpha_norm", "check_alpha", "normmax"]
