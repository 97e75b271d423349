"""``sparse_lstm``: the BiLSTM encoder-decoder of Malaviya et al. (2018) with sparse and
constrained attention (``--attn-fn csparsemax --sink-token --exhaustion-c 0.2``)."""

import logging

from fairseq.models import (
    FairseqEncoderDecoderModel,
    register_model,
    register_model_architecture,
)

from ..modules.bounded_attention import BoundedAttention
from ..modules.lstm import COVERAGE_FORMS, SparseLSTMDecoder, SparseLSTMEncoder
from ..normalizer_registry import LSTM, names
from ..site_normalizers import (
    build_site_normalizer,
    cross_attention_constrained,
    site_normalizer_name,
)
from .argument_names import warn_unknown_arguments
from .attention_args import add_attention_args, log_attention_choice, set_attention_defaults
from .attention_switch import AttentionSwitchMixin
from .fertility_args import (
    FertilityPredictorMixin,
    add_fertility_args,
    build_fertility,
    check_constrained_model,
    set_fertility_defaults,
)
from .flag_checks import check_choice
from .output_entmax import OutputEntmaxMixin, output_entmax_of, with_output_entmax

logger = logging.getLogger(__name__)

#: Normalisers the LSTM's attention can use (the registry's, less the transformer's alone).
LSTM_NAMES = names(LSTM)
#: The LSTM's one attention: the decoder's over the source.
LSTM_SITES = ("decoder_cross",)


@register_model("sparse_lstm")
class SparseLSTMModel(AttentionSwitchMixin, FertilityPredictorMixin, OutputEntmaxMixin,
                      FairseqEncoderDecoderModel):
    """BiLSTM encoder, input-feeding LSTM decoder, bilinear attention with any of
    softmax, top-k, sparsemax, 1.5-entmax, learned alpha-entmax (one alpha: one head),
    csoftmax or csparsemax, fertilities, sink and coverage."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--encoder-embed-dim", type=int, metavar="N")
        parser.add_argument("--encoder-hidden-size", type=int, metavar="N",
                            help="both directions together")
        parser.add_argument("--encoder-layers", type=int, metavar="N")
        parser.add_argument("--decoder-embed-dim", type=int, metavar="N")
        parser.add_argument("--decoder-hidden-size", type=int, metavar="N")
        parser.add_argument("--decoder-layers", type=int, metavar="N")
        parser.add_argument("--dropout", type=float, metavar="P")
        parser.add_argument("--share-decoder-input-output-embed", action="store_true")
        add_attention_args(parser, LSTM, LSTM_SITES)
        parser.add_argument("--coverage-vector", action="store_true",
                            help="add a coverage vector term to the scores (Tu et al. 2016)")
        parser.add_argument("--coverage-vector-form", metavar="FORM",
                            help="with --coverage-vector: 'paper' adds beta_{t-1,j} s_t^T v "
                                 "(the paper's text; default), 'reference' adds "
                                 "beta_{t-1,j} v^T h_j (the authors' code)")
        add_fertility_args(parser)

    @classmethod
    def build_model(cls, args, task):
        warn_unknown_arguments(args, cls)
        sparse_lstm(args)
        log_attention_choice(args, LSTM_SITES)
        return with_output_entmax(cls._build(args, task), args, task)

    @classmethod
    def _build(cls, args, task):
        constrained = cross_attention_constrained(args)
        if args.coverage_vector_form != "paper" and not args.coverage_vector:
            logger.warning("--coverage-vector-form %s has no effect without --coverage-vector",
                           args.coverage_vector_form)
        if not constrained and (args.exhaustion_c or args.fertility != "constant"):
            logger.warning("--exhaustion-c and --fertility only act on csoftmax/csparsemax "
                           "attention; %s ignores them",
                           site_normalizer_name(args, "decoder_cross"))
        fertility = build_fertility(args, task.source_dictionary) if constrained else None
        encoder = SparseLSTMEncoder(
            task.source_dictionary, args.encoder_embed_dim, args.encoder_hidden_size,
            args.encoder_layers, args.dropout, args.dropout, args.sink_token, fertility)
        attention = BoundedAttention(build_site_normalizer(args, "decoder_cross", 1),
                                     args.exhaustion_c)
        decoder = SparseLSTMDecoder(
            task.target_dictionary, args.decoder_embed_dim, args.decoder_hidden_size,
            args.decoder_layers, args.dropout, args.dropout, args.encoder_hidden_size,
            attention, args.coverage_vector_form if args.coverage_vector else None,
            args.share_decoder_input_output_embed)
        return cls(encoder, decoder)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, src_fertility=None):
        encoder_out = self.encoder(src_tokens, src_lengths, src_fertility)
        return self.decoder(prev_output_tokens, encoder_out)

    def max_positions(self):
        return (self.encoder.max_positions(), self.decoder.max_positions())


def _default(args, name, value):
    if getattr(args, name, None) is None:
        setattr(args, name, value)


@register_model_architecture("sparse_lstm", "sparse_lstm")
def sparse_lstm(args):
    """A small 1-layer model: 256 units, dropout 0.1, softmax attention; the flags
    checked (on fairseq-train's command line: before --save-dir is created)."""
    _default(args, "encoder_embed_dim", 256)
    _default(args, "encoder_hidden_size", 256)
    _default(args, "encoder_layers", 1)
    _default(args, "decoder_embed_dim", args.encoder_embed_dim)
    _default(args, "decoder_hidden_size", args.encoder_hidden_size)
    _default(args, "decoder_layers", args.encoder_layers)
    _default(args, "dropout", 0.1)
    set_attention_defaults(args, LSTM_SITES)
    _default(args, "coverage_vector", False)
    _default(args, "coverage_vector_form", "paper")
    _default(args, "share_decoder_input_output_embed", False)
    set_fertility_defaults(args)
    check_constrained_model(args, LSTM_SITES, LSTM)
    check_choice("--coverage-vector-form", args.coverage_vector_form, COVERAGE_FORMS)
    output_entmax_of(args)


@register_model_architecture("sparse_lstm", "sparse_lstm_malaviya")
def sparse_lstm_malaviya(args):
    """Malaviya et al. (2018), OpenNMT defaults: 2 layers of 500 units, BiLSTM encoder,
    500-dim embeddings, dropout 0.3."""
    _default(args, "encoder_embed_dim", 500)
    _default(args, "encoder_hidden_size", 500)
    _default(args, "encoder_layers", 2)
    _default(args, "dropout", 0.3)
    sparse_lstm(args)
