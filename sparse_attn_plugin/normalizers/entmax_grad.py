"""Closed-form gradients of alpha-entmax from its weights, and the autograd Function that
pairs any of its solvers (sort, Newton, compiled, Triton) with them.

With ``g = p^(2 - alpha)`` (zero off the support), ``G = sum g``, ``g_hat = g / G``,
``H = sum_j p_j log p_j`` and ``r = 1 / (alpha - 1)`` (Peters et al. 2019; Correia et al.
2019, appendix)::

    ds     = g * dp - g * sum(g * dp) / G
    dalpha = r^2 sum_j dp_j (p_j - g_hat_j) - r sum_j dp_j (p_j log p_j - g_hat_j H)

Written in torch operations on the saved weights, so the backward is itself differentiable.
"""

from typing import Callable, Optional, Union

import torch
from torch import Tensor

Alpha = Union[float, Tensor]


def support_weights(p: Tensor, alpha: Alpha) -> Tensor:
    """``g = p^(2 - alpha)`` on the support, 0 off it and NaN where ``p`` is NaN; its
    derivative is finite everywhere (the power is never taken at 0)."""
    off = p == 0
    if isinstance(alpha, float) and alpha == 2.0:
        return (~off).to(p.dtype) + p * 0      # 1 on the support; NaN stays NaN
    on = torch.where(off, 1.0, p)
    g = on.sqrt() if isinstance(alpha, float) and alpha == 1.5 else on.pow(2 - alpha)
    return torch.where(off, 0.0, g)


def scores_grad(p: Tensor, g: Tensor, dp: Tensor, differentiable: bool = True):
    """``ds = g dp - g sum(g dp) / sum g``, and ``sum(dp g_hat)`` for the alpha gradient
    (``differentiable``: kept so for a second derivative)."""
    gdp = g * dp
    # sum g >= (1/n)^(2 - alpha) on a row with weights; empty rows (g = 0) get ds = 0, and
    # divide by 1 (not by a tiny number, whose square, in the second derivative, is 0;
    # with no second derivative, by the tiny number: the same 0, one operation)
    total = g.sum(-1, keepdim=True)
    total = torch.where(total == 0, 1.0, total) if differentiable else total.clamp_min(
        torch.finfo(total.dtype).tiny)
    dp_ghat = gdp.sum(-1, keepdim=True) / total
    return gdp - g * dp_ghat, dp_ghat


def alpha_grad(p: Tensor, dp: Tensor, dp_ghat: Tensor, alpha: Tensor) -> Tensor:
    """Per row, ``r^2 (sum dp p - sum dp g_hat) - r (sum dp p log p - sum dp g_hat * H)``;
    at alpha = 1 (softmax) its limit ``(sum dp p * sum p log^2 p - sum dp p log^2 p) / 2``."""
    at_one = alpha == 1
    r = 1 / torch.where(at_one, 2.0, alpha - 1)
    log_p = torch.log(p + (p == 0).to(p.dtype))       # 0 log 0 = 0, and no slow log(0)
    plogp = p * log_p
    neg_entropy = plogp.sum(-1, keepdim=True)
    dp_p = (dp * p).sum(-1, keepdim=True)
    dp_plogp = (dp * plogp).sum(-1, keepdim=True)
    general = r * r * (dp_p - dp_ghat) - r * (dp_plogp - dp_ghat * neg_entropy)
    plog2p = plogp * log_p
    limit = (dp_p * plog2p.sum(-1, keepdim=True) - (dp * plog2p).sum(-1, keepdim=True)) / 2
    return torch.where(at_one, limit, general)


def grads(p: Tensor, g: Tensor, dp: Tensor, alpha: Tensor):
    """Both gradients in one call: ``ds`` and the per-row ``dalpha``."""
    d_scores, dp_ghat = scores_grad(p, g, dp)
    return d_scores, alpha_grad(p, dp, dp_ghat, alpha)


#: A solver: weights (and ``g``, or None) of float32/float64 scores for an alpha, no graph.
Solver = Callable[[Tensor, Alpha], tuple]
#: A fast backward: ``(p, g, dp, alpha, alpha_needed) -> (ds, per-row dalpha or None)``.
Backward = Callable[..., tuple]


