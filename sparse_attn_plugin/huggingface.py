"""Our normalisers as attention functions of Hugging Face transformers models.

transformers (4.48 and later) calls, in each attention layer of a model built with
``attn_implementation=NAME``, the function its ``AttentionInterface`` holds as ``NAME``.
:func:`register` adds ours, one normaliser for every layer, with transformers' boolean mask
under the same name. Each computes what transformers' ``eager_attention_forward`` does,
with the softmax replaced by a normaliser of :mod:`sparse_attn_plugin.functional` (the code
the fairseq plugin runs); a query with every key masked gets all-zero weights.
:func:`use_sparse_attention` gives each site of an encoder-decoder (:data:`~.sites.SITES`)
its own normaliser, ``entmax_alpha`` with alpha learned per head if asked, kept in the
config so that ``save_pretrained`` / ``from_pretrained`` keep it. Usage, masks and every
difference from eager: docs/library.md, "Hugging Face transformers".

transformers is imported only by :func:`register` and :func:`register_sites` (which runs on
import when transformers was imported first), so this module imports without it.
Tested with transformers 5.24.
"""

import json
import sys
from functools import lru_cache, wraps
from typing import Callable, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch.nn import functional as nnf

from .errors import SettingsError
from .extras import install_hint
from .normalizer_registry import DEFAULT, SPECS, lookup
from .normalizers.base import check_impl
from .normalizers.entmax_family import (
    EntmaxAlpha,
    check_alpha,
    check_n_iter,
    in_newton_range,
    parse_alpha_init,
)
from .normalizers.fused_attention import KINDS as FUSED_KINDS
from .normalizers.fused_attention import MAX_KEYS, fused_attention, fused_impl
from .normalizers.topk import check_k
from .sites import SITES


def _kinds() -> Tuple[str, ...]:
    """The normalisers transformers is offered (their ``huggingface`` entry in
    :mod:`.normalizer_registry`), in the registry's order."""
    return tuple(spec.name for spec in SPECS.values() if spec.huggingface is not None)


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


#: How each option is checked, once, before a normaliser's function is given it (as the
#: modules check theirs); ``impl`` is checked for every kind.
_CHECKS = {"k": check_k, "n_iter": check_n_iter, "alpha": _fixed_alpha}


def _normalizer(kind: str, k: int, alpha, n_iter: int, impl: str
                ) -> Tuple[Callable[[Tensor], Tensor], Optional[Fused]]:
    """The weights over the last dim of ``(B, H, T, S)`` scores, by ``kind``'s function
    given the options its registry entry names (``huggingface``), checked here; and how
    the fused kernels compute the same attention (None: they do not)."""
    spec = lookup(kind, _kinds(), " for transformers")
    check_impl(impl)
    given = {"k": k, "alpha": alpha, "n_iter": n_iter, "impl": impl}
    passed = {option: _CHECKS.get(option, _as_given)(given[option])
              for option in spec.huggingface}

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


def _as_given(value):
    return value


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


def _attend(normalize: Callable[[Tensor], Tensor], kind: str, module: torch.nn.Module,
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


def attention_function(kind: str, *, k: int = 8, alpha: Union[float, Sequence[float], Tensor] = 1.5,
                       n_iter: int = 30, impl: str = "auto") -> Callable:
    """An attention function in transformers' ``AttentionInterface`` form, normalising with
    ``kind`` (one of :data:`KINDS`; ``softmax`` is eager's but for all-zero rows where every
    key is masked), ``k`` keys kept by ``topk``, ``entmax_alpha``'s fixed ``alpha`` > 0
    (or one per query head) and iteration cap ``n_iter``, computed as ``impl`` says
    (:mod:`sparse_attn_plugin.functional`).

    It is ``fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
    **kwargs) -> (output (B, T, H, d), weights (B, H, T, S))`` for ``query`` ``(B, H, T, d)``
    and ``key``/``value`` ``(B, H_kv, S, d)``, ``H`` a multiple of ``H_kv``. ``kwargs`` may
    hold ``is_causal``, ``softcap`` and ``position_bias``, as transformers' own functions
    read them; attention sinks (``s_aux``) are refused.
    """
    normalize, fused = _normalizer(kind, k, alpha, n_iter, impl)

    def attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                  attention_mask: Optional[Tensor], scaling: Optional[float] = None,
                  dropout: float = 0.0, **kwargs) -> Tuple[Tensor, Optional[Tensor]]:
        return _attend(normalize, kind, module, query, key, value, attention_mask, scaling,
                       dropout, kwargs, fused)

    attention.__name__ = attention.__qualname__ = f"{kind}_attention_forward"
    return attention


