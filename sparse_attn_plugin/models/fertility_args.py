"""Command-line flags of constrained attention (Malaviya et al. 2018): sink, exhaustion,
fertility strategy and the fertility predictor, shared by the LSTM and the transformer."""

from ..errors import SettingsError
from ..modules.fertility import CRITERION, DEFAULTS, STRATEGIES, TASK, Fertility
from ..modules.fertility_predictor import FertilityPredictor
from ..site_normalizers import cross_attention_constrained, site_normalizer_name
from .attention_args import check_attention_args
from .flag_checks import check_choice, check_number, parsed_from_command_line


def add_fertility_args(parser):
    """Add the sink, exhaustion and fertility flags."""
    parser.add_argument("--sink-token", action="store_true",
                        help="append a sink with unbounded fertility to every source sentence "
                             "(required by csoftmax/csparsemax unless "
                             "--attn-rows-may-sum-below-one)")
    parser.add_argument("--attn-rows-may-sum-below-one", action="store_true",
                        help="run csoftmax/csparsemax without --sink-token: a step whose "
                             "remaining fertilities sum below 1 gives attention weights that "
                             "sum to less than 1")
    parser.add_argument("--exhaustion-c", type=float, metavar="C",
                        help="exhaustion strategy: add C times the remaining fertility to the "
                             "scores (0.2 in the paper; default 0)")
    parser.add_argument("--fertility", metavar="STRATEGY",
                        help="where constrained attention's fertilities come from: "
                             f"{', '.join(STRATEGIES)} (default constant)")
    parser.add_argument("--fertility-value", type=float, metavar="F",
                        help="fertility of every token with --fertility constant (default 2)")
    parser.add_argument("--fertility-table", metavar="FILE",
                        help="word<TAB>fertility table for --fertility guided "
                             "(sparse-attn-align fertility --out-guided)")
    parser.add_argument("--fertility-slack", type=float, metavar="S",
                        help="added to --fertility predicted's fertilities (default 1)")
    parser.add_argument("--fertility-predictor-embed-dim", type=int, metavar="N")
    parser.add_argument("--fertility-predictor-hidden-size", type=int, metavar="N",
                        help="per direction")
    parser.add_argument("--fertility-predictor-layers", type=int, metavar="N")
    parser.add_argument("--fertility-predictor-dropout", type=float, metavar="P")
    parser.add_argument("--fertility-max", type=int, metavar="K",
                        help="the predictor's classes are fertilities 1..K, K the larger "
                             "of this and the largest count in the training fertilities "
                             "(default 10)")


def set_fertility_defaults(args):
    """Defaults of the flags (fairseq convention: in the architecture)."""
    for name, value in DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def check_fertility_args(args):
    """Raise SettingsError (one line) for infeasible settings (NaN and infinity too)."""
    check_choice("--fertility", args.fertility, STRATEGIES, "fertility strategy")
    if args.fertility == "constant":
        check_number("--fertility-value", args.fertility_value, 0, strict=True)
    if args.fertility == "guided" and not args.fertility_table:
        raise SettingsError("--fertility guided needs --fertility-table FILE")
    check_number("--exhaustion-c", args.exhaustion_c, 0)
    check_number("--fertility-slack", args.fertility_slack, 0)
    check_number("--fertility-predictor-dropout", args.fertility_predictor_dropout, 0)
    if args.fertility_max < 1:
        raise SettingsError(f"--fertility-max must be >= 1, got {args.fertility_max}")


def check_fertility_criterion(args):
    """Raise SettingsError (one line) where ``--criterion`` is the fertility criterion
    and the run cannot train with it: the model has no fertility predictor (csoftmax or
    csparsemax cross-attention with ``--fertility predicted``), or the task's batches
    carry no fertilities."""
    if getattr(args, "criterion", None) != CRITERION:
        return
    fertility = getattr(args, "fertility", None)
    if fertility != "predicted" or not cross_attention_constrained(args):
        raise SettingsError(
            f"--criterion {CRITERION} trains the fertility predictor of csoftmax or "
            f"csparsemax cross-attention with --fertility predicted; this model has "
            f"{site_normalizer_name(args, 'decoder_cross')} cross-attention"
            f"{f' and --fertility {fertility}' if fertility else ''}")
    if args.task != TASK:
        raise SettingsError(f"--criterion {CRITERION} trains on the per-token fertilities "
                            f"that --task {TASK} batches; this run has --task {args.task}")
    check_number("--fertility-loss-weight", args.fertility_loss_weight, 0)


def check_constrained_model(args, sites, model):
    """The checks of a model with constrained attention, of family ``model`` (the
    transformer, the LSTM: :data:`~..normalizer_registry.MODELS`) at ``sites``, run
    by its architecture function: on fairseq-train's command line, before anything is
    built or written, and at every build. The fertility criterion, which only training
    uses (a checkpoint decodes with its attention switched), on the command line alone."""
    check_attention_args(args, sites, model)
    check_fertility_args(args)
    check_sink(args)
    if parsed_from_command_line(args):
        check_fertility_criterion(args)


def check_sink(args):
    """Raise SettingsError (one line) for constrained cross-attention without the sink,
    unless the user opted in: without it a step's bounds ``max(0, f - beta)`` can sum
    below 1 and the weights then sum to less than 1 (the paper always uses the sink)."""
    if (cross_attention_constrained(args) and not args.sink_token
            and not args.attn_rows_may_sum_below_one):
        name = site_normalizer_name(args, "decoder_cross")
        raise SettingsError(f"{name} attention needs --sink-token (as in the paper): without it "
                            "the weights sum to less than 1 once the fertilities are spent; pass "
                            "--attn-rows-may-sum-below-one to run without the sink anyway")


def build_fertility(args, dictionary) -> Fertility:
    """The fertility source the flags describe, for the source ``dictionary``."""
    predictor = None
    if args.fertility == "predicted":
        predictor = FertilityPredictor(
            len(dictionary), dictionary.pad(), args.fertility_predictor_embed_dim,
            args.fertility_predictor_hidden_size, args.fertility_predictor_layers,
            args.fertility_predictor_dropout, args.fertility_max)
    return Fertility(args.fertility, dictionary, args.fertility_value, args.fertility_table,
                     args.fertility_slack, predictor)


class FertilityPredictorMixin:
    """Gives a model whose encoder holds a :class:`Fertility` the ``fertility_predictor``
    attribute the criterion trains."""

    @property
    def fertility_predictor(self):
        """The fertility tagger, or None."""
        fertility = getattr(self.encoder, "fertility", None)
        return None if fertility is None else fertility.predictor