def eager_backward(p: Tensor, g: Optional[Tensor], dp: Tensor, alpha: Alpha,
                   alpha_needed: bool):
    """The gradients by :func:`grads` (``g`` recomputed from ``p`` when not given)."""
    g = support_weights(p, alpha) if g is None else g
    if alpha_needed:
        return grads(p, g, dp, alpha)
    return scores_grad(p, g, dp)[0], None


def plain_backward(p: Tensor, g: Optional[Tensor], dp: Tensor, alpha: Alpha,
                   alpha_needed: bool):
    """:func:`eager_backward` in the usual backward pass, where nothing differentiates the
    gradients again: the same numbers by fewer operations (``g = sqrt p`` at alpha 1.5, no
    guard kept differentiable), which a decoding step's small rows feel."""
    if alpha_needed:
        return eager_backward(p, g, dp, alpha, alpha_needed)
    if g is None:
        g = p.sqrt() if isinstance(alpha, float) and alpha == 1.5 else support_weights(p, alpha)
    return scores_grad(p, g, dp, differentiable=False)[0], None


#: How near alpha = 1 the gradient in alpha is not differentiated again: its closed form's
#: ``1 / (alpha - 1)^2`` terms cancel there (the second derivative in alpha of a float64
#: row was -1.10 for -0.017 at 1.0001, 1% off at 1.001, exact from 1.01).
SECOND_ORDER_GAP = 0.01


class EntmaxFunction(torch.autograd.Function):
    """alpha-entmax by ``solve`` with the closed-form gradients: by ``backward`` (a fused
    kernel) in the usual backward pass, eagerly and differentiably under
    ``create_graph=True``."""

    @staticmethod
    def forward(ctx, scores: Tensor, alpha: Alpha, solve: Solver, backward: Backward):
        p, g = solve(scores.detach(), alpha.detach() if isinstance(alpha, Tensor) else alpha)
        ctx.fast_backward = backward
        ctx.alpha = None if isinstance(alpha, Tensor) else alpha
        ctx.save_for_backward(p, g, *([alpha] if ctx.alpha is None else []))
        return p

    @staticmethod
    def backward(ctx, dp: Tensor):
        p, g, *tensor_alpha = ctx.saved_tensors
        alpha = tensor_alpha[0] if tensor_alpha else ctx.alpha
        alpha_needed = bool(tensor_alpha) and ctx.needs_input_grad[1]
        if torch.is_grad_enabled():      # create_graph: differentiable, from p alone
            if alpha_needed and bool(((alpha - 1).abs() < SECOND_ORDER_GAP).any()):
                raise ValueError(f"entmax_alpha: no second derivative in alpha within "
                                 f"{SECOND_ORDER_GAP} of alpha = 1 (it loses its digits "
                                 f"there): differentiate alpha once (create_graph=False), "
                                 f"or keep it farther from 1")
            d_scores, d_alpha = eager_backward(p, None, dp, alpha, alpha_needed)
        else:   # as a plain tensor: no view's base for a compiled kernel to guard on
            d_scores, d_alpha = ctx.fast_backward(p, g, dp.detach(), alpha, alpha_needed)
        if d_alpha is not None:
            d_alpha = d_alpha.reshape(*p.shape[:-1], 1).sum_to_size(alpha.shape)
        return d_scores, d_alpha, None, None


def entmax_function(scores: Tensor, alpha: Alpha, solve: Solver,
                    backward: Backward = plain_backward) -> Tensor:
    """alpha-entmax of ``scores`` over the last dim by ``solve``, differentiable in the
    scores and (a tensor) alpha, twice; the weights alone where no graph is recorded (a
    decoding step, a loss's forward)."""
    if not torch.is_grad_enabled() or not (
            scores.requires_grad or isinstance(alpha, Tensor) and alpha.requires_grad):
        with torch.no_grad():     # as in the Function: compiled solvers see one grad mode
            return solve(scores.detach(),
                         alpha.detach() if isinstance(alpha, Tensor) else alpha)[0]
    return EntmaxFunction.apply(scores, alpha, solve, backward)

