"""Hard retrieval attention (Xu et al. 2021, "Learning Hard Retrieval Decoder
Attention for Transformers").

Every head of every query attends to exactly one key and returns that key's value row,
with a straight-through backward pass::

    training:   P = dropout(softmax(s)),   i ~ Categorical(P),   out = V[i]
    inference:  i = argmax_j s_j,                                out = V[i]
    backward:   dP = dOut V^T,   dV[k] = sum of dOut[j] over the queries j with i_j = k

Masked keys are never sampled nor picked; docs/methods.md, "Hard retrieval".
"""

from typing import Callable, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .base import Normalizer, guarded

SAMPLING_EPS = 1e-9


def key_rows(index: Tensor, kv_batch: int, row_strides: Sequence[int]) -> Tensor:
    """Flat row numbers of the keys that ``index`` ``(B, H, T)`` picks in values
    ``(B_kv, H, S, d)`` whose ``(batch, head, key)`` strides, counted in rows of ``d``,
    are ``row_strides``. Query row ``(b, h)`` reads value row ``(b // g, h)``, where
    ``g = B / B_kv`` beam hypotheses share one source."""
    batch, heads, _ = index.shape
    per_batch, per_head, per_key = row_strides
    first = torch.arange(batch, device=index.device) // (batch // kv_batch) * per_batch
    head = torch.arange(heads, device=index.device) * per_head
    return (first[:, None, None] + head[None, :, None] + index * per_key).view(-1)


def as_rows(values: Tensor) -> Tuple[Tensor, Tuple[int, ...]]:
    """The values ``(B_kv, H, S, d)`` as a table of rows of ``d`` numbers read from
    their own storage, and their ``(batch, head, key)`` strides in rows.

    fairseq keeps values as a transposed ``(S, B*H, d)`` tensor; viewing its storage
    avoids copying all values at every decoding step only to read a few rows. A
    layout whose rows are not contiguous runs of ``d`` numbers is copied first.
    """
    dim = values.size(-1)
    if values.stride(-1) != 1 or any(stride % dim for stride in values.stride()[:-1]):
        values = values.contiguous()
    strides = tuple(stride // dim for stride in values.stride()[:-1])
    rows = 1 + sum((size - 1) * stride for size, stride in zip(values.shape[:-1], strides))
    return values.as_strided((rows, dim), (dim, 1)), strides


def gather_values(values: Tensor, index: Tensor) -> Tensor:
    """``out[b, h, t] = values[b // g, h, index[b, h, t]]`` (see :func:`key_rows`): one
    row copy per query and head."""
    table, strides = as_rows(values)
    rows = key_rows(index, values.size(0), strides)
    return table.index_select(0, rows).view(*index.shape, values.size(-1))


class RetrieveRows(torch.autograd.Function):
    """``out[b, h, t] = values[b, h, index[b, h, t]]`` with the straight-through
    backward of ``out = probs @ values``: ``dprobs = dout @ values^T``, and
    ``dvalues`` summed on the retrieved rows by index-add. Shapes: probs
    ``(B, H, T, S)``, values ``(B, H, S, d)``, index ``(B, H, T)``."""

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
            batch, heads, src_len, dim = values.shape
            rows = key_rows(index, batch, (heads * src_len, src_len, 1))
            grad_values = grad_out.new_zeros(values.shape)
            grad_values.view(-1, dim).index_add_(0, rows, grad_out.reshape(-1, dim))
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
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if self.training:
            out, index, empty = self._sample_and_retrieve(scores, values, dropout)
        else:
            best, index = scores.max(dim=-1)
            empty = torch.isneginf(best)
            out = gather_values(values, index)
            if self._forward_hooks:  # observers (analysis) read the weights from forward()
                self(scores)
        # As in the base class: the empty-row fill is skipped on the CPU when none exists.
        has_empty = scores.is_cuda or bool(empty.any())
        if has_empty:
            out = out.masked_fill(empty.unsqueeze(-1), 0.0)
        if not need_weights:
            return out, None
        weights = one_hot(index, scores.size(-1), torch.promote_types(scores.dtype, torch.float32))
        return out, weights.masked_fill(empty.unsqueeze(-1), 0.0) if has_empty else weights

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
