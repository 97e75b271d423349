"""The attention normalisers, one entry each: the table every list of them is derived from.

From :data:`SPECS` (one :class:`NormalizerSpec` each) come ``--attn-fn``'s names and checks
(``site_normalizers``), the library's ``NAMES``, ``COMPILED``, ``CONSTRAINED`` and
``build_normalizer``, ``huggingface.KINDS``, ``sparse_lstm.LSTM_NAMES`` and the
comparison's rows. A new normaliser is its class (``normalizers/``), its function
(``functional``), one entry here and its row in the docs' tables (tests/unit/test_registry.py).

Torch-free, as :mod:`.sites`: classes and functions are named (:class:`Lazy`) and imported
when first called, so that compare and results_index start without torch.
"""

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .errors import SettingsError
from .normalizer_options import keywords
from .sites import SITES

#: The normaliser of a site no flag sets.
DEFAULT = "softmax"
#: The model families whose attention takes a normaliser: sparse_transformer (every site)
#: and sparse_lstm (cross-attention).
TRANSFORMER, LSTM = "transformer", "lstm"
MODELS = (TRANSFORMER, LSTM)
#: The sites of a normaliser that fits cross-attention alone.
CROSS = ("decoder_cross",)


@dataclass(frozen=True)
class Lazy:
    """``attr`` of this package's module ``module``, imported when first called."""

    module: str
    attr: str

    def __call__(self, *args, **kwargs):
        return getattr(import_module(f"{__package__}.{self.module}"), self.attr)(*args, **kwargs)


@dataclass(frozen=True)
class NormalizerSpec:
    """One normaliser, by ``name``: what ``--attn-fn`` and the per-site flags take.

    ``normalizer`` is its module's class (or a :class:`Lazy` name of it), taking first the
    number of heads where ``per_head``, then the :class:`~.normalizers.NormalizerOptions`
    fields ``options`` names (:mod:`.normalizer_options`); ``function`` its function of a
    tensor (:mod:`.functional`), if any; ``transformers``, whether transformers models are
    offered it (their attention function passes on the :attr:`keywords` of its options);
    ``sites`` and ``models`` (:data:`MODELS`) where it may stand;
    ``constrained``, whether fertilities bound it, called as ``normalizer(scores, upper)``.
    """

    name: str
    normalizer: Callable[..., Any]
    options: Tuple[str, ...] = ()
    per_head: bool = False
    function: Optional[Callable[..., Any]] = None
    transformers: bool = False
    sites: Tuple[str, ...] = SITES
    models: Tuple[str, ...] = MODELS
    constrained: bool = False

    @property
    def keywords(self) -> Tuple[str, ...]:
        """Its options' names as its function and transformers' attention take them."""
        return keywords(self.options)

    @property
    def compiled(self) -> bool:
        """Whether it has compiled and Triton kernels: ``--attn-impl`` is one of its options."""
        return "attn_impl" in self.options

    def build(self, num_heads: int, options) -> Any:
        """Its module for an attention of ``num_heads`` heads, made with ``options``."""
        heads = (num_heads,) if self.per_head else ()
        return self.normalizer(*heads, *(getattr(options, name) for name in self.options))


_ENTMAX = "normalizers.entmax_family"


def _function(name: str) -> Lazy:
    return Lazy("functional", name)


#: Every normaliser by name, in the order tables and flags list them. Hard retrieval is
#: meant for the decoder (Xu et al. 2021): in encoder self-attention it is allowed but
#: hurts (their Table 3); it is a transformer method. Fertility bounds what each source
#: token receives, so the constrained ones fit cross-attention only.
SPECS: Dict[str, NormalizerSpec] = {spec.name: spec for spec in (
    NormalizerSpec("softmax", Lazy("normalizers.base", "Softmax"),
                   function=_function("softmax"), transformers=True),
    NormalizerSpec("topk", Lazy("normalizers.topk", "TopK"),
                   ("topk", "topk_train_only", "attn_impl"),
                   function=_function("topk_softmax"), transformers=True),
    NormalizerSpec("sparsemax", Lazy(_ENTMAX, "Sparsemax"), ("attn_impl",),
                   function=_function("sparsemax"), transformers=True),
    NormalizerSpec("entmax15", Lazy(_ENTMAX, "Entmax15"), ("attn_impl",),
                   function=_function("entmax15"), transformers=True),
    NormalizerSpec("entmax_alpha", Lazy(_ENTMAX, "EntmaxAlpha"),
                   ("entmax_alpha_init", "entmax_max_iter", "attn_impl"), per_head=True,
                   function=_function("entmax_alpha"),
                   transformers=True),
    NormalizerSpec("hard", Lazy("normalizers.hard", "HardRetrieval"), models=(TRANSFORMER,)),
    NormalizerSpec("csoftmax", Lazy("normalizers.constrained", "CSoftmax"),
                   function=_function("csoftmax"), sites=CROSS, constrained=True),
    NormalizerSpec("csparsemax", Lazy("normalizers.constrained", "CSparsemax"),
                   function=_function("csparsemax"), sites=CROSS, constrained=True),
)}


def names(model: Optional[str] = None, sites: Sequence[str] = (), **having) -> Tuple[str, ...]:
    """The names in :data:`SPECS` that ``model`` can use (any model's when None) at every
    site of ``sites``, and whose spec has each attribute of ``having`` at its value
    (``names(constrained=True)``), in the table's order."""
    return tuple(spec.name for spec in SPECS.values()
                 if (model is None or model in spec.models) and set(sites) <= set(spec.sites)
                 and all(getattr(spec, key) == value for key, value in having.items()))


def lookup(name: str, among: Optional[Sequence[str]] = None, where: str = "") -> NormalizerSpec:
    """The spec of normaliser ``name``: SettingsError (one line; ``where`` follows the name)
    if it is not one of ``among`` (every name in :data:`SPECS` by default)."""
    among = names() if among is None else tuple(among)
    if name not in among:
        raise SettingsError(f"unknown attention normaliser {name!r}{where}; choose from "
                            f"{', '.join(among)}")
    return SPECS[name]
