"""transformers' attention functions with our normalisers in place of softmax: what
:func:`register` puts in transformers' ``AttentionInterface`` (with the boolean mask), one
normaliser for every layer; on CUDA by the fused kernels where the call allows."""

from typing import Callable, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import functional as nnf

from ..errors import SettingsError
from ..extras import install_hint
from ..normalizer_options import all_options
from ..normalizer_registry import SPECS, lookup
from ..normalizers.base import check_impl
from ..normalizers.entmax_family import (
    check_alpha,
    in_newton_range,
)
from ..normalizers.fused_attention import KINDS as FUSED_KINDS
from ..normalizers.fused_attention import MAX_KEYS, fused_attention, fused_impl


def _kinds() -> Tuple[str, ...]:
    """The normalisers transformers is offered (their ``transformers`` entry in
    :mod:`.normalizer_registry`), in the registry's order."""
    return tuple(spec.name for spec in SPECS.values() if spec.transformers)


#: The normalisers an attention function can use (``kind``).
KINDS = _kinds()

NEG_INF = float("-inf")


def _fixed_alpha(alpha) -> Union[float, Tensor]:
    """``entmax_alpha``'s fixed alpha as its function takes it: a float, or one per head as
    a ``(1, H, 1, 1)`` tensor; ValueError, one line, unless every value is finite and > 0."""
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        return check_alpha(alpha)
    try:
        values = torch.as_tensor(alpha, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError):
        values = torch.empty(0)
    if values.dim() != 1 or values.numel() == 0:
        raise ValueError(f"entmax_alpha needs alpha a number or one per head, got {alpha!r}")
    return check_alpha(values).reshape(1, -1, 1, 1)


class Fused(NamedTuple):
    """How the fused kernels compute an attention function's attention: the ``kind`` and
    ``arguments`` of :func:`.fused_attention.fused_attention`, where ``impl`` takes them."""

    kind: str
    arguments: dict
    impl: str


def _weights_wanted(kwargs: dict) -> bool:
    """Whether this forward returns attention weights: transformers collects them
    (``output_attentions``) or was asked for them in ``kwargs``."""
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:
        collected = None
    else:
        collected = _active_collector.get()
    return bool(kwargs.get("output_attentions")) or bool(collected) and any(
        "attentions" in name for name in collected)


def _fused_output(fused: Fused, query: Tensor, key: Tensor, value: Tensor,
                  attention_mask: Optional[Tensor], scaling: float,
                  kwargs: dict) -> Optional[Tensor]:
    """The output ``(B, T, H, d)`` by the fused kernels, or None where they do not run:
    ``impl`` on the device does not take them, too many keys, the weights are wanted, or
    a mask other than a boolean one shared by the heads."""
    batch, _, len_q, _ = query.shape
    len_k = key.size(2)
    if (not fused_impl(fused.impl, query.is_cuda) or len_k > MAX_KEYS
            or _weights_wanted(kwargs)):
        return None
    hidden = None
    if attention_mask is not None:
        mask = attention_mask[..., :len_k]
        if mask.dtype != torch.bool or mask.dim() == 4 and mask.size(1) != 1:
            return None
        hidden = ~mask.reshape(-1, *mask.shape[-2:]).expand(batch, len_q, len_k)
    output = fused_attention(query, key, value, fused.kind, key_padding_mask=hidden,
                             scale=scaling, **fused.arguments)
    return output.transpose(1, 2).contiguous()


def keyword_options() -> dict:
    """The options an attention function takes, by keyword (:mod:`..normalizer_options`)."""
    return {option.keyword: option for option in all_options() if option.keyword}


def _checked(keyword: str, value):
    """``value`` as ``keyword``'s option checks it, once, before a normaliser's function
    is given it; but ``alpha``, which the functions take as the alpha itself (a number >
    0, or one per head), not as learned alpha's first value."""
    if keyword == "alpha":
        return _fixed_alpha(value)
    return keyword_options()[keyword].check(value, keyword)


