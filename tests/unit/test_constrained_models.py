"""Constrained attention in models (Malaviya et al. 2018): the sink's position, fertilities
reaching the model, bounds respected over decoder steps, incremental decoding and beam
search with coverage state, the fertility predictor's loss, the task's fertility files and
coverage-penalty rescoring."""

import math
import shutil
from argparse import Namespace

import pytest
import torch
from fairseq import criterions
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.sequence_generator import SequenceGenerator

from sparse_attn_plugin.errors import SettingsError
from sparse_attn_plugin.modules.fertility import FertilityError
from sparse_attn_plugin.modules.fertility_predictor import FertilityPredictor
from sparse_attn_plugin.modules.source_layout import SourceLayout
from sparse_attn_plugin.search.coverage_penalty import CoverageSequenceGenerator, gnmt_score
from sparse_attn_plugin.tasks.sparse_translation import fertility_path

from helpers.models import batch, build, decode_incrementally, parse, peaked, teacher_forced

LSTM = ["--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--dropout", "0",
        "--task", "sparse_translation"]
CONSTRAINED = ["--attn-fn", "csparsemax", "--sink-token", "--exhaustion-c", "0.2"]
PREDICTOR = ["--fertility", "predicted", "--fertility-predictor-embed-dim", "8",
             "--fertility-predictor-hidden-size", "8", "--fertility-predictor-dropout", "0"]
REFERENCE_COVERAGE = ["--coverage-vector", "--coverage-vector-form", "reference"]
TRANSFORMER = ["--task", "sparse_translation", "--decoder-cross-attn-fn", "csparsemax",
               "--sink-token", "--exhaustion-c", "0.2"]


def lstm(data, *flags):
    return build(data, "sparse_lstm", [*LSTM, *flags])


def transformer(data, *flags):
    return build(data, "sparse_transformer", [*TRANSFORMER, *flags])


def inputs(sample, *keys):
    keys = keys or ("src_tokens", "src_lengths", "prev_output_tokens")
    return {k: sample["net_input"][k] for k in keys}


# --- sink placement ------------------------------------------------------------------

@pytest.mark.parametrize("left_pad", [True, False])
def test_sink_follows_each_rows_last_token_in_unsorted_padded_batches(left_pad):
    lengths = torch.tensor([2, 5, 3, 1])                       # unsorted
    columns = torch.arange(5)
    pad = (columns >= lengths[:, None]) if not left_pad else (columns < 5 - lengths[:, None])
    tokens = torch.arange(1, 21).view(4, 5).masked_fill(pad, 0)
    layout = SourceLayout(pad, sink=True)
    model = layout.to_model(tokens, sink_value=-1)
    for row, length in enumerate(lengths.tolist()):
        real = tokens[row][~pad[row]].tolist()
        assert model[row, :length + 1].tolist() == real + [-1]   # words in order, then sink
        assert layout.sink_index[row] == length
        assert layout.padding_mask[row].tolist() == [False] * (length + 1) + [True] * (
            5 - length)
    weights = torch.rand(4, 3, 6)                               # attention over model columns
    back = layout.to_source(weights)
    for row in range(4):
        assert torch.equal(back[row][:, ~pad[row]], weights[row][:, :lengths[row]])


def test_lstm_encoder_gives_the_sink_unbounded_fertility_and_pads_none(synthetic_bin):
    task, model = lstm(synthetic_bin, *CONSTRAINED, "--fertility-value", "3")
    sample = batch(task, size=6)
    out = model.encoder(**inputs(sample, "src_tokens", "src_lengths"))
    fertility, pad = out["fertility"][0], out["padding_mask"][0]
    lengths = sample["net_input"]["src_lengths"]
    for row, length in enumerate(lengths.tolist()):
        assert fertility[row, :length].eq(3).all()
        assert math.isinf(fertility[row, length])
        assert fertility[row][pad[row]].eq(0).all()


# --- bounds, incremental decoding, beam search -----------------------------------------

def model_attention(model, sample):
    keys = [k for k in ("src_tokens", "src_lengths", "prev_output_tokens", "src_fertility")
            if k in sample["net_input"]]
    out, extra = model(**inputs(sample, *keys))
    return extra["model_attn"][0] if "model_attn" in extra else extra["attn"][0]


