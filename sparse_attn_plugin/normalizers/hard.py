"""Hard retrieval attention (Xu et al. 2021, "Learning Hard Retrieval Decoder
Attention for Transformers").

Every head of every query attends to exactly one key and returns that key's value
row, so the weighted sum ``P V`` becomes a gather::

    training:   P = dropout(softmax(s)),   i ~ Categorical(P),   out = V[i]
    inference:  i = argmax_j s_j,                                out = V[i]

At inference neither the softmax nor the ``1/sqrt(d)`` scaling changes the argmax,
so none is computed. The training backward pass is straight-through, as if the
output were ``P V``, except that values get gradient only where they were used::

    dP = dOut V^T,        dV[k] = sum of dOut[j] over the queries j with i_j = k

Dropout acts on ``P`` before sampling, as in the authors' code; a row that dropout
empties is sampled uniformly over its unmasked keys (an epsilon of
:data:`SAMPLING_EPS` is added to every unmasked key, which moves no probability by
more than ``S * SAMPLING_EPS``). Masked keys are never sampled nor picked, except
in a row whose keys are all masked, whose output is zero.
"""

from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from .base import Normalizer, guarded

SAMPLING_EPS = 1e-9


def _row_offsets(index: Tensor, src_len: int) -> Tensor:
    """Offsets that turn per-row key indices ``(N, T)`` into indices of flat ``(N * S)``
    rows."""
    return torch.arange(0, index.size(0) * src_len, src_len, device=index.device)[:, None]


class RetrieveRows(torch.autograd.Function):
    """``out[n, t] = values[n, index[n, t]]`` with the straight-through backward of
    ``out = probs @ values``: ``dprobs = dout @ values^T`` and ``dvalues`` summed on
    the retrieved rows by index-add. Shapes: probs ``(N, T, S)``, values
    ``(N, S, d)``, index ``(N, T)``."""

    @staticmethod
    def forward(ctx, probs: Tensor, values: Tensor, index: Tensor) -> Tensor:
        n, src_len, dim = values.shape
        flat = (index + _row_offsets(index, src_len)).view(-1)
        ctx.save_for_backward(values, flat)
        return values.reshape(n * src_len, dim).index_select(0, flat).view(*index.shape, dim)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        values, flat = ctx.saved_tensors
        grad_probs = grad_values = None
        if ctx.needs_input_grad[0]:
            grad_probs = torch.bmm(grad_out, values.transpose(1, 2))
        if ctx.needs_input_grad[1]:
            dim = values.size(-1)
            grad_values = grad_out.new_zeros(values.numel() // dim, dim).index_add_(
                0, flat, grad_out.reshape(-1, dim)).view_as(values)
        return grad_probs, grad_values, None


def sample_keys(weights: Tensor) -> Tensor:
    """One key per row, drawn with probability ``weights_j / sum_k weights_k``
    (weights ``>= 0`` with a positive sum), by inverting the CDF: the first ``j``
    with ``cumsum_j >= u``, ``u ~ U(0, sum]``. A key of zero weight is never drawn.
    ``(..., S)`` -> ``(...,)``. (An order of magnitude faster than
    ``torch.multinomial`` on many short rows.)"""
    cdf = weights.cumsum(-1)
    total = cdf[..., -1:]
    u = (1.0 - torch.rand_like(total)) * total
    return torch.searchsorted(cdf, u).squeeze(-1)


def one_hot(index: Tensor, src_len: int, dtype: torch.dtype) -> Tensor:
    """Weights with a single 1 per row at ``index``: ``(...,)`` -> ``(..., S)``."""
    weights = torch.zeros(*index.shape, src_len, dtype=dtype, device=index.device)
    return weights.scatter_(-1, index.unsqueeze(-1), 1.0)


def gather_values(values: Tensor, index: Tensor) -> Tensor:
    """``values[b // g, h, index[b, h, t]]`` for values ``(B_kv, H, S, d)``, index
    ``(B, H, T)`` and ``g = B / B_kv`` hypotheses sharing one source (no copy of
    the values is made)."""
    kv_batch, heads, src_len, dim = values.shape
    batch, _, tgt_len = index.shape
    shared = values.unsqueeze(1).expand(kv_batch, batch // kv_batch, heads, src_len, dim)
    picks = index.view(kv_batch, -1, heads, tgt_len, 1).expand(-1, -1, -1, -1, dim)
    return shared.gather(3, picks).view(batch, heads, tgt_len, dim)


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
        if scores.is_cuda or bool(empty.any()):
            out = out.masked_fill(empty.unsqueeze(-1), 0.0)
        if not need_weights:
            return out, None
        weights = one_hot(index, scores.size(-1), torch.promote_types(scores.dtype, torch.float32))
        return out, weights.masked_fill(empty.unsqueeze(-1), 0.0)

    @staticmethod
    def _sample_and_retrieve(scores, values, dropout):
        """Training: sample one key per row from ``dropout(softmax(s))`` and retrieve
        its value with the straight-through backward."""
        batch, heads, tgt_len, src_len = scores.shape
        if values.size(0) != batch:
            raise ValueError("hard retrieval training needs one set of values per query row")
        probs = guarded(lambda s: torch.softmax(s, dim=-1), scores).type_as(values)
        if dropout is not None:
            probs = dropout(probs)
        allowed = ~torch.isneginf(scores)
        empty = ~allowed.any(-1)
        sampling = (probs.detach() + SAMPLING_EPS * allowed).masked_fill(empty.unsqueeze(-1), 1.0)
        index = sample_keys(sampling).view(-1, tgt_len)
        out = RetrieveRows.apply(
            probs.reshape(-1, tgt_len, src_len), values.reshape(-1, src_len, values.size(-1)), index
        )
        return out.view(batch, heads, tgt_len, -1), index.view(batch, heads, tgt_len), empty
