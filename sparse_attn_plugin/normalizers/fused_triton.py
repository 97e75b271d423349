"""Triton kernels for alpha-entmax (sparsemax and 1.5-entmax included) and top-k attention
(Zhao et al. 2019), with their closed-form backward passes.

One program normalises a block of rows held whole in registers, so each kernel reads the
scores once and writes the weights once, as softmax's does: the safeguarded Newton solver
of :mod:`.entmax_newton` with one alpha per row, and top-k's threshold with ties counted.
Defined on first use, so ``TRITON_INTERPRET=1`` runs them on CPU tensors; docs/methods.md,
"The Triton kernels".
"""

import functools
import os
from typing import Optional, Union

import torch
from torch import Tensor

from ..errors import SettingsError
from .entmax_grad import entmax_function, scores_grad
from .entmax_newton import TOLERANCE
from .triton_cases import ENTMAX15, GENERAL, SOFTMAX, SPARSEMAX

#: Elements one program holds: rows per program = this / the row's power-of-two width.
BLOCK_ELEMENTS = 4096
#: The longest row the kernels take: a row is held whole in one program's registers.
MAX_COLS = 16384


def interpreting() -> bool:
    """Whether Triton runs kernels under its interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.lru_cache(maxsize=None)
def have_triton() -> bool:
    """Whether the ``triton`` package imports."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def check_available() -> None:
    """SettingsError, one line, when ``--attn-impl triton`` cannot run in this process."""
    if not have_triton():
        raise SettingsError("--attn-impl triton needs the triton package (CUDA builds of "
                            "torch install it; `pip install triton` otherwise)")


def check_runs(cuda: bool) -> None:
    """SettingsError, one line, when ``--attn-impl triton`` cannot run in a process that
    computes on a CUDA device (``cuda``) or on the CPU."""
    check_available()
    if not (cuda or interpreting()):
        raise SettingsError("--attn-impl triton runs on a CUDA device (or under "
                            "TRITON_INTERPRET=1, for testing); this run is on the CPU")


def _check_input(scores: Tensor) -> None:
    """SettingsError, one line, for scores the kernels cannot take."""
    check_runs(scores.is_cuda)
    if scores.size(-1) > MAX_COLS:
        raise SettingsError(f"--attn-impl triton takes rows of at most {MAX_COLS} keys; "
                            f"these have {scores.size(-1)}")


@functools.lru_cache(maxsize=None)
def _kernels():
    """The jitted kernels (:mod:`.triton_kernels`), imported on first use, so that
    ``TRITON_INTERPRET=1`` set by then runs them under the interpreter."""
    from . import triton_kernels
    return (triton_kernels.entmax_forward, triton_kernels.topk_forward, triton_kernels.backward,
            triton_kernels.entmax_any_forward)