@pytest.mark.parametrize("name", ["csparsemax", "csoftmax"])
def test_lstm_attention_never_exceeds_fertility(synthetic_bin, name):
    task, model = lstm(synthetic_bin, "--attn-fn", name, "--sink-token",
                       "--fertility-value", "1")
    peaked(model)
    sample = batch(task, size=6)
    with torch.no_grad():
        attn = model_attention(model, sample)                   # (B, T, S + 1)
    coverage = attn.sum(dim=1)
    lengths = sample["net_input"]["src_lengths"]
    rows = torch.arange(attn.size(0))
    assert torch.allclose(attn.sum(-1), torch.ones(attn.shape[:2]), atol=1e-5)
    words = torch.arange(attn.size(2))[None] < lengths[:, None]
    assert coverage[words].max() <= 1 + 1e-5                   # unit fertilities hold
    assert coverage[rows, lengths].max() > 1                   # the sink took the rest


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
@pytest.mark.parametrize("name", ["csparsemax", "csoftmax"])
def test_constrained_attention_without_the_sink_is_refused_unless_opted_in(
        synthetic_bin, arch, name):
    """The paper always uses the sink: without it a model stops at start-up with one
    line, unless --attn-rows-may-sum-below-one says the rows may sum to less than 1."""
    site = ["--attn-fn", name] if arch == "lstm" else [
        "--task", "sparse_translation", "--decoder-cross-attn-fn", name]
    flags = [*site, "--fertility-value", "0.1"]
    make = lstm if arch == "lstm" else (
        lambda data, *extra: build(data, "sparse_transformer", list(extra)))
    with pytest.raises(SettingsError) as stop:
        make(synthetic_bin, *flags)
    message = str(stop.value)
    assert message.startswith(f"{name} attention needs --sink-token")
    assert "--attn-rows-may-sum-below-one" in message and "\n" not in message
    task, model = make(synthetic_bin, *flags, "--attn-rows-may-sum-below-one")
    sample = batch(task, size=6)
    with torch.no_grad():
        attn = model_attention(peaked(model), sample)
    real = sample["target"].ne(task.target_dictionary.pad())
    sums = attn.sum(-1)[real]
    assert sums.max() <= 1 + 1e-5 and sums.min() < 0.999   # what the flag's name says


