"""Decoding with the output normaliser a model was trained with (``--criterion
entmax_loss --loss-alpha A``, :mod:`..criterions.entmax_loss`).

Our models read the criterion from their configuration, which fairseq saves with every
checkpoint: trained with ``entmax_loss``, a model's ``get_normalized_probs`` gives
``alpha-entmax(z)`` of the decoder's logits ``z``, or its log (``-inf`` exactly where a
token has probability 0), at training and at ``fairseq-generate`` with no flag there.
Trained with any other criterion it is fairseq's softmax, untouched.
"""

from ..criterions.entmax_loss import output_entmax_of


def with_output_entmax(model, args):
    """``model`` (an :class:`OutputEntmaxMixin`) with the output normaliser ``args`` (its
    configuration) ask for; what every one of our models' ``build_model`` returns."""
    model.output_entmax = output_entmax_of(args)
    return model


class OutputEntmaxMixin:
    """``get_normalized_probs`` by ``self.output_entmax`` where it is set (see the
    module); put it before the fairseq model class."""

    output_entmax = None

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        if self.output_entmax is None:
            return super().get_normalized_probs(net_output, log_probs, sample)
        probs = self.output_entmax.normalize(net_output[0].float())
        return probs.log() if log_probs else probs