def _transformers():
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
    attention_interface, mask_interface, sdpa_mask = _transformers()
    function = attention_function(kind, **options)
    name = kind if name is None else name
    attention_interface.register(name, function)
    if mask_interface is not None:
        mask_interface.register(name, _boolean_mask(sdpa_mask))
    return name


def register_all(**options) -> Tuple[str, ...]:
    """:func:`register` every kind of :data:`KINDS` under its own name, with ``options``
    (``k`` for topk, ``alpha`` and ``n_iter`` for entmax_alpha, ``impl`` for all)."""
    return tuple(register(kind, **{key: value for key, value in options.items()
                                   if key == "impl" or key in SPECS[kind].huggingface})
                 for kind in _kinds())


def _boolean_mask(sdpa_mask):
    """transformers' boolean mask, never skipped as "causal" (which sdpa alone can rely
    on through ``is_causal``): as its ``eager_mask`` asks it, without the cast to float."""
    def boolean_mask(*args, **kwargs):
        kwargs.pop("allow_is_causal_skip", None)
        return sdpa_mask(*args, allow_is_causal_skip=False, **kwargs)
    return boolean_mask


# --- one normaliser per site of an encoder-decoder ---------------------------------

#: The name under which :func:`use_sparse_attention` registers its attention (and mask)
#: with transformers, and which a model's config then names as its attention.
SITE_ATTENTION = "sparse_attn_sites"
#: The config attribute (saved in config.json) holding each site's choice.
CONFIG_KEY = "sparse_attention"
#: The submodule of an attention module that holds its learned alphas.
ALPHA_MODULE = "sparse_attn_alpha"
#: The option of a site choice that asks for alpha to be learned.
LEARN_ALPHA = "learn_alpha"

ENCODER_SELF, DECODER_SELF, DECODER_CROSS = SITES


class LearnedAlpha(EntmaxAlpha):
    """:class:`EntmaxAlpha`, one alpha per head learned as ``clamp(1 + sigmoid(z), 1.01,
    2)`` with ``z`` float32 (Correia et al. 2019), held by a transformers attention module;
    it remembers ``alpha_init`` to start again where a checkpoint lacks its ``z``."""

    def __init__(self, num_heads: int, alpha_init: Union[float, str] = 1.5, n_iter: int = 30,
                 impl: str = "auto"):
        super().__init__(num_heads, alpha_init, n_iter, impl)
        self.alpha_init = alpha_init

    def initialize(self) -> None:
        """``z`` as a new module's, unless transformers loaded it (its init skips those)."""
        from transformers import initialization

        fresh = EntmaxAlpha(self.alpha_logit.numel(), self.alpha_init).alpha_logit
        initialization.copy_(self.alpha_logit, fresh.to(self.alpha_logit.device))


def site_of(module: torch.nn.Module) -> str:
    """The site (:data:`~.sites.SITES`) of a transformers attention module, from what it
    says of itself: not ``is_decoder``, encoder self-attention; ``is_decoder`` and
    ``is_causal``, decoder self-attention; ``is_decoder`` alone, cross-attention."""
    try:
        decoder, causal = module.is_decoder, module.is_causal
    except AttributeError:
        raise SettingsError(
            f"{type(module).__name__} does not say which attention site it is (is_decoder, "
            "is_causal); per-site attention supports encoder-decoders such as Marian, BART "
            "and T5") from None
    return DECODER_SELF if decoder and causal else DECODER_CROSS if decoder else ENCODER_SELF


def _attention_modules(model: torch.nn.Module):
    """``(module, site)`` for each attention module of ``model`` that says its site."""
    return [(module, site_of(module)) for module in model.modules()
            if hasattr(module, "is_decoder") and hasattr(module, "is_causal")]


def _jsonable(value):
    """An option as config.json keeps it: tensors and tuples as lists of numbers."""
    if isinstance(value, Tensor):
        value = value.tolist()
    return list(value) if isinstance(value, (tuple, list)) else value


