"""Hard retrieval attention (Xu et al. 2021, "Learning Hard Retrieval Decoder
Attention for Transformers").

Every head of every query attends to exactly one key and returns that key's value row,
with a straight-through backward pass::

    training:   P = dropout(softmax(s)),   i ~ Categorical(P),   out = V[i]
    inference:  i = argmax_j s_j,                                out = V[i]
    backward:   dP = dOut V^T,   dV[k] = sum of dOut[j] over the queries j with i_j = k

Masked keys are never sampled nor picked; in evaluation a row with a NaN or ``+inf`` score
gives NaN, as softmax attention does, not a value; docs/methods.md, "Hard retrieval".
"""

from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from .base import Normalizer, at_least_float32_dtype, guarded

SAMPLING_EPS = 1e-9


def gather_values(values: Tensor, index: Tensor) -> Tensor:
    """``out[..., t, :] = values[..., index[..., t], :]``: one ``gather`` on views, for values
    ``(..., S, d)`` with the index's leading dims; for an index ``(B, H, T)`` and values
    ``(B_kv, H, S, d)`` shared by ``g = B / B_kv`` hypotheses per source, row ``(b, h)`` reads
    values ``(b // g, h)`` (an expanded view, never a copy of the values)."""
    dim = values.size(-1)
    if values.size(0) != index.size(0):
        kv_batch = values.size(0)
        index = index.view(kv_batch, -1, *index.shape[1:])
        values = values.unsqueeze(1).expand(kv_batch, index.size(1), *values.shape[1:])
        return gather_values(values, index).flatten(0, 1)
    return values.gather(-2, index.unsqueeze(-1).expand(*index.shape, dim))


class RetrieveRows(torch.autograd.Function):
    """``out[..., t] = values[..., index[..., t]]`` with the straight-through backward of
    ``out = probs @ values``: ``dprobs = dout @ values^T``, and ``dvalues`` summed on the
    retrieved rows by scatter-add. Shapes: probs ``(..., T, S)``, values ``(..., S, d)``,
    index ``(..., T)``, with the same leading dims."""

    @staticmethod
    def forward(ctx, probs: Tensor, values: Tensor, index: Tensor) -> Tensor:
        ctx.save_for_backward(values, index)
        return gather_values(values, index)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        values, index = ctx.saved_tensors
        grad_probs = grad_values = None
        if ctx.needs_input_grad[0]:
            grad_probs = torch.matmul(grad_out, values.transpose(-1, -2))
        if ctx.needs_input_grad[1]:
            rows = index.unsqueeze(-1).expand_as(grad_out)
            grad_values = grad_out.new_zeros(values.shape).scatter_add_(-2, rows, grad_out)
        return grad_probs, grad_values, None


def sample_keys(weights: Tensor) -> Tensor:
    """One key per row, drawn with probability ``weights_j / sum_k weights_k``
    (weights ``>= 0`` with a positive sum), by inverting the CDF: the first ``j``
    with ``cumsum_j >= u``, ``u ~ U(0, sum]``. A key of zero weight is never drawn.
    ``(..., S)`` -> ``(...,)``. (Faster than ``torch.multinomial`` on
    many short rows: docs/methods.md.)"""
    cdf = weights.cumsum(-1)
    total = cdf[..., -1:]
    u = (1.0 - torch.rand_like(total)) * total
    return torch.searchsorted(cdf, u).squeeze(-1)


def one_hot(index: Tensor, src_len: int, dtype: torch.dtype) -> Tensor:
    """Weights with a single 1 per row at ``index``: ``(...,)`` -> ``(..., S)``."""
    weights = torch.zeros(*index.shape, src_len, dtype=dtype, device=index.device)
    return weights.scatter_(-1, index.unsqueeze(-1), 1.0)


class HardRetrieval(Normalizer):
    """Hard retrieval attention: one key per query and head.

    As a normaliser (``self(scores)``) it returns the weights it applies: the one-hot
    of the argmax in evaluation mode, and in training mode the one-hot of a key
    sampled from the softmax, written ``onehot + P - P.detach()`` so that its
    gradient is the straight-through one. :meth:`attend` computes the same
    attention without any one-hot matrix: it gathers value rows.
    """

    def normalize(self, scores: Tensor) -> Tensor:
        if not self.training:
            return one_hot(scores.argmax(-1), scores.size(-1), scores.dtype)
        probs = torch.softmax(scores, dim=-1)
        hard = one_hot(sample_keys(probs.detach()), probs.size(-1), probs.dtype)
        return hard + probs - probs.detach()

    def attend(
        self,
        scores: Tensor,
        values: Tensor,
        dropout: Optional[Callable[[Tensor], Tensor]] = None,
        need_weights: bool = True,
        rows_nonempty: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        invalid = None
        if self.training:
            out, index, empty = self._sample_and_retrieve(scores, values, dropout)
        else:
            best, index = scores.max(dim=-1)
            # NaN where the row's maximum is a NaN or +inf (and on empty rows, filled below),
            # 0 elsewhere: such a row gives NaN, as softmax's would, not a value
            invalid = (best - best).unsqueeze(-1)
            out = gather_values(values, index).add_(invalid)
            empty = None if rows_nonempty else torch.isneginf(best)
            if self._forward_hooks:  # observers (analysis) read the weights from forward()
                self(scores)
        # As in the base class: the empty-row fill is skipped on the CPU when none exists.
        if empty is not None and not (scores.is_cuda or bool(empty.any())):
            empty = None
        if empty is not None:
            out = out.masked_fill(empty.unsqueeze(-1), 0.0)
        if not need_weights:
            return out, None
        weights = one_hot(index, scores.size(-1), at_least_float32_dtype(scores))
        if invalid is not None:
            weights.add_(invalid)
        return out, weights if empty is None else weights.masked_fill(empty.unsqueeze(-1), 0.0)

    @staticmethod
    def _sample_and_retrieve(scores, values, dropout):
        """Training: sample one key per row from ``dropout(softmax(s))`` and retrieve
        its value with the straight-through backward."""
        if values.size(0) != scores.size(0):
            raise ValueError("hard retrieval training needs one set of values per query row")
        probs = guarded(lambda s: torch.softmax(s, dim=-1), scores).type_as(values)
        if dropout is not None:
            probs = dropout(probs)
        allowed = ~torch.isneginf(scores)
        empty = ~allowed.any(-1)
        sampling = (probs.detach() + SAMPLING_EPS * allowed).masked_fill(empty.unsqueeze(-1), 1.0)
        index = sample_keys(sampling)
        return RetrieveRows.apply(probs, values, index), index, empty
