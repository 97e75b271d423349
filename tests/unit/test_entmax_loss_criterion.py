"""``--criterion entmax_loss``: its loss and gradient are the library's Fenchel-Young
losses (and the entmax package's), padding left out; a model trained with it decodes with
``log alpha-entmax`` (exact ``-inf`` zeros), incrementally as in the full pass; a model
trained with another criterion is fairseq's, bit for bit; bad ``--loss-alpha`` and models
without the output are one-line errors; fairseq's beam search on such distributions."""

import math
from types import SimpleNamespace

import entmax
import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from hypothesis import given
from hypothesis import strategies as st

from sparse_attn_plugin import functional, losses
from sparse_attn_plugin.criterions.entmax_loss import EntmaxLossCriterion
from sparse_attn_plugin.errors import SettingsError
from sparse_attn_plugin.modules.output_normalizer import CRITERION, OutputEntmax, parse_loss_alpha
from sparse_attn_plugin.normalizers.entmax_partial import FIRST_K
from sparse_attn_plugin.search.zero_probability import ZeroProbabilitySequenceGenerator

from helpers.models import batch, build, decode_incrementally, parse, peaked

#: --loss-alpha values and (our normaliser, our loss, the entmax package's loss) of each.
ALPHAS = {"2": (functional.sparsemax, losses.sparsemax_loss, entmax.sparsemax_loss),
          "1.5": (functional.entmax15, losses.entmax15_loss, entmax.entmax15_loss),
          "1.3": (lambda z: functional.entmax_alpha(z, 1.3, n_iter=50),
                  lambda *a, **k: losses.entmax_bisect_loss(*a, alpha=1.3, n_iter=50, **k),
                  lambda z, y: entmax.entmax_bisect_loss(z, y, alpha=1.3, n_iter=100))}
#: Our architectures (small) and the flags that pick them.
ARCHS = {"sparse_transformer": [],
         "sparse_lstm": ["--encoder-embed-dim", "16", "--encoder-hidden-size", "16",
                         "--dropout", "0"],
         "kernel_transformer": ["--dropout", "0"]}


def entmax_flags(alpha="1.5"):
    return ["--criterion", CRITERION, "--loss-alpha", alpha]


def net_input(sample):
    return {k: sample["net_input"][k] for k in ("src_tokens", "src_lengths", "prev_output_tokens")}


def criterion_of(data, flags, arch="sparse_transformer"):
    task, model = build(data, arch, [*ARCHS[arch], *flags])
    return task, model, task.build_criterion(parse(data, arch, [*ARCHS[arch], *flags]))


class FixedLogits(torch.nn.Module):
    """A stand-in model whose output is ``logits`` whatever the input, decoded by ``output``."""

    def __init__(self, logits, output):
        super().__init__()
        self.logits, self.output_entmax = logits, output

    def forward(self, **net_input):
        return self.logits, None

    def get_targets(self, sample, net_output):
        return sample["target"]


def fixed_sample(logits, pad, seed=0):
    """A batch of targets for ``logits`` ``(B, T, V)`` with padding at the ends of rows."""
    generator = torch.Generator().manual_seed(seed)
    target = torch.randint(0, logits.size(-1), logits.shape[:-1], generator=generator)
    target[target == pad] = pad + 1
    target[0, -2:] = pad
    target[-1, -1:] = pad
    return {"net_input": {}, "target": target, "ntokens": int(target.ne(pad).sum())}


@pytest.mark.parametrize("alpha", ALPHAS)
def test_loss_and_gradient_are_the_librarys_padding_left_out(alpha):
    normalize, ours, _ = ALPHAS[alpha]
    task = SimpleNamespace(target_dictionary=SimpleNamespace(pad=lambda: 1))
    criterion = EntmaxLossCriterion(task, alpha)
    logits = (3 * torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(1))
              ).requires_grad_()
    sample = fixed_sample(logits, pad=1)
    loss, sample_size, log = criterion(FixedLogits(logits, OutputEntmax(float(alpha))), sample)
    loss.backward()
    target = sample["target"]
    expected = ours(logits.detach(), target, ignore_index=1, reduction="sum")
    assert torch.equal(loss.detach(), expected)
    assert sample_size == log["ntokens"] == log["sample_size"] == int(target.ne(1).sum())
    assert log["nsentences"] == 3 and torch.equal(log["loss"], expected)
    residual = normalize(logits.detach()) - torch.nn.functional.one_hot(target, 11)
    residual[target == 1] = 0  # padding: no gradient
    torch.testing.assert_close(logits.grad, residual, atol=1e-6, rtol=0)
    assert (logits.grad[0, -2:] == 0).all()


