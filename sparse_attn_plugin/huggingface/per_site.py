"""One normaliser per attention site of a transformers encoder-decoder
(:func:`use_sparse_attention`): the choices kept in the config, learned alphas held by the
attention modules, and the patches that rebuild them when a model is built or loaded."""

import json
from functools import lru_cache, wraps
from typing import Callable, Optional, Tuple, Union

import torch
from torch import Tensor

from ..errors import SettingsError
from ..normalizer_registry import DEFAULT, lookup
from ..normalizers.entmax_family import (
    EntmaxAlpha,
    parse_alpha_init,
)
from ..sites import SITES
from .functions import (
    KINDS,
    Fused,
    attend,
    attention_function,
    boolean_mask,
    transformers_interfaces,
)

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
    allowed = spec.keywords + ((LEARN_ALPHA,) if "alpha" in spec.keywords else ())
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
    return attend(alphas, choice["kind"], module, query, key, value, attention_mask, scaling,
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
    attention_interface, mask_interface, sdpa_mask = transformers_interfaces()
    from transformers import PreTrainedConfig, PreTrainedModel

    attention_interface.register(SITE_ATTENTION, site_attention)
    if mask_interface is not None:
        mask_interface.register(SITE_ATTENTION, boolean_mask(sdpa_mask))
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
