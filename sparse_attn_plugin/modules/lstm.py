"""BiLSTM encoder and input-feeding LSTM decoder with bounded attention (Malaviya et al. 2018).

The OpenNMT model the paper used (Luong et al. 2015), with the bilinear ("general") score
and the coverage vector of Tu et al. (2016)::

    z_tj = s_t^T (W h_j + v beta_{t-1,j})          (coverage "paper": the paper's text)
    z_tj = (W^T s_t + v beta_{t-1,j})^T h_j        (coverage "reference": the authors' code)
    p_t = normaliser(z_t [+ c u_t], u_t)           (see bounded_attention)
    s~_t = tanh(W_c [sum_j p_tj h_j; s_t])         (attentional vector, fed back)

The optional sink is a learned embedding read by the BiLSTM after each sentence's last
token, like the paper's ``<SINK>`` word; docs/methods.md, "Constrained attention".
"""

from typing import Dict, List, Optional

import torch
from fairseq.models import FairseqEncoder, FairseqIncrementalDecoder
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..errors import SettingsError
from .bounded_attention import BoundedAttention
from .fertility import Fertility
from .source_layout import SourceLayout, to_source_columns

#: Forms of the coverage vector (see the module doc).
COVERAGE_FORMS = ("paper", "reference")


#: OpenNMT's ``-param_init``, which the paper's models were trained with: every weight
#: and bias starts uniform in [-INIT_BOUND, INIT_BOUND] (PyTorch's own defaults for the
#: LSTMs and linear maps learn measurably slower here, see ``uniform_init``).
INIT_BOUND = 0.1


def uniform_init(*modules: nn.Module) -> None:
    """OpenNMT's initialisation: every parameter of ``modules`` uniform in +-INIT_BOUND,
    embeddings' padding rows zero. On the KFTT 30k sample at the CPU recipe it lowers the
    training loss after 300 updates from 9.06 to 8.83 bits; fairseq's ``lstm`` (whose
    helpers initialise the same way) reaches 8.78."""
    for module in modules:
        for param in module.parameters():
            nn.init.uniform_(param, -INIT_BOUND, INIT_BOUND)
        for sub in module.modules():
            if isinstance(sub, nn.Embedding) and sub.padding_idx is not None:
                nn.init.zeros_(sub.weight[sub.padding_idx])


class SparseLSTMEncoder(FairseqEncoder):
    """Bidirectional LSTM over the source (with an optional sink), plus fertilities.

    Returns a dict: ``encoder_out`` ``[(B, S', H)]`` states in the model's layout,
    ``padding_mask`` ``[(B, S')]``, ``hidden``/``cell`` ``[(layers, B, H)]`` final states,
    ``fertility`` ``[(B, S')]`` (``inf`` on the sink; empty list without a fertility
    strategy) and ``model_columns`` ``[(B, S)]`` (see :class:`SourceLayout`).
    """

    def __init__(self, dictionary, embed_dim: int, hidden_size: int, num_layers: int,
                 dropout_in: float, dropout_out: float, sink: bool,
                 fertility: Optional[Fertility]):
        super().__init__(dictionary)
        if hidden_size % 2:
            raise SettingsError(f"--encoder-hidden-size must be even (two directions), "
                                f"got {hidden_size}")
        self.padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, self.padding_idx)
        self.sink = nn.Parameter(torch.empty(embed_dim)) if sink else None
        self.lstm = nn.LSTM(embed_dim, hidden_size // 2, num_layers, bidirectional=True,
                            batch_first=True, dropout=dropout_out if num_layers > 1 else 0.0)
        self.dropout_in = nn.Dropout(dropout_in)
        self.dropout_out = nn.Dropout(dropout_out)
        uniform_init(self.embed_tokens, self.lstm)
        if self.sink is not None:
            nn.init.uniform_(self.sink, -INIT_BOUND, INIT_BOUND)
        self.fertility = fertility
        self.num_layers = num_layers

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None,
                src_fertility: Optional[Tensor] = None):
        layout = SourceLayout(src_tokens.eq(self.padding_idx), sink=self.sink is not None)
        x = self.dropout_in(layout.to_model(self.embed_tokens(src_tokens), self.sink))
        packed = pack_padded_sequence(x, (layout.lengths + int(layout.sink)).cpu(),
                                      batch_first=True, enforce_sorted=False)
        states, (hidden, cell) = self.lstm(packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=x.size(1))
        fertility = []
        if self.fertility is not None:
            fertility = [layout.to_model(self.fertility(src_tokens, src_fertility),
                                         float("inf"))]
        return {
            "encoder_out": [self.dropout_out(states)],
            "padding_mask": [layout.padding_mask],
            "hidden": [self._join_directions(hidden)],
            "cell": [self._join_directions(cell)],
            "fertility": fertility,
            "model_columns": [layout.model_columns],
        }

    def _join_directions(self, state: Tensor) -> Tensor:
        """``(layers * 2, B, H/2)`` -> ``(layers, B, H)``: both directions side by side."""
        layers2, batch, half = state.shape
        return state.view(self.num_layers, 2, batch, half).permute(0, 2, 1, 3).reshape(
            self.num_layers, batch, 2 * half)

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        batch_dim = {"hidden": 1, "cell": 1}
        return {key: [t.index_select(batch_dim.get(key, 0), new_order) for t in value]
                for key, value in encoder_out.items()}

    def max_positions(self):
        return int(1e5)