@pytest.mark.parametrize("alpha", ALPHAS)
def test_loss_agrees_with_the_entmax_package(alpha):
    """An independent reference: the entmax package's per-row loss, summed over the rows
    that are not padding."""
    _, _, reference = ALPHAS[alpha]
    task = SimpleNamespace(target_dictionary=SimpleNamespace(pad=lambda: 1))
    logits = 3 * torch.randn(4, 6, 9, dtype=torch.float64,
                             generator=torch.Generator().manual_seed(2))
    sample = fixed_sample(logits, pad=1, seed=3)
    loss, _, _ = EntmaxLossCriterion(task, alpha)(
        FixedLogits(logits, OutputEntmax(float(alpha))), sample)
    real = sample["target"].ne(1)
    expected = reference(logits[real], sample["target"][real]).sum()
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("alpha", ["1.5", "1.3"])
def test_gradcheck_float64(alpha):
    task = SimpleNamespace(target_dictionary=SimpleNamespace(pad=lambda: 1))
    criterion = EntmaxLossCriterion(task, alpha)
    logits = torch.randn(2, 3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    sample = fixed_sample(logits, pad=1, seed=5)

    def loss(z):
        return criterion(FixedLogits(z, OutputEntmax(float(alpha))), sample)[0]

    assert torch.autograd.gradcheck(loss, (logits.requires_grad_(),), atol=1e-6)


def test_unreduced_loss_is_per_token_and_zero_on_padding():
    task = SimpleNamespace(target_dictionary=SimpleNamespace(pad=lambda: 1))
    logits = torch.randn(3, 4, 7, generator=torch.Generator().manual_seed(6))
    sample = fixed_sample(logits, pad=1)
    model = FixedLogits(logits, OutputEntmax(1.5))
    per_token, _, _ = EntmaxLossCriterion(task, "1.5")(model, sample, reduce=False)
    assert per_token.shape == (3, 4) and (per_token[sample["target"] == 1] == 0).all()
    total, _, _ = EntmaxLossCriterion(task, "1.5")(model, sample)
    torch.testing.assert_close(per_token.sum(), total)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_criterion_on_a_model_is_the_library_loss_of_its_logits(synthetic_bin, arch):
    task, model, criterion = criterion_of(synthetic_bin, entmax_flags(), arch)
    sample = batch(task)
    assert sample["target"].eq(task.target_dictionary.pad()).any(), "the batch has padding"
    loss, sample_size, _ = criterion(model, sample)
    loss.backward()
    ours = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    logits = model(**net_input(sample))[0]
    expected = losses.entmax15_loss(logits, sample["target"], reduction="sum",
                                    ignore_index=task.target_dictionary.pad())
    expected.backward()
    assert torch.equal(loss, expected) and sample_size == sample["ntokens"]
    for key, grad in ours.items():
        torch.testing.assert_close(grad, model.get_parameter(key).grad, atol=0, rtol=0)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("arch", ARCHS)
def test_decoding_is_log_entmax_with_exact_zeros(synthetic_bin, arch, alpha):
    normalize, _, _ = ALPHAS[alpha]
    task, model = build(synthetic_bin, arch, [*ARCHS[arch], *entmax_flags(alpha)])
    peaked(model)
    with torch.no_grad():
        out = model(**net_input(batch(task)))
        lprobs = model.get_normalized_probs(out, log_probs=True)
        probs = model.get_normalized_probs(out, log_probs=False)
    expected = normalize(out[0])
    assert torch.equal(probs, expected)
    assert torch.equal(lprobs, expected.log())
    zero = expected == 0
    assert zero.any() and (~zero).any()
    assert (lprobs[zero] == -math.inf).all() and lprobs[~zero].isfinite().all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]))


