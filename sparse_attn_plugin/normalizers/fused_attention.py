"""Fused attention, ``normalise(q k^T scale + masks) v`` in one Triton program per block
of queries (:mod:`.attention_kernels`), for softmax, sparsemax, 1.5-entmax, alpha-entmax
(one alpha per row, with its gradient) and top-k: its arguments' checks, the masks, when
it runs (:func:`fused_runs`) and its autograd Function. :func:`..functional.attention` is
the API, with the eager path that is the reference. docs/library.md, "Attention in one
call".
"""

import functools
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..errors import SettingsError
from .entmax_family import in_newton_range
from .entmax_newton import TOLERANCE
from .fused_triton import check_runs, have_triton, interpreting
from .triton_cases import ENTMAX15, GENERAL, SOFTMAX, SPARSEMAX, TOPK

#: The normalisers, by name, and the kernels' case for each.
KINDS = {"softmax": SOFTMAX, "sparsemax": SPARSEMAX, "entmax15": ENTMAX15,
         "entmax_alpha": GENERAL, "topk": TOPK}
#: alpha of the kinds that fix it.
FIXED_ALPHA = {"sparsemax": 2.0, "entmax15": 1.5}
#: The most keys the fused kernels take (a row of keys is held in one program's registers);
#: longer rows run eagerly.
MAX_KEYS = 1024
#: The Newton solver's cap in the fused kernels, as the eager solver's default.
MAX_ITER = 30


def check_attention(q: Tensor, k: Tensor, v: Tensor, kind: str, alpha, k_top,
                    key_padding_mask: Optional[Tensor]) -> None:
    """A one-line ValueError or TypeError for arguments :func:`attention` cannot take."""
    if kind not in KINDS:
        raise ValueError(f"attention: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not (isinstance(x, Tensor) and x.is_floating_point() and x.dim() == 4):
            raise TypeError(f"attention: {name} must be a floating-point tensor (batch, heads, "
                            f"length, dim)")
    if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3] or q.size(-1) != k.size(-1):
        raise ValueError(f"attention: q {tuple(q.shape)}, k {tuple(k.shape)} and v "
                         f"{tuple(v.shape)} must share batch and heads, k and v their length, "
                         f"q and k their dim")
    if (alpha is None) == (kind == "entmax_alpha"):
        raise ValueError("attention: alpha goes with kind='entmax_alpha', and only with it")
    if (k_top is None) == (kind == "topk"):
        raise ValueError("attention: k_top goes with kind='topk', and only with it")
    if key_padding_mask is not None and (key_padding_mask.dtype != torch.bool or tuple(
            key_padding_mask.shape) != (q.size(0), k.size(2))):
        raise ValueError(f"attention: key_padding_mask must be bool (batch, key length) = "
                         f"{(q.size(0), k.size(2))} (True: a padding key)")


def masked_keys(key_padding_mask: Optional[Tensor], causal: bool, len_q: int, len_k: int,
                device) -> Optional[Tensor]:
    """Which keys each query may not see, broadcastable to ``(batch, heads, len_q,
    len_k)``: padding keys, and with ``causal`` those after query ``i + len_k - len_q``
    (the keys before the queries being a cache); None if none."""
    masked = None
    if key_padding_mask is not None:
        masked = key_padding_mask[:, None, None, :]
    if causal:
        later = torch.ones(len_q, len_k, dtype=torch.bool, device=device).triu(len_k - len_q + 1)
        masked = later if masked is None else masked | later
    return masked


