"""Decoding with the output normaliser a model was trained with (``--criterion
entmax_loss --loss-alpha A``, :mod:`..modules.output_normalizer`).

Our models read the criterion from their configuration, which fairseq saves with every
checkpoint: trained with ``entmax_loss``, a model's ``get_normalized_probs`` gives
``alpha-entmax(z)`` of the decoder's logits ``z``, or its log (``-inf`` exactly where a
token has probability 0), at training and at ``fairseq-generate`` with no flag there.
Trained with any other criterion it is fairseq's softmax, untouched.
"""

from ..modules.output_normalizer import output_entmax_of
from ..search.zero_probability import ZeroProbabilitySequenceGenerator


def with_output_entmax(model, args, task):
    """``model`` (an :class:`OutputEntmaxMixin`) with the output normaliser ``args`` (its
    configuration) ask for; what every one of our models' ``build_model`` returns. With
    one, ``task`` builds the beam search that finishes on exact zeros, whatever the task."""
    model.output_entmax = output_entmax_of(args)
    if model.output_entmax is not None:
        _search_on_zeros(task)
    return model


def _search_on_zeros(task) -> None:
    """``task.build_generator`` (this task object only) with
    :class:`ZeroProbabilitySequenceGenerator` as its default search class: fairseq's own
    dies at ``--max-len`` where EOS has probability 0."""
    build = task.build_generator
    if getattr(build, "finishes_on_zeros", False):
        return

    def build_generator(models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        return build(models, args, seq_gen_cls or ZeroProbabilitySequenceGenerator,
                     extra_gen_cls_kwargs, **kwargs)
    build_generator.finishes_on_zeros = True
    task.build_generator = build_generator


class OutputEntmaxMixin:
    """``get_normalized_probs`` by ``self.output_entmax`` where it is set (see the
    module); put it before the fairseq model class."""

    output_entmax = None

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        if self.output_entmax is None:
            return super().get_normalized_probs(net_output, log_probs, sample)
        logits = net_output[0].float()
        if log_probs:
            return self.output_entmax.log_normalize(logits)
        return self.output_entmax.normalize(logits)