@pytest.mark.parametrize("alpha", [2.0, 1.5, 1.3])
def test_a_beam_step_over_a_vocabulary_logs_the_supports_alone(alpha):
    """Over long rows with no gradient wanted, log_normalize reads the partial sort's
    supports (no logarithm of 0): the same log-probabilities as the weights' logarithm
    where they are not 0, -inf elsewhere, on rows whose supports are shorter and longer than
    the first k (the bound's path); a NaN row stays NaN; with a gradient wanted it is the
    logarithm of the weights, as before, with its graph."""
    output = OutputEntmax(alpha)
    logits = torch.randn(32, 9000) * torch.logspace(-2, 0.8, 32).unsqueeze(-1)
    assert logits.numel() >= 1 << 18
    expected = output.normalize(logits).log()
    supports = (expected > -math.inf).sum(-1)
    assert supports.min() < FIRST_K < supports.max()
    got = output.log_normalize(logits)
    assert torch.equal(torch.isneginf(got), torch.isneginf(expected))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    logits[3, 5] = math.nan
    assert output.log_normalize(logits).isnan().any(-1).tolist() == [i == 3 for i in range(32)]
    leaf = logits[:2].clone().requires_grad_()
    lprobs = output.log_normalize(leaf)
    assert lprobs.requires_grad and torch.equal(lprobs, output.normalize(leaf).log())


@pytest.mark.parametrize("flags", [[], ["--criterion", "label_smoothed_cross_entropy",
                                        "--label-smoothing", "0.1"]],
                         ids=["cross_entropy", "label_smoothed"])
@pytest.mark.parametrize("arch", ARCHS)
def test_other_criterions_leave_the_model_fairseqs(synthetic_bin, arch, flags):
    """Bit for bit: fairseq's decoder normalises (log-softmax), and the parameters are
    those of the same model built for entmax_loss (the criterion adds none)."""
    task, model = build(synthetic_bin, arch, [*ARCHS[arch], *flags])
    _, entmax_model = build(synthetic_bin, arch, [*ARCHS[arch], *entmax_flags()])
    assert model.output_entmax is None
    peaked(model)
    with torch.no_grad():
        out = model(**net_input(batch(task)))
        for log_probs in (True, False):
            assert torch.equal(model.get_normalized_probs(out, log_probs),
                               model.decoder.get_normalized_probs(out, log_probs, None))
    assert model.state_dict().keys() == entmax_model.state_dict().keys()


@pytest.mark.parametrize("arch", ARCHS)
def test_incremental_decoding_equals_full_forward(synthetic_bin, arch):
    task, model = build(synthetic_bin, arch, [*ARCHS[arch], *entmax_flags("1.5")])
    peaked(model)
    sample = batch(task)
    with torch.no_grad():
        full = model.get_normalized_probs(model(**net_input(sample)), log_probs=False)
        steps, _ = decode_incrementally(model, sample)
        incremental = model.get_normalized_probs((steps, None), log_probs=False)
    real = sample["target"].ne(task.target_dictionary.pad())
    torch.testing.assert_close(incremental[real], full[real], atol=1e-5, rtol=1e-4)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_loss_alpha_takes_exactly_the_numbers_in_1_to_2(value):
    if 1 < value <= 2:
        assert parse_loss_alpha(str(value)) == value
    else:
        with pytest.raises(SettingsError, match=r"^--loss-alpha must be a number in \(1, 2\]"):
            parse_loss_alpha(str(value))


@pytest.mark.parametrize("text", ["2.5", "abc", "1", "", "learned"])
def test_bad_loss_alpha_is_one_line_at_parse_time(synthetic_bin, text):
    with pytest.raises(SettingsError) as error:
        parse(synthetic_bin, "sparse_transformer", entmax_flags(text))
    assert str(error.value) == ("--loss-alpha must be a number in (1, 2] (2 sparsemax, 1.5 "
                                f"1.5-entmax), got {text!r}")


def test_a_model_without_the_output_is_refused(synthetic_bin):
    """When the criterion is built for --arch transformer (before fairseq-train's first
    step, where an error makes fairseq write crash.pt: issue 55), and, built for one of
    ours, when it is given another model."""
    task, model = build(synthetic_bin, "transformer", entmax_flags())
    with pytest.raises(SettingsError, match=f"^--criterion {CRITERION} needs a model that "
                                            "decodes with entmax: .*not transformer$"):
        task.build_criterion(parse(synthetic_bin, "transformer", entmax_flags()))
    criterion = task.build_criterion(parse(synthetic_bin, "sparse_transformer", entmax_flags()))
    with pytest.raises(SettingsError, match=f"^--criterion {CRITERION} needs a model that "
                                            "decodes with entmax: .*not TransformerModel$"):
        criterion(model, batch(task))


