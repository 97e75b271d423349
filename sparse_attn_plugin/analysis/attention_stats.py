"""Per-head attention statistics of a trained model, measured under teacher forcing.

For every attention module (layer and site) and head, over the queries at real positions
and the keys the masks allow (masked keys, zero for every normaliser, are not counted):
sparsity, the share of weights exactly zero; entropy ``H(p) = -sum_j p_j log p_j`` (nats,
``0 log 0 = 0``) averaged over queries; learned alpha, for alpha-entmax. Per module, the
head diversity of Correia et al. (2019, section 5.2): the Jensen-Shannon divergence
``JS(p_1 .. p_H) = H((1/H) sum_h p_h) - (1/H) sum_h H(p_h)`` between its heads' weights
for a query (0 when all agree, at most ``log H``), averaged over queries. Modules read:
``encoder.layers.N.self_attn``, ``decoder.layers.N.self_attn``,
``decoder.layers.N.encoder_attn`` and the ``sparse_lstm`` decoder's ``decoder.attention``
(its ``decoder_cross`` site at layer 0).
"""

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

import torch
from torch import Tensor

from ..normalizers import EntmaxAlpha
from ..sites import SITES

_SITE_OF = {"self_attn": "self", "encoder_attn": "cross"}
_LSTM_ATTENTION = "decoder.attention.normalizer"


def _location(module_name: str) -> Optional[Tuple[str, int]]:
    """``(site, layer)`` of an attention normaliser these statistics read, else None."""
    if module_name == _LSTM_ATTENTION:
        return "decoder_cross", 0
    parts = module_name.split(".")
    if (len(parts) == 5 and parts[0] in ("encoder", "decoder") and parts[1] == "layers"
            and parts[3] in _SITE_OF and parts[4] == "normalizer"):
        return f"{parts[0]}_{_SITE_OF[parts[3]]}", int(parts[2])
    return None


def reads_attention(module_name: str) -> bool:
    """Whether a module is an attention normaliser these statistics read."""
    return _location(module_name) is not None


def site_of(module_name: str) -> str:
    """``encoder.layers.0.self_attn.normalizer`` -> ``encoder_self``;
    ``decoder.attention.normalizer`` (LSTM) -> ``decoder_cross``."""
    return _location(module_name)[0]


def layer_of(module_name: str) -> int:
    """``encoder.layers.3.self_attn.normalizer`` -> 3; the LSTM's attention -> 0."""
    return _location(module_name)[1]


def entropy(weights: Tensor) -> Tensor:
    """``-sum_j p_j log p_j`` over the last dimension, with ``0 log 0 = 0``."""
    return torch.special.entr(weights).sum(-1)


def jensen_shannon(weights: Tensor, dim: int) -> Tensor:
    """The generalised Jensen-Shannon divergence between the distributions along ``dim``
    (each over the last dimension): entropy of their mean minus their mean entropy."""
    return entropy(weights.mean(dim)) - entropy(weights).mean(dim)


@dataclass
class HeadStats:
    """Sums over the real queries that one attention module saw, per head."""

    zeros: Tensor                 # (H,) exactly-zero weights among allowed keys
    allowed: Tensor               # (H,) allowed (query, key) pairs
    entropy: Tensor               # (H,) summed entropy of the query rows
    queries: int = 0              # real query rows (the same for every head)
    diversity: float = 0.0        # summed Jensen-Shannon divergence between the heads
    alphas: Optional[List[float]] = None

    @classmethod
    def empty(cls, heads: int) -> "HeadStats":
        return cls(torch.zeros(heads, dtype=torch.long), torch.zeros(heads, dtype=torch.long),
                   torch.zeros(heads, dtype=torch.float64))

    def add(self, weights: Tensor, allowed: Tensor, real_queries: Tensor) -> None:
        """Count a batch: ``weights`` and ``allowed`` ``(B, H, T, S)``, ``real_queries``
        ``(B, T)``."""
        allowed = allowed & real_queries[:, None, :, None]
        self.zeros += ((weights == 0) & allowed).sum((0, 2, 3))
        self.allowed += allowed.sum((0, 2, 3))
        rows = real_queries[:, None, :].expand(-1, weights.size(1), -1)      # (B, H, T)
        p = weights.double().masked_fill(~allowed, 0.0)
        self.entropy += (entropy(p) * rows).sum((0, 2))
        self.queries += int(real_queries.sum())
        self.diversity += float((jensen_shannon(p, 1) * real_queries).sum())

    @property
    def zero_fraction(self) -> Tensor:
        return self.zeros.double() / self.allowed.clamp_min(1)

    @property
    def mean_entropy(self) -> Tensor:
        return self.entropy / max(self.queries, 1)

    @property
    def head_diversity(self) -> float:
        return self.diversity / max(self.queries, 1)


