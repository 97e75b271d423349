"""One sentence's attention, teacher-forced on its reference: the weights a site and
layer of a trained model give, with the tokens of their queries and keys.

The models' attention modules are found by name (see :mod:`.attention_stats`), read
through a forward hook, and left unchanged.
"""

import torch

from ..errors import SparseAttnError
from .attention_stats import layer_of, reads_attention, site_of


class AnalysisError(SparseAttnError, ValueError):
    """Input the analysis cannot use; the message is one line."""


def dataset(task, subset: str):
    """The ``subset`` split of ``task``'s data, loaded."""
    try:
        task.load_dataset(subset)
    except FileNotFoundError as err:
        raise AnalysisError(f"no {subset} split in the data directory ({err})") from None
    return task.dataset(subset)


@torch.no_grad()
def sentence_attention(model, task, subset: str, index: int, site: str, layer: int,
                       head: str):
    """One sentence's attention weights ``(T, S)`` at a site and layer (negative: from the
    last; a head, or the mean of the heads), teacher-forced: ``(weights, query tokens,
    key tokens, the layer's index from 0)``. A decoder query is named by the token it
    predicts (the reference token at its position; its input is the one before), a
    decoder self-attention key by the input token; a model's sink is the last source key
    (see SourceLayout)."""
    data = dataset(task, subset)
    if not 0 <= index < len(data):
        raise AnalysisError(f"--sentence {index}: the {subset} split has {len(data)} sentences")
    sample = data.collater([data[index]])
    wanted = [name for name, _ in model.named_modules()
              if reads_attention(name) and site_of(name) == site]
    if not wanted:
        raise AnalysisError(f"the model has no {site} attention to show")
    layers = sorted({layer_of(name) for name in wanted})
    chosen = layers[layer] if -len(layers) <= layer < len(layers) else None
    if chosen is None:
        raise AnalysisError(f"--layer {layer}: {site} has layers 0-{len(layers) - 1}")
    module = dict(model.named_modules())[next(n for n in wanted if layer_of(n) == chosen)]
    captured = []
    handle = module.register_forward_hook(lambda m, i, weights: captured.append(weights))
    try:
        net = sample["net_input"]
        model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])
    finally:
        handle.remove()
    weights = torch.cat(captured, dim=2)[0]    # (H, T, S): one call, or one per decoder step
    if head == "mean":
        weights = weights.mean(0)
    elif head.isdigit() and int(head) < weights.size(0):
        weights = weights[int(head)]
    else:
        raise AnalysisError(f"--head {head}: 'mean' or a head 0-{weights.size(0) - 1}")
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    source = [src_dict[t] for t in net["src_tokens"][0].tolist()]
    previous = [tgt_dict[t] for t in net["prev_output_tokens"][0].tolist()]
    predicted = [tgt_dict[t] for t in sample["target"][0].tolist()]
    queries = source if site == "encoder_self" else predicted
    keys = previous if site == "decoder_self" else source
    if site == "decoder_cross" and weights.size(-1) == len(keys) + 1:
        keys = [*keys, "<sink>"]
    return weights.float(), queries, keys, chosen
