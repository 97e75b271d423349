"""The contract every attention normaliser follows.

A normaliser maps attention scores ``s`` of shape ``(B, H, T, S)`` (batch, heads,
queries, keys), with ``-inf`` on keys the masks hide, to attention weights of the
same shape whose rows lie on the probability simplex over the unmasked keys.

Two things are handled once here rather than in every method:

* half precision: scores in float16/bfloat16 are normalised in float32 (the entmax
  family returns NaN in half precision) and the weights come back in float32, as
  fairseq's own softmax does; the caller casts them back with ``type_as``;
* rows whose keys are all masked give all-zero weights (not NaN, not a crash),
  with zero gradient; rows with a NaN or ``+inf`` score give NaN weights and NaN
  gradients, as ``torch.softmax`` does (a diverging run shows, and fp16 loss scaling
  sees the overflow). :func:`guarded` does this around a normaliser at the cost of one
  reduction, plus a few elementwise passes when such a row exists (always on a GPU,
  where checking would stall the stream); the fused kernels (Newton solver, top-k,
  Triton) do it themselves in the passes they make anyway, and their normalisers say so
  (:attr:`Normalizer.zeroes_empty_rows`);
* scores must be floating point (TypeError otherwise); an empty key dimension gives
  empty weights.

:meth:`Normalizer.attend` finishes the attention, ``out = weights . values``;
hard retrieval overrides it with a gather of value rows.
"""

import math
import operator
from abc import ABC, abstractmethod
from typing import Callable, Optional, Tuple

import numpy as np
import torch
from torch import Tensor, nn

from ..normalizer_options import IMPLS
from .fused_triton import check_available


def at_least_float32_dtype(scores: Tensor) -> torch.dtype:
    """float32 for float16/bfloat16 scores, their own dtype otherwise."""
    return torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype


def at_least_float32(scores: Tensor) -> Tensor:
    """float16/bfloat16 scores as float32; float32 and float64 as they are."""
    return scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores


def guarded(normalize: Callable[[Tensor], Tensor], scores: Tensor) -> Tensor:
    """``normalize(scores)`` in float32 or wider, with all-zero weights (and zero gradient)
    on rows whose keys are all masked, and NaN weights (and NaN gradient) on rows with a
    NaN or ``+inf`` score, whatever ``normalize`` would make of them."""
    scores = at_least_float32(scores)
    top = scores.amax(dim=-1, keepdim=True)
    # Such rows are rare (fairseq's masks never make one), so on the CPU the copies are
    # skipped when there is none (max - max is 0 on a finite row only); on a GPU the check
    # would stall the stream, so the guard always runs there.
    if not scores.is_cuda and bool((top - top).eq(0).all()):
        return normalize(scores)
    special = ~torch.isfinite(top)
    empty = torch.isneginf(top)
    weights = normalize(scores.masked_fill(special, 0.0)).masked_fill(empty, 0.0)
    # NaN on the invalid rows, whose gradient is NaN there and 0 (not 0 * NaN) elsewhere
    invalid = special & ~empty
    return torch.where(invalid, scores.masked_fill(~invalid, 0.0) * math.nan, weights)


def check_count(value, name: str, what: str) -> int:
    """``value`` as a Python int if it is an integer of at least 1 (a numpy integer or a
    one-element integer tensor too, by ``operator.index``); anything else, a bool
    included, is a ValueError of one line: ``WHAT needs an integer NAME >= 1, got ...``."""
    boolean = isinstance(value, (bool, np.bool_)) or (
        isinstance(value, Tensor) and value.dtype == torch.bool)
    try:
        whole = None if boolean else operator.index(value)
    except TypeError:
        whole = None
    if whole is None or whole < 1:
        shown = " ".join(repr(value).split())  # a tensor's repr on one line
        raise ValueError(f"{what} needs an integer {name} >= 1, got {name}={shown}")
    return whole


def check_impl(impl: str) -> None:
    """ValueError, one line, for an ``impl`` not in :data:`~.dispatch.IMPLS`; SettingsError
    (a ValueError) for ``triton`` where the triton package is missing."""
    if impl not in IMPLS:
        raise ValueError(f"unknown attention implementation {impl!r}; choose from "
                         f"{', '.join(IMPLS)}")
    if impl == "triton":
        check_available()


def check_scores(scores: Tensor, name: str) -> None:
    """TypeError, one line naming ``name``, unless the scores are floating point (as
    softmax's must be)."""
    if not (isinstance(scores, Tensor) and scores.is_floating_point()):
        got = scores.dtype if isinstance(scores, Tensor) else type(scores).__name__
        raise TypeError(f"{name} needs floating-point scores (float16, bfloat16, float32 or "
                        f"float64), got {got}")


def normalize_along(normalize: Callable[[Tensor], Tensor], scores: Tensor, dim: int = -1,
                    zeroes_empty_rows: bool = False, name: str = "attention") -> Tensor:
    """The contract of this module applied by ``normalize`` (weights over the last dim of
    float32/float64 scores) along ``dim`` of ``scores``: floating-point scores only, half
    precision computed and returned in float32, an empty ``dim`` giving empty weights, rows
    with every key masked all-zero and rows with a NaN or ``+inf`` all NaN (by
    :func:`guarded`, unless ``zeroes_empty_rows`` says ``normalize`` does both itself).
    :meth:`Normalizer.forward` (``dim=-1``) and :mod:`sparse_attn_plugin.functional` (any
    ``dim``) both run through it; ``name`` is the caller's, for the error messages."""
    check_scores(scores, name)
    if scores.dim() == 0:    # one entry, as torch.softmax takes it (dim -1 or 0)
        if dim not in (-1, 0):
            raise IndexError(f"{name}: dim {dim} is out of range for a 0-d tensor (-1 or 0)")
        return normalize_along(normalize, scores.reshape(1), -1, zeroes_empty_rows,
                               name).reshape(())
    moved = dim not in (-1, scores.dim() - 1)
    if moved:
        scores = scores.movedim(dim, -1)
    scores = at_least_float32(scores)
    if scores.size(-1) == 0:
        weights = scores.clone()
    else:
        weights = normalize(scores) if zeroes_empty_rows else guarded(normalize, scores)
    return weights.movedim(-1, dim) if moved else weights


