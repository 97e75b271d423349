"""Multi-head attention as a kernel smoother with positional embeddings (PE) integrated
into the kernel (Tsai et al. 2019, "Transformer Dissection")::

    out(q) = sum_k  k(q, k) v(k) / sum_k' k(q, k'),   v(k) = (f_k [+ t_k]) W_v

with ``f`` the layer's input, ``t`` a position's sinusoidal embedding, ``kern`` the chosen
kernel (:mod:`~sparse_attn_plugin.normalizers.kernels`) on ``x = f W_q`` and ``f W_k``, and
``k(q, k)`` by PE integration::

    direct_sum   kern(f_q + t_q, f_k + t_k)
    lookup       kern(f_q, f_k) exp(<x_q, a_{clip(t_q - t_k)}>)       (Shaw et al. 2018)
    product_xl   kern(f_q, f_k) exp(<x_q W_R, r(t_q - t_k)>)          (Transformer-XL)
    product_sym  kern(f_q, f_k) exp(<t_q W_T, t_k W_T> / sqrt(d))     (W_q = W_k)
    none         kern(f_q, f_k)

Positions count each row's tokens, not padded columns; docs/methods.md, "Kernel attention".
"""

import math
from typing import Dict, Optional, Tuple

import torch
from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor, nn

from ..normalizers.kernels import (
    KERNELS,
    Gram,
    gram,
    lookup_gram,
    relative_distances,
    relative_sinusoid_gram,
    sinusoid,
    smoother_weights,
)

PE_INTEGRATIONS = ("direct_sum", "lookup", "product_xl", "product_sym", "none")


def kernel_is_symmetric(symmetric: bool, pe_integration: str) -> bool:
    """Whether the kernel shares ``W_q = W_k``: asked for, or implied by ``product_sym``,
    the paper's proposal, whose kernel is symmetric at every site (Table 3)."""
    return symmetric or pe_integration == "product_sym"


def token_positions(padding_mask: Optional[Tensor], length: int, batch: int,
                    device) -> Tensor:
    """``(B, S)`` positions of the tokens, counting only unpadded ones (pads get 0)."""
    if padding_mask is None:
        return torch.arange(length, device=device).expand(batch, length)
    real = (~padding_mask).long()
    return (real.cumsum(-1) - 1).clamp_min(0) * real


