"""Per-site attention statistics of a trained model, measured under teacher forcing.

Sparsity is the fraction of attention weights that are exactly zero among the
keys the masks allow, over the queries at real (non-padding) positions; masked
keys are zero for every normaliser and are not counted. Learned alphas are read from alpha-entmax
normalisers, one per head.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List

import torch

from ..normalizers import EntmaxAlpha

_SITE_OF = {"self_attn": "self", "encoder_attn": "cross"}


def site_of(module_name: str) -> str:
    """``encoder.layers.0.self_attn.normalizer`` -> ``encoder_self``."""
    parts = module_name.split(".")
    return f"{parts[0]}_{_SITE_OF[parts[-2]]}"


@dataclass
class SiteStats:
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
        if isinstance(module, EntmaxAlpha):
            found[site_of(name)].extend(module.alpha().tolist())
    return dict(found)


@torch.no_grad()
def attention_statistics(model, batches: Iterable[dict]) -> Dict[str, SiteStats]:
    """Run the model (eval mode) on fairseq batches and count zero weights per site."""
    stats: Dict[str, SiteStats] = defaultdict(SiteStats)
    real_queries = {}  # "encoder" / "decoder" -> (B, T) mask of the current batch

    def count(site):
        def hook(module, inputs, weights):
            rows = real_queries[site.split("_")[0]][:, None, :, None]
            allowed = ~torch.isneginf(inputs[0]) & rows
            stats[site].zeros += int(((weights == 0) & allowed).sum())
            stats[site].allowed += int(allowed.sum())
        return hook

    handles = [module.register_forward_hook(count(site_of(name)))
               for name, module in model.named_modules() if name.endswith(".normalizer")]
    model.eval()
    try:
        for sample in batches:
            net_input = sample["net_input"]
            real_queries["encoder"] = net_input["src_tokens"].ne(model.encoder.padding_idx)
            targets = net_input["prev_output_tokens"]
            real_queries["decoder"] = targets.ne(model.decoder.padding_idx)
            model(net_input["src_tokens"], net_input["src_lengths"],
                  net_input["prev_output_tokens"])
    finally:
        for handle in handles:
            handle.remove()
    for site, alphas in learned_alphas(model).items():
        stats[site].alphas = alphas
    return dict(stats)