def _normalizer(kind: str, options: dict
                ) -> Tuple[Callable[[Tensor], Tensor], Optional[Fused]]:
    """The weights over the last dim of ``(B, H, T, S)`` scores, by ``kind``'s function
    given the options it reads (:attr:`~..normalizer_registry.NormalizerSpec.keywords`),
    checked here, defaults where not given; and how the fused kernels compute the same
    attention (None: they do not)."""
    spec = lookup(kind, _kinds(), " for transformers")
    known = keyword_options()
    for keyword in options:
        if keyword not in known:
            raise SettingsError(f"{kind} attention takes no option {keyword!r}; the options "
                                f"are: {', '.join(known)}")
    given = {keyword: option.default for keyword, option in known.items()}
    given.update(options)
    impl = given["impl"]
    check_impl(impl)           # every kind's: it also says where triton cannot run
    passed = {keyword: _checked(keyword, given[keyword]) for keyword in spec.keywords}

    def normalize(scores: Tensor) -> Tensor:
        return spec.function(scores, **{
            option: value.to(scores.device) if isinstance(value, Tensor) else value
            for option, value in passed.items()})

    fused = None
    if kind == "topk":
        fused = Fused(kind, {"k_top": passed["k"]}, impl)
    elif kind == "entmax_alpha" and in_newton_range(passed["alpha"]):
        fused = Fused(kind, {"alpha": passed["alpha"], "max_iter": passed["n_iter"]}, impl)
    elif kind in FUSED_KINDS and kind != "entmax_alpha":
        fused = Fused(kind, {}, impl)
    return normalize, fused


def apply_mask(scores: Tensor, attention_mask: Optional[Tensor]) -> Tensor:
    """``scores`` with ``-inf`` where ``attention_mask`` hides a key: a boolean mask (True
    = attend) or an additive float mask (added; entries at or below the dtype's minimum,
    transformers' value for a masked key, become ``-inf``), sliced to the keys there are."""
    if attention_mask is None:
        return scores
    mask = attention_mask[..., : scores.size(-1)]
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, NEG_INF)
    return (scores + mask).masked_fill(mask <= torch.finfo(mask.dtype).min, NEG_INF)


def _repeat_kv(states: Tensor, groups: int) -> Tensor:
    """transformers' ``repeat_kv``: ``(B, H_kv, S, d)`` -> ``(B, H_kv * groups, S, d)``, each
    key/value head repeated for the ``groups`` query heads that share it."""
    if groups == 1:
        return states
    batch, heads, length, dim = states.shape
    return states[:, :, None].expand(batch, heads, groups, length, dim).reshape(
        batch, heads * groups, length, dim)