def test_the_criterions_alpha_must_be_the_models(synthetic_bin):
    task, model = build(synthetic_bin, "sparse_transformer", entmax_flags("2"))
    criterion = task.build_criterion(parse(synthetic_bin, "sparse_transformer",
                                           entmax_flags("1.5")))
    with pytest.raises(SettingsError, match="^--loss-alpha 1.5 but the model decodes with "
                                            "alpha 2$"):
        criterion(model, batch(task))


# --- beam search on exact zeros ----------------------------------------------------------

def sparse_output_model(data, scale=3.0, alpha="2", eos_bonus=0.0, task="translation"):
    """A peaked model with entmax output: with the defaults (sparsemax) supports of one or
    two tokens, EOS never in them; ``eos_bonus`` is added to EOS's logit."""
    task, model = build(data, "sparse_transformer", [*entmax_flags(alpha), "--task", task])
    peaked(model)
    for parameter in model.parameters():
        parameter.data.mul_(scale)
    bonus = torch.zeros(len(task.target_dictionary))
    bonus[task.target_dictionary.eos()] = eos_bonus
    model.decoder.output_projection.register_forward_hook(lambda module, x, out: out + bonus)
    return task, model


@pytest.mark.parametrize("beam", [1, 5])
def test_fairseqs_beam_search_dies_where_eos_has_probability_0(synthetic_bin, beam):
    """What :class:`ZeroProbabilitySequenceGenerator` fixes: at --max-len fairseq masks every token
    but EOS, finishes no hypothesis whose score is -inf, and asserts."""
    task, model = sparse_output_model(synthetic_bin)
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=beam,
                                  max_len_a=0, max_len_b=5)
    with pytest.raises(AssertionError, match="5 < 5"):
        generator.generate([model], batch(task, size=4))


@pytest.mark.parametrize("beam,lenpen", [(1, 1.0), (5, 1.0), (20, 0.0), (20, 2.0)])
def test_zero_probability_hypotheses_finish_with_score_minus_inf(synthetic_bin, beam, lenpen):
    task, model = sparse_output_model(synthetic_bin)
    generator = ZeroProbabilitySequenceGenerator([model], task.target_dictionary,
                                                 beam_size=beam, max_len_a=0, max_len_b=5,
                                                 len_penalty=lenpen)
    hypos = generator.generate([model], batch(task, size=4))
    assert [len(h) for h in hypos] == [beam] * 4
    for hypo in (h for sentence in hypos for h in sentence):
        scores = hypo["positional_scores"]
        assert hypo["score"].item() == -math.inf and scores[-1] == -math.inf
        assert not scores.isnan().any() and hypo["tokens"][-1] == task.target_dictionary.eos()
        first = int(scores.isneginf().nonzero()[0])
        assert scores[:first].isfinite().all() and scores[first:].isneginf().all()


@pytest.mark.parametrize("beam,lenpen", [(1, 1.0), (4, 1.0), (12, 0.0), (12, 1.5)])
def test_where_fairseq_finishes_the_search_is_fairseqs(synthetic_bin, beam, lenpen):
    """On a model whose hypotheses end (1.5-entmax output, most tokens at probability 0):
    the same hypotheses and scores as fairseq's, every score finite and, length penalty
    undone, the sum of its positional scores."""
    task, model = sparse_output_model(synthetic_bin, scale=0.6, alpha="1.5",
                                      eos_bonus=2.0)
    sample = batch(task, size=4)
    kwargs = dict(beam_size=beam, max_len_a=0, max_len_b=12, len_penalty=lenpen)
    ours = ZeroProbabilitySequenceGenerator([model], task.target_dictionary, **kwargs)
    stock = SequenceGenerator([model], task.target_dictionary, **kwargs)
    hypos = ours.generate([model], sample)
    for mine, theirs in zip(hypos, stock.generate([model], sample)):
        assert len(mine) == len(theirs) >= 1
        for a, b in zip(mine, theirs):
            assert torch.equal(a["tokens"], b["tokens"]) and torch.equal(a["score"], b["score"])
            assert torch.equal(a["positional_scores"], b["positional_scores"])
            assert a["positional_scores"].isfinite().all()
            length = a["tokens"].numel()
            torch.testing.assert_close(a["score"] * length ** lenpen,
                                       a["positional_scores"].sum(), atol=1e-4, rtol=1e-5)


