"""A checkpoint decoded with other attention than it was trained with.

``fairseq-generate --model-overrides "{'attn_fn': 'softmax'}"`` (or a per-site key, or
``sparse-attn-compare --decode-with``) builds the model with the new attention and loads
the checkpoint into it. The parameters that only the training-time attention has are
dropped: learned alphas (``entmax_alpha``) and the encoder's fertility predictor
(csoftmax and csparsemax with PREDICTED fertilities). The ones only the new attention has
are initialised as at the start of training. Both are logged as warnings.
"""

import logging

logger = logging.getLogger(__name__)

#: Where an attention's own parameters sit: a normaliser's, and the encoder's fertility
#: module's.
NORMALIZER_KEY = ".normalizer."
FERTILITY_PREFIX = "encoder.fertility."


def belongs_to_attention(key: str) -> bool:
    """Whether parameter ``key`` is one of an attention choice's own (see the module)."""
    return NORMALIZER_KEY in key or key.startswith(FERTILITY_PREFIX)


class AttentionSwitchMixin:
    """Loads a checkpoint whose attention differs from the model's (see the module);
    put it before the fairseq model class."""

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        own = {k: v for k, v in self.state_dict().items() if belongs_to_attention(k)}
        unused = [k for k in state_dict if belongs_to_attention(k) and k not in own]
        missing = [k for k in own if k not in state_dict]
        if unused or missing:
            state_dict = {k: v for k, v in state_dict.items() if k not in unused}
            state_dict.update({k: own[k] for k in missing})
            for key in unused:
                logger.warning("checkpoint parameter %s is unused by this attention: dropped",
                               key)
            for key in missing:
                logger.warning("attention parameter %s is not in the checkpoint: initialised",
                               key)
        return super().load_state_dict(state_dict, strict, model_cfg, args)