def attend(normalize: Callable[[Tensor], Tensor], kind: str, module: torch.nn.Module,
           query: Tensor, key: Tensor, value: Tensor, attention_mask: Optional[Tensor],
           scaling: Optional[float], dropout: float, kwargs: dict,
           fused: Optional[Fused] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """What eager attention computes, with ``normalize`` in place of its softmax (the body
    of :func:`attention_function`'s functions; ``kind`` names it in errors); by the fused
    kernels, with no weights returned, where ``fused`` and :func:`_fused_output` allow."""
    if kwargs.get("s_aux") is not None:
        raise ValueError(f"attention sinks (s_aux) are not supported by the {kind!r} "
                         "attention of sparse_attn_plugin")
    if query.size(1) % key.size(1):
        raise ValueError(f"{query.size(1)} query heads cannot share {key.size(1)} "
                         "key/value heads")
    groups = query.size(1) // key.size(1)
    key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    softcap = kwargs.get("softcap")
    is_causal = kwargs.get("is_causal")
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    if attention_mask is None and is_causal and query.size(2) > 1:
        # as sdpa's is_causal: query i sees keys 0..i (upper-left aligned)
        attention_mask = torch.ones(query.size(2), key.size(2), dtype=torch.bool,
                                    device=query.device).tril()
    if fused is not None and not (softcap is not None or kwargs.get("position_bias") is not None
                                  or dropout and module.training):
        output = _fused_output(fused, query, key, value, attention_mask, scaling, kwargs)
        if output is not None:
            return output, None
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if kwargs.get("position_bias") is not None:
        scores = scores + kwargs["position_bias"]
    weights = normalize(apply_mask(scores, attention_mask)).to(query.dtype)
    weights = nnf.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def attention_function(kind: str, **options) -> Callable:
    """An attention function in transformers' ``AttentionInterface`` form, normalising with
    ``kind`` (one of :data:`KINDS`; ``softmax`` is eager's but for all-zero rows where every
    key is masked), with the ``options`` of :func:`keyword_options` it reads (their
    defaults otherwise): ``k`` keys kept by ``topk``, ``entmax_alpha``'s fixed ``alpha`` > 0
    (or one per query head) and iteration cap ``n_iter``, computed as ``impl`` says
    (:mod:`sparse_attn_plugin.functional`).

    It is ``fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
    **kwargs) -> (output (B, T, H, d), weights (B, H, T, S))`` for ``query`` ``(B, H, T, d)``
    and ``key``/``value`` ``(B, H_kv, S, d)``, ``H`` a multiple of ``H_kv``. ``kwargs`` may
    hold ``is_causal``, ``softcap`` and ``position_bias``, as transformers' own functions
    read them; attention sinks (``s_aux``) are refused.
    """
    normalize, fused = _normalizer(kind, options)

    def attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                  attention_mask: Optional[Tensor], scaling: Optional[float] = None,
                  dropout: float = 0.0, **kwargs) -> Tuple[Tensor, Optional[Tensor]]:
        return attend(normalize, kind, module, query, key, value, attention_mask, scaling,
                      dropout, kwargs, fused)

    attention.__name__ = attention.__qualname__ = f"{kind}_attention_forward"
    return attention


def transformers_interfaces():
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ImportError("sparse_attn_plugin.huggingface.register "
                          f"{install_hint(('hf',))}") from None
    from transformers import AttentionInterface
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # before 4.53: models build their own (float) masks
        AttentionMaskInterface = sdpa_mask = None
    return AttentionInterface, AttentionMaskInterface, sdpa_mask


def register(kind: str, name: Optional[str] = None, **options) -> str:
    """Register the attention function of ``kind`` (:func:`attention_function`, with its
    ``options``: ``k``, ``alpha``, ``n_iter``, ``impl``) with transformers, under ``name``
    (``kind`` by default; e.g. ``register("topk", "topk4", k=4)``), and a boolean mask
    function under the same name. A model then uses it with
    ``attn_implementation=name``, or ``model.set_attn_implementation(name)``. Returns
    ``name``. Registering a name again replaces its function."""
    attention_interface, mask_interface, sdpa_mask = transformers_interfaces()
    function = attention_function(kind, **options)
    name = kind if name is None else name
    attention_interface.register(name, function)
    if mask_interface is not None:
        mask_interface.register(name, boolean_mask(sdpa_mask))
    return name


def register_all(**options) -> Tuple[str, ...]:
    """:func:`register` every kind of :data:`KINDS` under its own name, with ``options``
    (``k`` for topk, ``alpha`` and ``n_iter`` for entmax_alpha, ``impl`` for all)."""
    return tuple(register(kind, **{key: value for key, value in options.items()
                                   if key == "impl" or key in SPECS[kind].keywords})
                 for kind in _kinds())


def boolean_mask(sdpa_mask):
    """transformers' boolean mask, never skipped as "causal" (which sdpa alone can rely
    on through ``is_causal``): as its ``eager_mask`` asks it, without the cast to float."""
    def boolean_mask(*args, **kwargs):
        kwargs.pop("allow_is_causal_skip", None)
        return sdpa_mask(*args, allow_is_causal_skip=False, **kwargs)
    return boolean_mask