class Normalizer(nn.Module, ABC):
    """Base class: subclasses implement :meth:`normalize` on float32/float64 scores
    with at least one unmasked key per row.

    Args:
        impl: how the normaliser is computed, one of :data:`~.dispatch.IMPLS`: eagerly
            (``torch``), by compiled kernels (``compiled``), by Triton kernels
            (``triton``, a CUDA device), or ``auto``: Triton's on a CUDA device, eagerly
            elsewhere; those with one implementation ignore it.
    """

    #: Whether :meth:`normalize` itself gives rows with every key masked all-zero weights
    #: and zero gradient, and rows with a NaN or ``+inf`` NaN weights (otherwise
    #: :func:`guarded` does both around it).
    zeroes_empty_rows = False

    def __init__(self, impl: str = "auto"):
        super().__init__()
        check_impl(impl)
        self.impl = impl

    def forward(self, scores: Tensor) -> Tensor:
        return normalize_along(self.normalize, scores, -1, self.zeroes_empty_rows,
                               type(self).__name__)

    @abstractmethod
    def normalize(self, scores: Tensor) -> Tensor:
        """Weights for float32/float64 scores with an unmasked key in every row (any
        rows, when :attr:`zeroes_empty_rows`)."""

    def attend(
        self,
        scores: Tensor,
        values: Tensor,
        dropout: Optional[Callable[[Tensor], Tensor]] = None,
        need_weights: bool = True,
        rows_nonempty: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """The attention output ``dropout(w) v`` with ``w = self(scores)``, and ``w``.

        Args:
            scores: ``(..., T, S)``, ``-inf`` on masked keys: fairseq's ``(B*H, T, S)``, or
                ``(B, H, T, S)``.
            values: ``(..., S, d)`` with the scores' leading dims, or ``(B_kv, H, S, d)``
                for scores ``(B, H, T, S)`` when ``B / B_kv`` beam hypotheses share one
                source's encoder states.
            dropout: applied to the weights that multiply the values.
            need_weights: return ``w`` (float32 or wider) or ``None``.
            rows_nonempty: the caller knows that every row has an unmasked key (a decoding
                step), so :meth:`step_weights` may skip the empty-row fill.

        Returns:
            ``(..., T, d)`` outputs in the values' dtype, and the weights.
        """
        # observers (analysis) read the weights from forward()
        lean = rows_nonempty and not self._forward_hooks
        weights = self.step_weights(scores) if lean else self(scores)
        probs = weights.type_as(values)
        if dropout is not None:
            probs = dropout(probs)
        return weighted_sum(probs, values), weights if need_weights else None

    def step_weights(self, scores: Tensor) -> Tensor:
        """``self(scores)`` for scores with an unmasked key in every row, as a decoding step
        has (the weights are the same; a normaliser may skip its empty-row fill)."""
        return self(scores)

    def fused_kind(self) -> Optional[Tuple[str, dict]]:
        """The ``kind`` and keyword arguments of :func:`.fused_attention.fused_attention`
        that compute this normaliser's attention in one kernel, or None where none does."""
        return None


def weighted_sum(probs: Tensor, values: Tensor) -> Tensor:
    """``probs @ values`` for values with the probs' leading dims; for probs ``(B, H, T,
    S)`` and values ``(B_kv, H, S, d)``, ``out[b, h, t] = sum_s probs[b, h, t, s] values[b
    // g, h, s]`` with ``g = B / B_kv`` hypotheses per source."""
    kv_batch = values.size(0)
    if kv_batch == probs.size(0):
        return torch.matmul(probs, values)
    batch, heads, tgt_len, src_len = probs.shape
    return torch.einsum(
        "bxhts,bhsd->bxhtd", probs.view(kv_batch, -1, heads, tgt_len, src_len), values
    ).reshape(batch, heads, tgt_len, -1)


def softmax_rows(scores: Tensor) -> Tensor:
    """``softmax`` over the last dim under the contract: torch's softmax already makes a row
    with a NaN or ``+inf`` NaN (weights and gradient), so only rows with every key masked
    are filled (0 before, for a finite gradient, and 0 after): five kernels, where
    :func:`guarded` launches eleven on a GPU, every decoding step. On the CPU the fills
    are skipped when no row is empty (checking costs no stall there)."""
    empty = torch.isneginf(scores.amax(dim=-1, keepdim=True))
    if not (scores.is_cuda or bool(empty.any())):
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)


class Softmax(Normalizer):
    """``softmax(s)_j = exp(s_j) / sum_k exp(s_k)``: the dense baseline."""

    zeroes_empty_rows = True

    def normalize(self, scores: Tensor) -> Tensor:
        return softmax_rows(scores)

    def step_weights(self, scores: Tensor) -> Tensor:
        return softmax_step(scores)

    def fused_kind(self) -> Tuple[str, dict]:
        return "softmax", {}


def softmax_step(scores: Tensor) -> Tensor:
    """Softmax of rows with an unmasked key each, in float32 or wider, by fairseq's own call
    (one kernel): torch's softmax already gives NaN rows for a NaN or ``+inf``."""
    return torch.softmax(scores, dim=-1, dtype=at_least_float32_dtype(scores))
