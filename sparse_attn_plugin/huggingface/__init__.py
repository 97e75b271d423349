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

import sys

from .functions import KINDS, apply_mask, attention_function, register, register_all
from .per_site import (
    ALPHA_MODULE,
    CONFIG_KEY,
    LEARN_ALPHA,
    SITE_ATTENTION,
    LearnedAlpha,
    register_sites,
    site_attention,
    site_choice,
    site_of,
    use_sparse_attention,
)

__all__ = ["ALPHA_MODULE", "CONFIG_KEY", "KINDS", "LEARN_ALPHA", "SITE_ATTENTION",
           "LearnedAlpha", "apply_mask", "attention_function", "register", "register_all",
           "register_sites", "site_attention", "site_choice", "site_of",
           "use_sparse_attention"]

if sys.modules.get("transformers") is not None:   # imported after transformers
    register_sites()