def site_choice(site: str, choice) -> dict:
    """``choice`` for ``site`` as a config keeps it, checked: a normaliser name of
    :data:`KINDS`, or a dict of ``kind`` and the options its registry entry lets
    transformers pass (``k``, ``alpha``, ``n_iter``, ``impl``), with ``learn_alpha=True``
    for ``entmax_alpha`` to learn alpha per head from ``alpha`` (then its first value, in
    [1.01, 2)). SettingsError (a ValueError), one line, for anything else."""
    if isinstance(choice, str):
        choice = {"kind": choice}
    if not isinstance(choice, dict):
        raise SettingsError(f"{site}: give a normaliser name or a dict of 'kind' and its "
                            f"options, got {choice!r}")
    options = dict(choice)
    kind = options.pop("kind", None)
    spec = lookup(kind, KINDS, f" for {site} attention")
    allowed = spec.huggingface + ((LEARN_ALPHA,) if "alpha" in spec.huggingface else ())
    for option in options:
        if option not in allowed:
            raise SettingsError(f"{site}: {kind} takes no option {option!r}; it takes: "
                                f"{', '.join(allowed) or 'none'}")
    learn = options.pop(LEARN_ALPHA, False)
    if not isinstance(learn, bool):
        raise SettingsError(f"{site}: {LEARN_ALPHA} must be True or False, got {learn!r}")
    if learn:
        first = parse_alpha_init(options.get("alpha", 1.5),
                                 f"{site}: learned alpha's first value")
        LearnedAlpha(1, first, **{name: value for name, value in options.items()
                                  if name != "alpha"})
    else:
        attention_function(kind, **options)
    stored = {"kind": kind, **{name: _jsonable(value) for name, value in options.items()}}
    return {**stored, LEARN_ALPHA: True} if learn else stored


@lru_cache(maxsize=None)
def _stored_attention(choice: str) -> Callable:
    """The attention function of a site choice kept as JSON text (sorted keys)."""
    return attention_function(**json.loads(choice))


def site_attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                   attention_mask: Optional[Tensor], scaling: Optional[float] = None,
                   dropout: float = 0.0, **kwargs) -> Tuple[Tensor, Tensor]:
    """The attention function :func:`use_sparse_attention` registers: in ``module``, of
    site :func:`site_of`, the normaliser its config's ``sparse_attention`` chooses for that
    site (learned alpha: the module's :class:`LearnedAlpha`), else as
    :func:`attention_function`'s."""
    site = site_of(module)
    choices = getattr(getattr(module, "config", None), CONFIG_KEY, None)
    if not isinstance(choices, dict) or site not in choices:
        raise SettingsError(f"{type(module).__name__}'s config chooses no normaliser for "
                            f"{site} attention: call use_sparse_attention on the model")
    choice = choices[site]
    if not choice.get(LEARN_ALPHA):
        return _stored_attention(json.dumps(choice, sort_keys=True))(
            module, query, key, value, attention_mask, scaling, dropout, **kwargs)
    alphas = getattr(module, ALPHA_MODULE, None)
    if alphas is None:
        raise SettingsError(f"{site} attention learns alpha but {type(module).__name__} "
                            "holds none: call use_sparse_attention on the model")
    kind, arguments = alphas.fused_kind()
    return _attend(alphas, choice["kind"], module, query, key, value, attention_mask, scaling,
                   dropout, kwargs, Fused(kind, arguments, alphas.impl))


def _attach_alphas(model: torch.nn.Module) -> None:
    """A :class:`LearnedAlpha` in each attention module of ``model`` whose site learns
    alpha by its config (kept where it is there), none in the others."""
    for module, site in _attention_modules(model):
        choice = getattr(getattr(module, "config", None), CONFIG_KEY, None) or {}
        choice = choice.get(site, {})
        if not choice.get(LEARN_ALPHA):
            if ALPHA_MODULE in module._modules:
                delattr(module, ALPHA_MODULE)
            continue
        heads = getattr(module, "num_heads", None) or getattr(module, "n_heads", None)
        if not isinstance(heads, int):
            raise SettingsError(f"{type(module).__name__} does not say its number of heads "
                                "(num_heads, n_heads), which learned alpha needs")
        options = {"alpha_init": choice.get("alpha", 1.5), "n_iter": choice.get("n_iter", 30),
                   "impl": choice.get("impl", "auto")}
        held = module._modules.get(ALPHA_MODULE)
        if held is not None and held.alpha_logit.numel() == heads:   # keep what it learned
            held.alpha_init, held.n_iter = options["alpha_init"], options["n_iter"]
            held.impl = options["impl"]
            continue
        alphas = LearnedAlpha(heads, **options)
        weight = next(module.parameters(), None)
        module.add_module(ALPHA_MODULE, alphas if weight is None else alphas.to(weight.device))