def eos_only_off(model, eos: int, token: int) -> None:
    """EOS made impossible (a logit far below the rest) after ``token`` and at the first
    step, and the most likely token (tied with the best) after any other."""
    last = {}
    model.decoder.embed_tokens.register_forward_pre_hook(
        lambda module, args: last.__setitem__("token", args[0][:, -1:]))

    def hook(module, args, out):
        free = (last["token"] != token) & (last["token"] != eos)
        out = out.clone()
        out[..., eos] = torch.where(free, out.amax(-1), torch.full_like(out[..., eos], -1e4))
        return out
    model.decoder.output_projection.register_forward_hook(hook)


@pytest.mark.parametrize("beam,lenpen", [(4, 1.0), (8, 1.0), (8, 0.5), (12, 1.0)])
def test_a_sentence_with_finite_and_zero_probability_hypotheses_keeps_the_finite(
        synthetic_bin, beam, lenpen):
    """Issue 57: hypotheses of one sentence end with a finite score (EOS after a token but
    97), others reach --max-len at probability 0 (EOS impossible after 97, the likeliest
    token): its n-best list is the finite ones alone, best first, each scored as fairseq
    scores (the length-penalised sum of its positional scores, all finite); a sentence
    with no finite hypothesis keeps its beam of -inf ones, each ended at --max-len (6 tokens
    and EOS), the one step where the search forces an end."""
    task, model = sparse_output_model(synthetic_bin, scale=3.0)
    eos = task.target_dictionary.eos()
    eos_only_off(model, eos, 97)
    kwargs = dict(beam_size=beam, max_len_a=0, max_len_b=6, len_penalty=lenpen)
    sample = batch(task, size=8)
    hypos = ZeroProbabilitySequenceGenerator([model], task.target_dictionary,
                                             **kwargs).generate([model], sample)
    kinds = set()
    for sentence in hypos:
        scores = [h["score"].item() for h in sentence]
        finite = [math.isfinite(score) for score in scores]
        if all(finite):
            kinds.add("mixed" if len(sentence) < beam else "finite")
            assert scores == sorted(scores, reverse=True)
            for hypo in sentence:
                positional = hypo["positional_scores"]
                assert positional.isfinite().all() and hypo["tokens"][-1] == eos
                torch.testing.assert_close(hypo["score"] * hypo["tokens"].numel() ** lenpen,
                                           positional.sum(), atol=1e-4, rtol=1e-5)
        else:   # forced to end at --max-len only, where nothing but EOS can come
            kinds.add("zero")
            assert not any(finite) and len(sentence) == beam
            assert all(h["tokens"].numel() == 7 for h in sentence)
    assert "zero" in kinds and kinds & {"mixed", "finite"}, kinds
    assert beam == 12 or "mixed" in kinds


@pytest.mark.parametrize("task_name", ["translation", "sparse_translation"])
def test_an_entmax_models_task_builds_the_search_that_finishes_on_zeros(synthetic_bin,
                                                                          task_name):
    """What fairseq-generate calls (``task.build_generator``) after loading the model: the
    search that finishes where fairseq's dies, whatever the task; a cross-entropy model's
    task builds fairseq's own."""
    task, model = sparse_output_model(synthetic_bin, task=task_name)
    settings = SimpleNamespace(beam=1, max_len_a=0, max_len_b=5, min_len=1, unnormalized=False,
                               lenpen=1, unkpen=0, temperature=1.0, match_source_len=False,
                               no_repeat_ngram_size=0, sampling=False, sampling_topk=-1,
                               sampling_topp=-1.0, constraints=None, diverse_beam_groups=-1,
                               diverse_beam_strength=0.5, diversity_rate=-1,
                               prefix_size=0, iter_decode_max_iter=0, print_alignment=None,
                               score_reference=False, lm_path=None, lm_weight=0)
    generator = task.build_generator([model], settings)
    assert isinstance(generator, ZeroProbabilitySequenceGenerator)
    hypos = generator.generate([model], batch(task, size=4))
    assert all(h[0]["score"].item() == -math.inf for h in hypos)
    plain_task, plain = build(synthetic_bin, "sparse_transformer", ["--task", task_name])
    assert type(plain_task.build_generator([plain], settings)) is SequenceGenerator