def _blocks(len_k: int, dim: int, value_dim: int) -> dict:
    """Block sizes: every key in one block (a power of two, 16 at least, as ``tl.dot``
    wants), queries in blocks of 16-64 so a block of scores stays near 8192 entries."""
    def power(n: int) -> int:
        return max(16, 1 << max(n - 1, 0).bit_length())
    block_n = power(len_k)
    return {"BLOCK_M": max(16, min(64, 8192 // block_n)), "BLOCK_N": block_n,
            "BLOCK_D": power(dim), "BLOCK_DV": power(value_dim)}


@functools.lru_cache(maxsize=None)
def _kernels():
    from . import attention_kernels
    return attention_kernels.attention_forward, attention_kernels.attention_backward


class _Fused(torch.autograd.Function):
    """The fused kernels' forward and closed-form backward (``dq``, ``dk``, ``dv`` and a
    tensor alpha's gradient), once differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, alpha, kind, k_top, key_padding_mask, causal, scale, max_iter):
        batch, heads, len_q, dim = q.shape
        len_k, value_dim = k.size(2), v.size(-1)
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        # a number (or no) alpha goes to the kernels as a number, a tensor one value per row;
        # without a mask or alpha rows the kernels read none: q stands in, at no launch
        alpha_rows = isinstance(alpha, Tensor)
        alphas = _alpha_rows(alpha, (batch, heads, len_q, 1), compute, q.device) \
            if alpha_rows else q
        alpha_value = 2.0 if alpha_rows else float(FIXED_ALPHA.get(kind, alpha or 2.0))
        mask = q if key_padding_mask is None else key_padding_mask.to(torch.int8).contiguous()
        has_mask, mask_rows = key_padding_mask is not None, mask.dim() == 3
        out = torch.empty(batch, heads, len_q, value_dim, dtype=v.dtype, device=q.device)
        stats = torch.empty(batch * heads * len_q, 2, dtype=compute, device=q.device)
        blocks = _blocks(len_k, dim, value_dim)
        grid = (-(-len_q // blocks["BLOCK_M"]), batch * heads)
        forward_kernel, _ = _kernels()
        forward_kernel[grid](q, k, v, out, mask, alphas, alpha_value, stats, heads, len_q, len_k,
                             dim, value_dim, scale, max_iter, TOLERANCE.get(compute, 1e-6),
                             k_top or 1, KIND=KINDS[kind], HAS_MASK=has_mask, MASK_ROWS=mask_rows,
                             CAUSAL=causal, ALPHA_ROWS=alpha_rows,
                             POLISH=compute == torch.float64, **blocks)
        ctx.save_for_backward(q, k, v, mask, alphas, stats)
        ctx.settings = (kind, has_mask, mask_rows, causal, alpha_rows, alpha_value, scale,
                        blocks, grid)
        ctx.alpha_shape = alpha.shape if isinstance(alpha, Tensor) else None
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        q, k, v, mask, alphas, stats = ctx.saved_tensors
        kind, has_mask, mask_rows, causal, alpha_rows, alpha_value, scale, blocks, grid = \
            ctx.settings
        batch, heads, len_q, dim = q.shape
        len_k, value_dim = k.size(2), v.size(-1)
        accumulate = torch.promote_types(stats.dtype, k.dtype)
        d_q = torch.empty_like(q)
        d_k = torch.zeros(k.shape, dtype=accumulate, device=k.device)
        d_v = torch.zeros(v.shape, dtype=accumulate, device=v.device)
        alpha_grad = ctx.alpha_shape is not None and ctx.needs_input_grad[3]
        d_alpha = torch.empty(batch * heads * len_q if alpha_grad else 1, dtype=stats.dtype,
                              device=q.device)
        _, backward_kernel = _kernels()
        backward_kernel[grid](q, k, v, d_out.contiguous(), mask, alphas, alpha_value, stats, d_q,
                              d_k, d_v, d_alpha, heads, len_q, len_k, dim, value_dim, scale,
                              KIND=KINDS[kind], HAS_MASK=has_mask, MASK_ROWS=mask_rows,
                              CAUSAL=causal, ALPHA_ROWS=alpha_rows, ALPHA_GRAD=alpha_grad,
                              **blocks)
        d_alpha = d_alpha.view(batch, heads, len_q, 1).sum_to_size(ctx.alpha_shape) \
            if alpha_grad else None
        return (d_q, d_k.to(k.dtype), d_v.to(v.dtype), d_alpha, *[None] * 6)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, kind: str, alpha=None,
                    k_top: Optional[int] = None, key_padding_mask: Optional[Tensor] = None,
                    causal: bool = False, scale: float = 1.0, max_iter: int = MAX_ITER
                    ) -> Tensor:
    """The fused kernels on arguments the caller vouches for: those :func:`check_attention`
    passes, at most :data:`MAX_KEYS` keys, alpha in (1, 2] (nothing is read back from the
    device), but ``key_padding_mask`` may also be bool ``(batch, len_q, len_k)``, True where
    a query does not see a key; ``max_iter`` caps alpha-entmax's Newton steps."""
    return _Fused.apply(q, k, v, alpha, kind, k_top, key_padding_mask, causal, scale, max_iter)


def _alpha_rows(alpha: Tensor, shape: Tuple[int, ...], dtype, device) -> Tensor:
    """A tensor ``alpha`` as one contiguous value per query row, on ``device``."""
    return alpha.detach().to(device, dtype).expand(shape).reshape(-1).contiguous()


def fused_runs(impl: str, q: Tensor, k: Tensor, kind: str, alpha) -> bool:
    """Whether :func:`attention` takes the fused kernels: ``triton`` always (one line if it
    cannot run here), ``auto`` on CUDA where Triton imports, for at most :data:`MAX_KEYS`
    keys and, for alpha-entmax, alpha within (1, 2] (read back, which waits for a GPU)."""
    if impl not in ("auto", "triton") or impl == "auto" and not (q.is_cuda and have_triton()):
        return False
    fits = k.size(2) <= MAX_KEYS and (kind != "entmax_alpha" or in_newton_range(alpha))
    if impl == "triton":
        check_runs(q.is_cuda)
        if not fits:
            raise SettingsError(f"attention with impl='triton' takes at most {MAX_KEYS} keys "
                                f"and, for entmax_alpha, alpha in (1, 2]")
        return True
    return fits


def fused_impl(impl: str, cuda: bool) -> bool:
    """Whether a model's attention with ``--attn-impl impl`` takes the fused kernels for
    tensors on a CUDA device (``cuda``) or the CPU: ``auto`` and ``triton`` on CUDA where
    Triton imports, ``triton`` under Triton's interpreter (tests) too."""
    return impl in ("auto", "triton") and cuda and have_triton() or (
        impl == "triton" and interpreting())