def use_sparse_attention(target, **sites):
    """Give each attention site of a transformers encoder-decoder (``target``: a model,
    or a config to build one from) its own normaliser, and return ``target``.

    ``sites`` maps a site of :data:`~.sites.SITES` (``encoder_self``, ``decoder_self``,
    ``decoder_cross``) to a normaliser of :data:`KINDS` or a dict of ``kind`` and options
    (:func:`site_choice`), e.g. ``decoder_cross={"kind": "entmax_alpha", "learn_alpha":
    True}``; a site not named gets softmax (transformers' eager attention). The choice is
    kept in the config (``config.sparse_attention``, saved in config.json with the
    attention's name), so that ``from_pretrained`` of a saved model rebuilds it, its learned
    alphas included, in a process that has imported this module after transformers or
    called :func:`register_sites`. A site that learns alpha gets a :class:`LearnedAlpha` in
    each of its attention modules (a model's now; a config's when the model is built).
    Supported: models whose attention modules go through transformers' attention interface
    and say ``is_decoder`` and ``is_causal`` (Marian, BART, T5 tested; mBART, M2M100/NLLB,
    Pegasus, Blenderbot share their attention).
    """
    for site in sites:
        if site not in SITES:
            raise SettingsError(f"unknown attention site {site!r}; choose from "
                                f"{', '.join(SITES)}")
    choices = {site: site_choice(site, sites.get(site, DEFAULT)) for site in SITES}
    pretrained_config, pretrained_model = register_sites()
    if isinstance(target, pretrained_model):
        if not _attention_modules(target):
            raise SettingsError(f"{type(target).__name__} has no attention module that says "
                                "its site (is_decoder, is_causal); per-site attention supports "
                                "encoder-decoders such as Marian, BART and T5")
        configs = [target.config] + [getattr(module, "config", None)
                                     for module in target.modules()]
    elif isinstance(target, pretrained_config):
        configs = [target]
    else:
        raise SettingsError(f"use_sparse_attention takes a transformers model or config, "
                            f"got {type(target).__name__}")
    for config in {id(config): config for config in configs
                   if isinstance(config, pretrained_config)}.values():
        setattr(config, CONFIG_KEY, {site: dict(choice) for site, choice in choices.items()})
        config.attn_implementation = SITE_ATTENTION     # what config.json will say
        config._attn_implementation = SITE_ATTENTION
    if isinstance(target, pretrained_model):
        _attach_alphas(target)
    return target


def register_sites():
    """Register :func:`site_attention` with transformers as :data:`SITE_ATTENTION`, with
    the boolean mask, and make every transformers model whose config holds a per-site
    choice build its learned alphas before its weights load (and initialise those a
    checkpoint lacks). Idempotent; returns transformers' config and model base classes."""
    attention_interface, mask_interface, sdpa_mask = _transformers()
    from transformers import PreTrainedConfig, PreTrainedModel

    attention_interface.register(SITE_ATTENTION, site_attention)
    if mask_interface is not None:
        mask_interface.register(SITE_ATTENTION, _boolean_mask(sdpa_mask))
    if not getattr(PreTrainedModel.post_init, "sparse_attn", False):
        PreTrainedModel.post_init = _after(PreTrainedModel.post_init, _post_init)
        PreTrainedModel._initialize_weights = _before(PreTrainedModel._initialize_weights,
                                                      _initialize)
    return PreTrainedConfig, PreTrainedModel


def _post_init(model) -> None:
    """After a transformers model is built: its learned alphas, where its config asks."""
    if isinstance(getattr(model.config, CONFIG_KEY, None), dict):
        _attach_alphas(model)
        if model.config._attn_implementation == SITE_ATTENTION:
            model.config.attn_implementation = SITE_ATTENTION


def _initialize(model, module, *args, **kwargs) -> None:
    """Before transformers initialises ``module`` (weights a checkpoint lacks): a learned
    alpha starts at its ``alpha_init``."""
    if isinstance(module, LearnedAlpha) and not getattr(module, "_is_hf_initialized", False):
        module.initialize()


def _after(method, hook):
    """``method`` followed by ``hook(self)``."""
    def patched(self, *args, **kwargs):
        result = method(self, *args, **kwargs)
        hook(self)
        return result
    patched = wraps(method)(patched)
    patched.sparse_attn = True
    return patched


def _before(method, hook):
    """``method`` preceded by ``hook`` with its arguments."""
    def patched(self, *args, **kwargs):
        hook(self, *args, **kwargs)
        return method(self, *args, **kwargs)
    patched = wraps(method)(patched)
    patched.sparse_attn = True
    return patched


if sys.modules.get("transformers") is not None:   # imported after transformers
    register_sites()