class SparseLSTMDecoder(FairseqIncrementalDecoder):
    """Input-feeding LSTM decoder with bilinear attention and a chosen normaliser.

    Args:
        dictionary: the target vocabulary.
        embed_dim, hidden_size, num_layers, dropout_in, dropout_out: the LSTM.
        encoder_hidden_size: size of the encoder states attended to.
        attention: the normaliser with its coverage bookkeeping.
        coverage_vector: None, or the form of the coverage vector (Tu et al. 2016) added
            to the scores: ``paper`` (``beta_{t-1,j} s_t^T v``) or ``reference``
            (``beta_{t-1,j} v^T h_j``); see the module doc.
        share_input_output_embed: tie the output projection to the input embeddings.
    """

    def __init__(self, dictionary, embed_dim: int, hidden_size: int, num_layers: int,
                 dropout_in: float, dropout_out: float, encoder_hidden_size: int,
                 attention: BoundedAttention, coverage_vector: Optional[str] = None,
                 share_input_output_embed: bool = False):
        super().__init__(dictionary)
        self.hidden_size = hidden_size
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, dictionary.pad())
        self.layers = nn.ModuleList(
            nn.LSTMCell(embed_dim + hidden_size if i == 0 else hidden_size, hidden_size)
            for i in range(num_layers))
        self.dropout_in = nn.Dropout(dropout_in)
        self.dropout_out = nn.Dropout(dropout_out)
        self.key_proj = nn.Linear(encoder_hidden_size, hidden_size, bias=False)
        if coverage_vector not in (None, *COVERAGE_FORMS):
            raise SettingsError(f"unknown coverage vector form {coverage_vector!r}; choose from "
                                f"{', '.join(COVERAGE_FORMS)}")
        self.coverage_weight = (nn.Parameter(torch.zeros(hidden_size))
                                if coverage_vector == "paper" else None)
        self.coverage_key_weight = (
            nn.Parameter(torch.empty(encoder_hidden_size).uniform_(-INIT_BOUND, INIT_BOUND))
            if coverage_vector == "reference" else None)
        self.attention = attention
        self.combine = nn.Linear(encoder_hidden_size + hidden_size, hidden_size, bias=False)
        if share_input_output_embed:
            if embed_dim != hidden_size:
                raise SettingsError("--share-decoder-input-output-embed needs "
                                    "--decoder-embed-dim equal to --decoder-hidden-size")
            self.output_projection = None
        else:
            self.output_projection = nn.Linear(hidden_size, len(dictionary))
        uniform_init(self.embed_tokens, self.layers, self.key_proj, self.combine,
                     *([self.output_projection] if self.output_projection else []))
        self.init_from_encoder = encoder_hidden_size == hidden_size

    def forward(self, prev_output_tokens: Tensor, encoder_out=None,
                incremental_state=None, src_lengths=None, return_all_hiddens=False):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return self.output_layer(x), extra

    def extract_features(self, prev_output_tokens: Tensor, encoder_out, incremental_state=None,
                         **unused):
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        state = self._state(encoder_out, incremental_state, prev_output_tokens.size(0))
        memory = encoder_out["encoder_out"][0]
        padding_mask = encoder_out["padding_mask"][0]
        fertility = encoder_out["fertility"][0] if encoder_out["fertility"] else None
        x = self.dropout_in(self.embed_tokens(prev_output_tokens))
        outputs, weights = [], []
        for t in range(x.size(1)):
            feed, step_weights = self._step(x[:, t], state, memory, padding_mask, fertility)
            outputs.append(feed)
            weights.append(step_weights)
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "state", state)
        attn = torch.stack(weights, dim=1)                          # (B, T, S')
        source_attn = to_source_columns(attn, encoder_out["model_columns"][0])
        return torch.stack(outputs, dim=1), {"attn": [source_attn], "model_attn": [attn]}

    def _state(self, encoder_out, incremental_state, batch: int) -> Dict[str, Tensor]:
        """The decoder's state before this call: cached, or the first step's."""
        if incremental_state is not None:
            cached = self.get_incremental_state(incremental_state, "state")
            if cached is not None:
                return dict(cached)
        memory = encoder_out["encoder_out"][0]
        layers = len(self.layers)
        if self.init_from_encoder and encoder_out["hidden"][0].size(0) == layers:
            hidden = encoder_out["hidden"][0].transpose(0, 1)
            cell = encoder_out["cell"][0].transpose(0, 1)
        else:
            hidden = memory.new_zeros(batch, layers, self.hidden_size)
            cell = torch.zeros_like(hidden)
        state = {
            "hidden": hidden, "cell": cell,
            "feed": memory.new_zeros(batch, self.hidden_size),
            "coverage": memory.new_zeros(batch, memory.size(1)),
            "keys": self.key_proj(memory),
        }
        if self.coverage_key_weight is not None:
            state["coverage_keys"] = memory @ self.coverage_key_weight      # v^T h_j, (B, S)
        return state

    def _step(self, embedded: Tensor, state: Dict[str, Tensor], memory: Tensor,
              padding_mask: Tensor, fertility: Optional[Tensor]):
        """One decoder step; updates ``state`` in place (new tensors, no in-place ops)."""
        layer_input = torch.cat([embedded, state["feed"]], dim=-1)
        hiddens, cells = [], []
        for i, cell in enumerate(self.layers):
            h, c = cell(layer_input, (state["hidden"][:, i], state["cell"][:, i]))
            layer_input = self.dropout_out(h)
            hiddens.append(h)
            cells.append(c)
        query = h                                                        # (B, H)
        scores = torch.einsum("bsh,bh->bs", state["keys"], query)
        coverage = state["coverage"]
        if self.coverage_weight is not None:
            scores = scores + coverage * (query @ self.coverage_weight)[:, None]
        if self.coverage_key_weight is not None:
            scores = scores + coverage * state["coverage_keys"]
        scores = scores.float().masked_fill(padding_mask, float("-inf"))
        if fertility is not None:
            fertility = fertility[:, None, None]
        weights = self.attention.step(scores[:, None, None], coverage[:, None, None],
                                      fertility)[:, 0, 0].type_as(memory)
        context = torch.einsum("bs,bsh->bh", weights, memory)
        feed = self.dropout_out(torch.tanh(self.combine(torch.cat([context, query], dim=-1))))
        state.update(hidden=torch.stack(hiddens, dim=1), cell=torch.stack(cells, dim=1),
                     feed=feed, coverage=coverage + weights)
        return feed, weights

    def output_layer(self, features: Tensor) -> Tensor:
        if self.output_projection is None:
            return nn.functional.linear(features, self.embed_tokens.weight)
        return self.output_projection(features)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        cached = self.get_incremental_state(incremental_state, "state")
        if cached is None:
            return
        self.set_incremental_state(incremental_state, "state", {
            key: value.index_select(0, new_order) for key, value in cached.items()})

    def max_positions(self):
        return int(1e5)