def _launch(rows: int, cols: int):
    """The grid and block sizes for ``rows`` rows of ``cols`` entries."""
    block_n = max(16, 1 << max(cols - 1, 0).bit_length())
    block_m = max(1, min(64, BLOCK_ELEMENTS // block_n))
    return (-(-rows // block_m),), {"BLOCK_M": block_m, "BLOCK_N": block_n}


def _kind(alpha: Union[float, Tensor]) -> int:
    """The kernels' row case for this alpha (a tensor: the general one)."""
    if isinstance(alpha, Tensor):
        return GENERAL
    return {2.0: SPARSEMAX, 1.5: ENTMAX15}.get(alpha, GENERAL)


def _rows_of(alpha: Union[float, Tensor], scores: Tensor) -> Tensor:
    """``alpha`` as one contiguous value per row of ``scores``."""
    if isinstance(alpha, Tensor):
        return alpha.to(scores.dtype).expand_as(scores[..., :1]).reshape(-1).contiguous()
    return torch.full((scores.numel() // max(scores.size(-1), 1),), alpha,
                      dtype=scores.dtype, device=scores.device)


def _entmax_solve(scores: Tensor, alpha: Union[float, Tensor], max_iter: int,
                  tol: Optional[float]):
    """alpha-entmax weights over the last dim by the forward kernel (``g``: not kept)."""
    forward_kernel, *_ = _kernels()
    flat = scores.contiguous()
    alphas = _rows_of(alpha, flat)
    probs = torch.empty_like(flat)
    grid, blocks = _launch(alphas.numel(), flat.size(-1))
    tol = TOLERANCE.get(flat.dtype, 1e-6) if tol is None else tol
    forward_kernel[grid](flat, alphas, probs, alphas.numel(), flat.size(-1), max_iter, tol,
                         KIND=_kind(alpha), POLISH=flat.dtype == torch.float64, **blocks)
    return probs, None


def _entmax_backward(probs: Tensor, _g, d_probs: Tensor, alpha: Union[float, Tensor],
                     alpha_needed: bool):
    """The closed-form gradients by the backward kernel (``dalpha`` one per row)."""
    return _backward(probs, d_probs, _rows_of(alpha, probs), _kind(alpha), alpha_needed)


class TopKTriton(torch.autograd.Function):
    """Top-k softmax over the last dim by the Triton kernel; softmax's gradient on the
    kept entries (the threshold is a constant, as in :mod:`.topk`)."""

    @staticmethod
    def forward(ctx, scores: Tensor, k: int):
        _, topk_kernel, *_ = _kernels()
        flat = scores.contiguous()
        probs = torch.empty_like(flat)
        rows = flat.numel() // flat.size(-1)
        grid, blocks = _launch(rows, flat.size(-1))
        topk_kernel[grid](flat, probs, rows, flat.size(-1), k, **blocks)
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, d_probs: Tensor):
        (probs,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: softmax's gradient, differentiably
            return scores_grad(probs, probs, d_probs)[0], None
        return _backward(probs, d_probs, probs, SOFTMAX, False)[0], None


def _backward(probs: Tensor, d_probs: Tensor, alphas: Tensor, kind: int, alpha_grad: bool):
    """``ds`` and (with ``alpha_grad``) the per-row ``dalpha``, by the backward kernel."""
    _, _, backward_kernel, _ = _kernels()
    d_probs = d_probs.contiguous()
    d_scores = torch.empty_like(probs)
    rows = probs.numel() // probs.size(-1)
    d_alpha = torch.empty(rows if alpha_grad else 1, dtype=probs.dtype, device=probs.device)
    grid, blocks = _launch(rows, probs.size(-1))
    backward_kernel[grid](probs, d_probs, alphas, d_scores, d_alpha, rows, probs.size(-1),
                          KIND=kind, ALPHA_GRAD=alpha_grad, **blocks)
    return d_scores, d_alpha if alpha_grad else None


def entmax_triton(scores: Tensor, alpha: Union[float, Tensor] = 1.5, max_iter: int = 30,
                  tol: Optional[float] = None) -> Tensor:
    """alpha-entmax of ``scores`` over the last dim, ``alpha`` in (1, 2] a number or a
    tensor broadcastable to ``scores`` with size 1 in the last dim (e.g. one per head);
    differentiable in both, twice (the second time eagerly). Rows with every entry ``-inf``
    get zero weights, rows with a NaN or ``+inf`` NaN weights."""
    _check_input(scores)
    if not isinstance(alpha, Tensor):
        alpha = float(alpha)
    solve = functools.partial(_entmax_solve, max_iter=max_iter, tol=tol)
    return entmax_function(scores, alpha, solve, _entmax_backward)


def _any_alpha_solve(scores: Tensor, alpha: Union[float, Tensor], max_steps: int, tol: float):
    """alpha-entmax weights over the last dim for any alpha > 0 by the bracketed kernel."""
    *_, any_kernel = _kernels()
    flat = scores.contiguous()
    alphas = _rows_of(alpha, flat)
    probs = torch.empty_like(flat)
    grid, blocks = _launch(alphas.numel(), flat.size(-1))
    any_kernel[grid](flat, alphas, probs, alphas.numel(), flat.size(-1), max_steps, tol,
                     **blocks)
    return probs, None


def entmax_any_triton(scores: Tensor, alpha: Union[float, Tensor], max_steps: int,
                      tol: float) -> Tensor:
    """alpha-entmax over the last dim for any alpha > 0 (:mod:`.entmax_general`'s method,
    in float64 inside the kernel), with the closed-form gradients computed eagerly
    (:mod:`.entmax_grad`, which takes alpha = 1's limit)."""
    _check_input(scores)
    if not isinstance(alpha, Tensor):
        alpha = float(alpha)
    solve = functools.partial(_any_alpha_solve, max_steps=max_steps, tol=tol)
    return entmax_function(scores, alpha, solve)


def sparsemax_triton(scores: Tensor) -> Tensor:
    """sparsemax (alpha = 2) over the last dim by the Triton kernels."""
    return entmax_triton(scores, 2.0)


def entmax15_triton(scores: Tensor) -> Tensor:
    """1.5-entmax over the last dim by the Triton kernels."""
    return entmax_triton(scores, 1.5)


def topk_triton(scores: Tensor, k: int) -> Tensor:
    """Top-k softmax over the last dim (ties at the k-th largest all kept) by the Triton
    kernels. Rows with every entry ``-inf`` get zero weights, rows with a NaN or ``+inf``
    NaN weights."""
    _check_input(scores)
    return TopKTriton.apply(scores, k)