@with_incremental_state
class KernelMultiheadAttention(nn.Module):
    """Drop-in for fairseq's ``MultiheadAttention`` in a transformer layer.

    Args:
        embed_dim, num_heads: model and head sizes.
        kernel: one of :data:`~sparse_attn_plugin.normalizers.kernels.KERNELS`.
        symmetric: tie ``W_k = W_q``.
        pe_integration: one of :data:`PE_INTEGRATIONS`.
        value_pe: values from ``f + t`` (else from ``f``).
        max_relative: ``m`` of the look-up table ``a_{-m} .. a_{m}``.
        dropout: on the attention weights.
    """

    def __init__(self, embed_dim: int, num_heads: int, kernel: str = "exponential",
                 symmetric: bool = False, pe_integration: str = "direct_sum",
                 value_pe: bool = True, max_relative: int = 16, dropout: float = 0.0):
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; choose from {', '.join(KERNELS)}")
        if pe_integration not in PE_INTEGRATIONS:
            raise ValueError(f"unknown PE integration {pe_integration!r}; choose from "
                             f"{', '.join(PE_INTEGRATIONS)}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not a multiple of {num_heads} heads")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kernel, self.pe_integration = kernel, pe_integration
        self.value_pe = value_pe and pe_integration != "none"
        self.symmetric = kernel_is_symmetric(symmetric, pe_integration)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = None if self.symmetric else nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        if pe_integration == "lookup":
            self.relative_table = nn.Parameter(torch.randn(2 * max_relative + 1,
                                                           self.head_dim) * 0.02)
        elif pe_integration == "product_xl":
            self.r_proj = nn.Linear(embed_dim, embed_dim, bias=False)       # W_R
        elif pe_integration == "product_sym":
            self.t_proj = nn.Linear(embed_dim, embed_dim, bias=False)       # W_T
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        for linear in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if linear is not None:
                nn.init.xavier_uniform_(linear.weight, gain=1 / math.sqrt(2))

    # -- shapes ------------------------------------------------------------------------------
    def _heads(self, x: Tensor) -> Tensor:
        """``(L, B, C)`` -> ``(B, H, L, d)``."""
        length, batch, _ = x.shape
        return x.view(length, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _embedding(self, positions: Tensor, dtype) -> Tensor:
        """``t`` for ``(B, L)`` positions, as ``(L, B, C)``."""
        return sinusoid(positions, self.embed_dim).to(dtype).transpose(0, 1)

    # -- the attention ---------------------------------------------------------------------------
    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = True, static_kv: bool = False,
                attn_mask: Optional[Tensor] = None,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """As fairseq's ``MultiheadAttention`` (``(T, B, C)`` in and out; ``static_kv``
        marks the cross-attention); ``value`` is ``key`` (values are computed from it)."""
        tgt_len, batch, _ = query.shape
        self_attention = not static_kv
        state = {} if incremental_state is None else self._get_input_buffer(incremental_state)
        step = 0 if state.get("step") is None else int(state["step"]) + 1
        if incremental_state is not None:
            q_pos = torch.full((batch, tgt_len), step, device=query.device)
        elif self_attention:
            q_pos = token_positions(key_padding_mask, tgt_len, batch, query.device)
        else:
            q_pos = token_positions(None, tgt_len, batch, query.device)
        if static_kv and "keys" in state:
            keys, values = state["keys"], state["values"]
            k_pos, key_padding_mask = state["key_positions"], state.get("key_padding_mask")
        else:
            source = query if self_attention else key
            k_pos = q_pos if self_attention else token_positions(
                key_padding_mask, source.size(0), batch, source.device)
            keys, values = self._keys_values(source, k_pos)
            if self_attention and incremental_state is not None and "keys" in state:
                keys = torch.cat([state["keys"], keys], 2)
                values = torch.cat([state["values"], values], 2)
                k_pos = torch.cat([state["key_positions"], k_pos], 1)
                # fairseq passes the padding of the current step only
                step_mask = (key_padding_mask if key_padding_mask is not None else
                             torch.zeros(batch, tgt_len, dtype=torch.bool, device=keys.device))
                earlier = state.get("key_padding_mask")
                if earlier is None:
                    earlier = torch.zeros(batch, k_pos.size(1) - tgt_len, dtype=torch.bool,
                                          device=keys.device)
                key_padding_mask = torch.cat([earlier, step_mask.bool()], 1)
        if incremental_state is not None:
            state.update(keys=keys, values=values, key_positions=k_pos, step=torch.tensor(step))
            if key_padding_mask is not None:
                state["key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, state)
        queries = self._heads(self.q_proj(
            self._with_pe(query, q_pos, self.pe_integration == "direct_sum")))
        kernel = gram(self.kernel, queries, keys)
        latest = step + tgt_len - 1 if incremental_state is not None else tgt_len - 1
        positional = self._positional(queries, q_pos, k_pos, latest)
        if positional is not None:
            kernel = kernel * positional
        keep = self._keep(key_padding_mask, attn_mask, batch, tgt_len, keys.size(2),
                          keys.device)
        weights = smoother_weights(kernel, keep)
        out = torch.matmul(self.dropout_module(weights), values)           # (B, H, T, d)
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, batch, self.embed_dim))
        if not (need_weights or need_head_weights):
            return out, None
        head_weights = weights.transpose(0, 1)                              # (H, B, T, S)
        return out, head_weights if need_head_weights else head_weights.mean(0)

    def _with_pe(self, x: Tensor, positions: Tensor, add: bool) -> Tensor:
        return x + self._embedding(positions, x.dtype) if add else x

    def _keys_values(self, source: Tensor, positions: Tensor) -> Tuple[Tensor, Tensor]:
        k_in = self._with_pe(source, positions, self.pe_integration == "direct_sum")
        keys = self._heads((self.q_proj if self.symmetric else self.k_proj)(k_in))
        values = self._heads(self.v_proj(self._with_pe(source, positions, self.value_pe)))
        return keys, values

    def _positional(self, queries: Tensor, q_pos: Tensor, k_pos: Tensor,
                    latest: int) -> Optional[Gram]:
        """The positional factor of the kernel, ``(B, H, T, S)``; None if there is none.
        ``latest`` bounds the query positions (key positions are below ``S``)."""
        distances = relative_distances(q_pos, k_pos).unsqueeze(1)           # (B, 1, T, S)
        if self.pe_integration == "lookup":
            return lookup_gram(queries, self.relative_table, distances)
        if self.pe_integration == "product_xl":
            batch, heads, length, dim = queries.shape
            merged = queries.transpose(1, 2).reshape(batch, length, self.embed_dim)
            c = self._heads(self.r_proj(merged).transpose(0, 1))
            return relative_sinusoid_gram(c, distances, span=(1 - k_pos.size(1), latest))
        if self.pe_integration == "product_sym":
            t_q = self._heads(self.t_proj(self._embedding(q_pos, queries.dtype)))
            t_k = self._heads(self.t_proj(self._embedding(k_pos, queries.dtype)))
            return gram("exponential", t_q, t_k)
        return None

    @staticmethod
    def _keep(key_padding_mask, attn_mask, batch, tgt_len, src_len, device) -> Tensor:
        """Boolean ``(B, 1, T, S)``: True where a key may be attended."""
        keep = torch.ones(batch, 1, tgt_len, src_len, dtype=torch.bool, device=device)
        if key_padding_mask is not None:
            keep = keep & ~key_padding_mask.bool().view(batch, 1, 1, src_len)
        if attn_mask is not None:
            keep = keep & (attn_mask == 0).view(1, 1, tgt_len, src_len)
        return keep

    # -- incremental state -----------------------------------------------------------------------
    def _get_input_buffer(self, incremental_state) -> Dict[str, Optional[Tensor]]:
        return self.get_incremental_state(incremental_state, "kernel_attn_state") or {}

    def _set_input_buffer(self, incremental_state, buffer):
        return self.set_incremental_state(incremental_state, "kernel_attn_state", buffer)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Reorder the cached keys, values, positions and mask with the beams."""
        state = self._get_input_buffer(incremental_state)
        if state:
            for name in ("keys", "values", "key_positions", "key_padding_mask"):
                if state.get(name) is not None:
                    state[name] = state[name].index_select(0, new_order)
            self._set_input_buffer(incremental_state, state)
        return incremental_state