@pytest.mark.parametrize("arch,flags", [
    ("lstm", [*CONSTRAINED, "--coverage-vector"]),
    ("lstm", [*CONSTRAINED, "--coverage-vector", "--coverage-vector-form", "reference"]),
    ("lstm", ["--attn-fn", "csoftmax", "--fertility-value", "1.5",
              "--attn-rows-may-sum-below-one"]),
    ("lstm", ["--attn-fn", "sparsemax", "--coverage-vector"]),
    ("transformer", []),
    ("transformer", ["--decoder-cross-attn-fn", "csoftmax"]),
])
def test_incremental_decoding_equals_full_forward(synthetic_bin, arch, flags):
    task, model = (lstm if arch == "lstm" else transformer)(synthetic_bin, *flags)
    peaked(model)
    sample = batch(task)
    with torch.no_grad():
        full, extra = model(**inputs(sample))
        incremental, attn = decode_incrementally(model, sample)
    real = sample["target"].ne(task.target_dictionary.pad())
    torch.testing.assert_close(incremental[real], full[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(attn[real], extra["attn"][0][real], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
@pytest.mark.parametrize("beta", [0.0, 0.6])
def test_beam_search_equals_teacher_forced_rescoring(synthetic_bin, arch, beta):
    """Every piece of state (LSTM cells, input feed, coverage, cached keys) is reordered
    with the beam: each hypothesis's scores and attention equal a teacher-forced pass,
    and with the coverage penalty its score is the GNMT score of that attention."""
    flags = [*CONSTRAINED, *REFERENCE_COVERAGE] if arch == "lstm" else []
    task, model = (lstm if arch == "lstm" else transformer)(synthetic_bin, *flags)
    peaked(model, seed=1)
    sample = batch(task, size=4)
    tgt_dict = task.target_dictionary
    kwargs = dict(beam_size=4, max_len_b=12, normalize_scores=False, len_penalty=0.5)
    generator = (CoverageSequenceGenerator([model], tgt_dict, coverage_beta=beta, **kwargs)
                 if beta else SequenceGenerator([model], tgt_dict, **kwargs))
    hypos = generator.generate([model], sample)
    src = sample["net_input"]["src_tokens"]
    pad = task.source_dictionary.pad()
    reordered = 0
    for i, beams in enumerate(hypos):
        real = src[i].ne(pad)
        for rank, hypo in enumerate(beams):
            scores, attn = teacher_forced(model, src[i][real], hypo["tokens"], tgt_dict.eos())
            torch.testing.assert_close(hypo["positional_scores"], scores, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(hypo["attention"][real], attn.T, atol=1e-4, rtol=1e-4)
            if beta:
                expected = gnmt_score(scores, attn.T, torch.ones(attn.size(1), dtype=bool),
                                      0.5, beta, 0.1)
                assert hypo["score"].item() == pytest.approx(expected, abs=1e-3)
                reordered += rank > 0 and expected > beams[rank - 1]["score"].item() + 1e-6
    assert reordered == 0, "hypotheses are not sorted by their rescored score"


@pytest.mark.parametrize("form", ["paper", "reference"])
def test_coverage_vector_scores_match_a_direct_computation(synthetic_bin, form):
    """paper: ``z_tj = s_t^T (W h_j + v beta_{t-1,j})``; reference (the authors' code):
    ``z_tj = (W^T s_t + v beta_{t-1,j})^T h_j``, ``v`` of the encoder's size."""
    task, model = lstm(synthetic_bin, "--attn-fn", "softmax", "--decoder-hidden-size", "12",
                       "--coverage-vector", "--coverage-vector-form", form)
    decoder = model.decoder
    v = decoder.coverage_weight if form == "paper" else decoder.coverage_key_weight
    assert v.shape == ((12,) if form == "paper" else (16,))
    assert (v.eq(0).all() if form == "paper" else v.abs().le(0.1).all() and v.ne(0).any())
    peaked(model)
    seen, queries = [], []
    step = decoder.attention.step
    decoder.attention.step = lambda scores, coverage, fertility: (
        seen.append((scores[:, 0, 0], coverage[:, 0, 0])) or step(scores, coverage, fertility))
    decoder.layers[-1].register_forward_hook(lambda cell, args, out: queries.append(out[0]))
    sample = batch(task, size=4)
    with torch.no_grad():
        encoder_out = model.encoder(**inputs(sample, "src_tokens", "src_lengths"))
        decoder(sample["net_input"]["prev_output_tokens"], encoder_out)
    memory = encoder_out["encoder_out"][0]                          # h_j, (B, S, 16)
    real = ~encoder_out["padding_mask"][0]
    bilinear = memory @ decoder.key_proj.weight.T                   # W h_j, (B, S, 12)
    for (scores, beta), s in zip(seen, queries):
        if form == "paper":
            direct = torch.einsum("bsh,bh->bs", bilinear + beta[..., None] * v, s)
        else:
            w_s = s @ decoder.key_proj.weight                       # W^T s_t, (B, 16)
            direct = torch.einsum("bsh,bsh->bs", w_s[:, None] + beta[..., None] * v, memory)
        torch.testing.assert_close(scores[real], direct[real], atol=1e-4, rtol=1e-5)
    assert seen[-1][1].abs().sum() > 0                              # coverage took part


def test_lstm_starts_as_opennmts_param_init(synthetic_bin):
    """Every weight of the translation model uniform in +-0.1 (OpenNMT's ``-param_init``,
    the paper's models), embeddings' padding rows zero, biases included; the paper-form
    coverage vector starts at 0. PyTorch's defaults (LSTM bias bound 1/sqrt(H), Kaiming
    linear maps) are not what the paper trained with."""
    task, model = lstm(synthetic_bin, *CONSTRAINED, "--coverage-vector",
                       "--decoder-hidden-size", "40", "--encoder-hidden-size", "40")
    translation = {name: p for name, p in model.named_parameters()
                   if not name.startswith("encoder.fertility")}
    for name, param in translation.items():
        assert param.abs().max() <= 0.1, name
    spread = {name: p for name, p in translation.items() if p.numel() > 100}
    assert all(p.abs().max() > 0.09 for p in spread.values()), "not uniform in +-0.1"
    assert spread.keys() >= {"decoder.output_projection.bias", "decoder.layers.0.bias_hh"}
    for embed, dictionary in ((model.encoder.embed_tokens, task.source_dictionary),
                              (model.decoder.embed_tokens, task.target_dictionary)):
        assert embed.weight[dictionary.pad()].eq(0).all()
    assert model.decoder.coverage_weight.eq(0).all()


# --- fertilities from data and the predictor --------------------------------------------

def test_the_task_batches_each_sentences_own_fertilities(synthetic_bin):
    task, _ = lstm(synthetic_bin, *CONSTRAINED, *PREDICTOR)
    sample = batch(task, split="train", size=8)
    lines = fertility_path(synthetic_bin, "train", "src", "tgt").read_text().splitlines()
    src, fert = sample["net_input"]["src_tokens"], sample["net_input"]["src_fertility"]
    pad, eos = task.source_dictionary.pad(), task.source_dictionary.eos()
    for row, sentence in enumerate(sample["id"].tolist()):
        real = src[row].ne(pad)
        expected = [float(v) for v in lines[sentence].split()] + [1.0]   # EOS gets 1
        assert fert[row][real].tolist() == expected
        assert src[row][real][-1] == eos and fert[row][~real].eq(0).all()


def test_guided_table_gives_each_type_its_fertility_and_travels_in_the_checkpoint(
        synthetic_bin, tmp_path):
    table = tmp_path / "guided.tsv"
    task, _ = lstm(synthetic_bin, *CONSTRAINED)
    words = [task.source_dictionary[i] for i in range(task.source_dictionary.nspecial,
                                                        task.source_dictionary.nspecial + 3)]
    table.write_text(f"{words[0]}\t3\n{words[1]}\t0\nnot-a-word\t7\n")
    flags = [*CONSTRAINED, "--fertility", "guided", "--fertility-table", str(table)]
    _, trained = lstm(synthetic_bin, *flags)
    dictionary = task.source_dictionary
    tokens = torch.tensor([[dictionary.index(w) for w in words] + [dictionary.eos()]])
    expected = [[3.0, 1.0, 1.0, 1.0]]  # at least 1; types not in the table 1; EOS 1
    assert trained.encoder.fertility(tokens).tolist() == expected
    table.unlink()  # decoding a checkpoint does not need the file
    _, loaded = lstm(synthetic_bin, *flags)
    with pytest.raises(FertilityError, match="guided.tsv does not exist"):
        loaded.encoder.fertility(tokens)
    loaded.load_state_dict(trained.state_dict())
    assert loaded.encoder.fertility(tokens).tolist() == expected


def test_training_uses_the_batch_fertilities(synthetic_bin):
    """The reference code once dropped them in training: here they bound the attention."""
    task, model = lstm(synthetic_bin, *CONSTRAINED, *PREDICTOR, "--fertility-slack", "0")
    peaked(model).train()
    sample = batch(task, split="train", size=6)
    given = sample["net_input"]["src_fertility"]
    attn = model_attention(model, {"net_input": {**sample["net_input"], "src_fertility": given}})
    coverage = model.encoder(**inputs(sample, "src_tokens", "src_lengths", "src_fertility"))
    bounds = coverage["fertility"][0]
    lengths = sample["net_input"]["src_lengths"]
    words = torch.arange(bounds.size(1))[None] < lengths[:, None]
    # the model's bounds are the file's counts (at least 1), column for column
    layout = SourceLayout(sample["net_input"]["src_tokens"].eq(task.source_dictionary.pad()),
                          sink=True)
    expected = layout.to_model(given.clamp(min=1), float("inf"))
    assert torch.equal(bounds[words], expected[words])
    assert (attn.sum(dim=1)[words] <= bounds[words] + 1e-5).all()
    with pytest.raises(FertilityError, match="batch has none"):
        model(**inputs(sample))                                  # no fertilities: an error


def test_generation_uses_the_predictor_plus_slack(synthetic_bin):
    task, model = lstm(synthetic_bin, *CONSTRAINED, *PREDICTOR, "--fertility-slack", "1")
    peaked(model)
    sample = batch(task, size=5)
    src = sample["net_input"]["src_tokens"]
    with torch.no_grad():
        bounds = model.encoder(**inputs(sample, "src_tokens", "src_lengths"))["fertility"][0]
        predictor = model.fertility_predictor
        expected = predictor.expected(predictor(src)) + 1
    layout = SourceLayout(src.eq(task.source_dictionary.pad()), sink=True)
    words = ~src.eq(task.source_dictionary.pad()) & src.ne(task.source_dictionary.eos())
    torch.testing.assert_close(layout.to_source(bounds)[words], expected[words])


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_a_predicted_fertility_checkpoint_decodes_with_unconstrained_attention(
        synthetic_bin, arch, caplog):
    """A csparsemax model with a fertility predictor loaded as sparsemax (``--model-overrides``,
    ``sparse-attn-compare --decode-with``): the predictor is dropped, every other weight is
    the checkpoint's; loaded the other way, the predictor starts as at training's start."""
    build_model, chosen, unconstrained = (
        (lstm, CONSTRAINED, ["--attn-fn", "sparsemax"]) if arch == "lstm" else
        (transformer, [], ["--decoder-cross-attn-fn", "sparsemax"]))  # csparsemax: TRANSFORMER
    _, constrained = build_model(synthetic_bin, *chosen, *PREDICTOR)
    _, plain = build_model(synthetic_bin, *chosen, *PREDICTOR, *unconstrained)
    assert plain.fertility_predictor is None
    trained = constrained.state_dict()
    plain.load_state_dict(trained)
    assert plain.state_dict().keys() < trained.keys()
    for key, value in plain.state_dict().items():
        assert torch.equal(value, trained[key])
    dropped = [r.getMessage() for r in caplog.records if "unused by this attention" in r.message]
    assert len(dropped) == len(trained) - len(plain.state_dict()) > 0
    assert all("encoder.fertility.predictor." in message for message in dropped)
    constrained.load_state_dict(plain.state_dict())  # the predictor kept as it was built
    assert "is not in the checkpoint: initialised" in caplog.text


def test_predicted_bounds_mean_the_same_in_training_and_decoding(synthetic_bin):
    """The tagger learns the aligner's counts clamped to at least 1, so once it predicts
    them exactly, decoding's bounds ``E[f] + slack`` equal training's ``max(c, 1) + slack``,
    also for the tokens the aligner left unaligned (count 0)."""
    task, model = lstm(synthetic_bin, *CONSTRAINED, *PREDICTOR, "--fertility-slack", "1")
    sample = batch(task, split="train", size=8)
    src, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    counts = sample["net_input"]["src_fertility"]
    words = src.ne(task.source_dictionary.pad()) & src.ne(task.source_dictionary.eos())
    assert counts[words].eq(0).any() and counts[words].ge(2).any()
    predictor = model.fertility_predictor
    logits = torch.zeros(*src.shape, predictor.max_fertility, requires_grad=True)
    optimizer = torch.optim.Adam([logits], lr=0.5)
    for _ in range(200):                      # logits minimising the tagger's own loss
        optimizer.zero_grad()
        predictor.loss(logits, counts, words)[0].backward()
        optimizer.step()
    predictor.forward = lambda tokens: logits.detach()   # a tagger that predicts exactly
    with torch.no_grad():
        trained = model.train().encoder(src, lengths, counts)["fertility"][0]
        decoded = model.eval().encoder(src, lengths)["fertility"][0]
    layout = SourceLayout(src.eq(task.source_dictionary.pad()), sink=True)
    trained, decoded = layout.to_source(trained)[words], layout.to_source(decoded)[words]
    assert trained[counts[words].eq(0)].eq(2).all()      # unaligned: max(0, 1) + 1
    torch.testing.assert_close(decoded, trained, atol=1e-2, rtol=0)


def test_tagger_loss_and_expectation_match_a_direct_computation():
    """Classes 1..K, counts clamped to [1, K], NLL weight 0.5 on fertility 1 (the authors'
    ``custom_weight``), expectation over 1..K."""
    predictor = FertilityPredictor(20, 1, 4, 4, 1, 0.0, max_fertility=5)
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 5)
    counts = torch.tensor([[0.0, 1.0, 2.0, 7.0], [5.0, 3.0, 0.0, 1.0]])
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[1, 3] = False
    loss, correct = predictor.loss(logits, counts, mask)
    expected, right = 0.0, 0
    for b, s in mask.nonzero().tolist():
        k = min(5, max(1, int(counts[b, s])))
        weight = 0.5 if k == 1 else 1.0
        expected -= weight * torch.log_softmax(logits[b, s], dim=-1)[k - 1].item()
        right += int(logits[b, s].argmax()) + 1 == k
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert correct.item() == right
    mean = (torch.softmax(logits, dim=-1) * torch.arange(1.0, 6.0)).sum(-1)
    torch.testing.assert_close(predictor.expected(logits), mean)


def test_tagger_classes_cover_the_largest_training_count(synthetic_bin, tmp_path):
    """K = max(--fertility-max, largest training count), as the authors' code sets it; a
    model loaded from a checkpoint keeps the K its arguments carry."""
    data = tmp_path / "data"
    shutil.copytree(synthetic_bin, data)
    path = fertility_path(data, "train", "src", "tgt")
    lines = path.read_text().splitlines()
    lines[0] = " ".join(["13", *lines[0].split()[1:]])
    path.write_text("\n".join(lines) + "\n")
    flags = ["sparse_lstm", [*LSTM, *CONSTRAINED, *PREDICTOR]]
    task, model = build(data, *flags)
    assert model.fertility_predictor.max_fertility == 13
    assert model.fertility_predictor.classify.out_features == 13
    _, default = build(synthetic_bin, *flags)             # gold counts are at most 3
    assert default.fertility_predictor.classify.out_features == 10
    loaded = task.build_model(parse(data, *flags), from_checkpoint=True)
    assert loaded.fertility_predictor.classify.out_features == 10


def fertility_criterion(task, only=False):
    return criterions.build_criterion(Namespace(
        criterion="label_smoothed_cross_entropy_with_fertility", sentence_avg=False,
        label_smoothing=0.1, ignore_prefix_size=0, report_accuracy=False,
        fertility_loss_weight=1.0, fertility_loss_only=only), task)


def touched_by(model, loss):
    """ids of the parameters ``loss`` has a non-zero gradient for."""
    model.zero_grad()
    loss.backward()
    return {id(p) for p in model.parameters() if p.grad is not None and p.grad.abs().sum() > 0}


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_predictor_and_translation_losses_do_not_share_gradients(synthetic_bin, arch):
    flags = [*CONSTRAINED, *PREDICTOR] if arch == "lstm" else PREDICTOR
    task, model = (lstm if arch == "lstm" else transformer)(synthetic_bin, *flags)
    model.train()
    sample = batch(task, split="train", size=6)
    predictor = {id(p) for p in model.fertility_predictor.parameters()}
    translation = {id(p) for p in model.parameters()} - predictor

    both = fertility_criterion(task)
    loss, _, log = both(model, sample)
    assert log["fert_tokens"] > 0 and log["fert_loss"] > 0
    assert touched_by(model, loss) >= predictor | {id(model.decoder.embed_tokens.weight)}
    translation_only = LabelSmoothedCrossEntropyCriterion.forward(both, model, sample)[0]
    assert not touched_by(model, translation_only) & predictor
    only = fertility_criterion(task, only=True)
    assert not touched_by(model, only(model, sample)[0]) & translation


def test_logged_loss_is_the_translation_loss_so_rows_compare_alike(synthetic_bin):
    """Validation, the best checkpoint and early stopping read the logged ``loss``: with a
    predictor it is the translation loss a model without one logs, not the sum trained."""
    task, model = lstm(synthetic_bin, *CONSTRAINED, *PREDICTOR)
    model.eval()
    sample = batch(task, split="valid", size=6)
    both = fertility_criterion(task)
    with torch.no_grad():
        total, _, log = both(model, sample)
        plain = LabelSmoothedCrossEntropyCriterion.forward(both, model, sample)[2]
        only, _, only_log = fertility_criterion(task, only=True)(model, sample)
    assert log["fert_loss"] > 0
    assert log["loss"] == pytest.approx(plain["loss"].item())
    assert log["nll_loss"] == pytest.approx(plain["nll_loss"].item())
    assert total.item() == pytest.approx(plain["loss"].item() + log["fert_loss"].item())
    assert only_log["loss"] == pytest.approx(only.item())
    assert only.item() == pytest.approx(log["fert_loss"].item())