@dataclass
class SiteStats:
    """The heads of every layer of one site, pooled."""

    zeros: int = 0
    allowed: int = 0
    alphas: List[float] = field(default_factory=list)

    @property
    def zero_fraction(self) -> float:
        return self.zeros / self.allowed if self.allowed else float("nan")


def learned_alphas(model) -> Dict[str, List[float]]:
    """{site: alphas of every head of every layer} for alpha-entmax sites."""
    found = defaultdict(list)
    for name, module in model.named_modules():
        if isinstance(module, EntmaxAlpha) and reads_attention(name):
            found[site_of(name)].extend(module.alpha().tolist())
    return dict(found)


@torch.no_grad()
def head_statistics(model, batches: Iterable[dict]) -> Dict[Tuple[str, int], HeadStats]:
    """Run the model (eval mode) on fairseq batches: ``{(site, layer): HeadStats}``.

    A normaliser sees a batch's query positions in one call, or in consecutive calls of
    one decoder step each (the LSTM's attention, constrained transformer cross-attention);
    its hook counts the positions off, so each call is matched with its rows of the
    real-query mask."""
    modules = {name: m for name, m in model.named_modules() if reads_attention(name)}
    if not modules:
        raise ValueError("the model has no attention normalisers to analyse "
                         "(sparse_transformer and sparse_lstm models have them)")
    stats: Dict[Tuple[str, int], HeadStats] = {}
    real_queries = {}  # "encoder" / "decoder" -> (B, T) mask of the current batch
    done = {}          # module name -> query positions it has normalised in this batch

    def count(name):
        key, side = _location(name), name.split(".")[0]

        def hook(module, inputs, weights):
            if key not in stats:
                stats[key] = HeadStats.empty(weights.size(1))
            start = done.get(name, 0)
            done[name] = start + weights.size(2)
            real = real_queries[side][:, start:done[name]]
            stats[key].add(weights, ~torch.isneginf(inputs[0]), real)
        return hook

    handles = [module.register_forward_hook(count(name)) for name, module in modules.items()]
    model.eval()
    try:
        for sample in batches:
            net_input = sample["net_input"]
            real_queries["encoder"] = net_input["src_tokens"].ne(model.encoder.dictionary.pad())
            targets = net_input["prev_output_tokens"]
            real_queries["decoder"] = targets.ne(model.decoder.dictionary.pad())
            done.clear()
            model(net_input["src_tokens"], net_input["src_lengths"], targets)
            for name, positions in done.items():
                if positions != real_queries[name.split(".")[0]].size(1):
                    raise RuntimeError(f"{name} normalised {positions} query positions of "
                                       "a batch, not one per position")
    finally:
        for handle in handles:
            handle.remove()
    for name, module in modules.items():
        if isinstance(module, EntmaxAlpha) and _location(name) in stats:
            stats[_location(name)].alphas = module.alpha().tolist()
    return dict(sorted(stats.items(), key=lambda item: (SITES.index(item[0][0]), item[0][1])))


def attention_statistics(model, batches: Iterable[dict]) -> Dict[str, SiteStats]:
    """Zero weights and learned alphas per site, every layer and head pooled."""
    sites: Dict[str, SiteStats] = defaultdict(SiteStats)
    for (site, _), stats in head_statistics(model, batches).items():
        sites[site].zeros += int(stats.zeros.sum())
        sites[site].allowed += int(stats.allowed.sum())
        sites[site].alphas.extend(stats.alphas or [])
    return dict(sites)
