"""The reproduction driver: a paper config runs end to end in smoke mode, and bad
configs or a missing corpus stop with one clear line before anything is written.
The Malaviya et al. config adds METEOR, REP and DROP, generation flags per row and
fertility data from the corpus (gold) or from an aligner the run trains."""

import json
import re
import shlex
import shutil
from collections import Counter
from pathlib import Path

import pytest
from fairseq import options

from sparse_attn_data import recipe, wmt14_en_de
from sparse_attn_data.synthetic import binarize, build_lexicon, write_corpus
from sparse_attn_experiments import pipeline, reproduce
from sparse_attn_experiments.reproduction import batch, fertility_data
from sparse_attn_experiments.reproduction import config as reproduction_config
from sparse_attn_experiments.reproduction import plan as reproduction_plan
from sparse_attn_experiments.reproduction.plan import flag_value
from sparse_attn_plugin.evaluation import Meteor
from sparse_attn_plugin.evaluation.aligner import Aligner
from sparse_attn_plugin.tasks.sparse_translation import read_fertilities

from helpers import PLUGIN, REPO, needs_java
from helpers.fakes import fake_generate, fake_train
from helpers.metrics import assert_decodings_score_their_outputs, keeping_outputs, read_outputs

pytestmark = pytest.mark.usefixtures("fast_fairseq")

CONFIG = REPO / "configs" / "xu2021_hard_attention.json"


@pytest.mark.slow
def test_hard_attention_smoke_runs_every_table_row(tmp_path, monkeypatch):
    monkeypatch.setattr(reproduce, "SMOKE_CORPUS", {"train": 600, "valid": 20, "test": 30})
    reproduce.main([CONFIG, "--smoke", "--updates", "2", "--work-dir", tmp_path / "work"])
    out = tmp_path / "work" / "report"  # without --out: the work folder, not results/
    record = json.loads((out / "smoke.json").read_text())
    config = reproduction_config.load_config(CONFIG)
    rows = [row for table in config.tables for row in table.rows]
    assert set(record["decoded"]) == {reproduction_plan.decoding_key(row) for row in rows}
    assert len(record["decoded"]) == 6  # 4 trained models + 2 decode-time switches
    for decoded in record["decoded"].values():
        assert decoded["sentences"] == 30 and decoded["sentences_per_second"] > 0
    # each BLEU recomputed with sacrebleu from the translations fairseq-generate saved
    # (one log a decoding), with the smoke settings' options
    assert_decodings_score_their_outputs(
        {key: {"bleu": d["bleu"]} for key, d in record["decoded"].items()},
        read_outputs(sorted((tmp_path / "work").glob("generate-*.log"))),
        bleu=config.run_settings(True).bleu, rep=False)
    assert set(record["trained"]) == set(config.models)
    report = (out / "smoke.md").read_text()
    assert "SMOKE RUN" in report and "- commit:" in report
    for table in config.tables:
        assert f"## {table.title}" in report
    assert "| soft trained, hard decoded | softmax | decoder_cross_attn_fn=hard, " in report
    assert "| 26.30 |" in report  # the paper's figure beside ours
    switched = (tmp_path / "work" / "generate-softmax-decoder-cross-attn-fn-hard-decoder-self"
                "-attn-fn-hard.log").read_text()
    assert "'decoder_cross_attn_fn': 'hard'" in switched

    # fairseq drops a last batch under 8 sentences unless told otherwise: caught, not scored
    with pytest.raises(RuntimeError, match="translated 24 of 30 sentences"):
        pipeline.generate(tmp_path / "work" / "bin", tmp_path / "work" / "softmax" /
                          "checkpoint_last.pt", ["--cpu", "--batch-size", "128",
                                                 "--required-batch-size-multiple", "8",
                                                 "--beam", "1", "--max-len-b", "5"],
                          tmp_path / "dropped.log")


def test_hard_attention_config_follows_xu_et_al_section_4_1():
    """Joint BPE with 32k merges, newstest2012+2013 to validate, training sentences of at
    most 256 subwords, the average of the last 5 checkpoints saved every 1,500 updates,
    25k tokens per update, and attention dropout 0.1 on P before sampling (Neutron)."""
    config = reproduction_config.load_config(CONFIG)
    flags = config.train_flags
    assert flag_value(flags, "--attention-dropout") == "0.1"
    assert flag_value(flags, "--save-interval-updates") == "1500"
    assert flag_value(flags, "--keep-interval-updates") == "5" and config.average_last == 5
    assert reproduction_plan.averaging_problem(config, False) is None
    command = shlex.split(config.prepare)
    assert command[:3] == ["python", "-m", "sparse_attn_data.wmt14_en_de"]
    prepare = recipe.build_parser(wmt14_en_de.RECIPE).parse_args(command[3:])
    assert (prepare.size, prepare.valid, prepare.max_train_subwords) == (
        32000, "newstest2012+newstest2013", 256)
    assert Path(config.data).name == prepare.name
    _, said = batch.keep_batch(flags, config.batch["gpus"])
    assert "= 25,000 tokens per update" in said
    assert "no checkpoint averaging" not in config.settings_note


def write(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize("make,message", [
    (lambda d: d / "nope.json", "no such config file"),
    (lambda d: write(d / "bad.json", "{\n  'name': 1\n}"), "invalid JSON at line 2"),
    (lambda d: write(d / "short.json", '{"name": "x"}'), "missing paper, settings_note"),
])
def test_bad_config_gives_one_clear_line(tmp_path, capsys, make, message):
    with pytest.raises(SystemExit) as exit_info:
        reproduce.main([make(tmp_path), "--smoke", "--out", tmp_path / "out"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in err
    assert not (tmp_path / "out").exists()


def test_row_using_an_undefined_model_is_named(tmp_path, capsys):
    config = json.loads(CONFIG.read_text())
    config["tables"][0]["rows"][0]["model"] = "hard nowhere"
    path = write(tmp_path / "c.json", json.dumps(config))
    with pytest.raises(SystemExit):
        reproduce.main([path, "--smoke"])
    assert "uses model 'hard nowhere', which `models` does not define" in capsys.readouterr().err


def test_full_run_without_the_corpus_says_how_to_prepare_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        reproduce.main([CONFIG, "--data", tmp_path / "missing", "--out", tmp_path / "out"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "no binarised corpus in" in err and "python -m sparse_attn_data.wmt14_en_de" in err
    assert not (tmp_path / "out").exists()


# -- Malaviya et al. (2018): more metrics, generation flags, fertility sources ----------------

MALAVIYA = REPO / "configs" / "malaviya2018_constrained.json"
TINY_CORPUS = {"train": 600, "valid": 20, "test": 30}


def edited(tmp_path, edit, source=MALAVIYA):
    config = json.loads(source.read_text())
    edit(config)
    return write(tmp_path / "edited.json", json.dumps(config))


def test_constrained_config_plans_every_model_and_fertility_source():
    config = reproduction_config.load_config(MALAVIYA)
    smoke = [row for _, rows in reproduction_plan.resolve_tables(config, True) for row in rows]
    full = [row for _, rows in reproduction_plan.resolve_tables(config, False) for row in rows]
    # 10 models; in the smoke run the GUIDED and PREDICTED csparsemax models train
    # twice, on the gold fertilities and on the aligner's
    assert len({row["train"] for row in smoke}) == 13 and len({r["key"] for r in smoke}) == 15
    # Table 1's ja-en and ro-en columns retrain its 6 models there (full runs only)
    assert len({row["train"] for row in full}) == 22 and len({r["key"] for r in full}) == 28
    assert {r["corpus"] for r in full} == {None, "ja-en", "ro-en"}
    assert {r["corpus"] for r in smoke} == {None}
    assert {r["source"] for r in full} == {None, "aligner"}  # no gold corpus for IWSLT
    sources = {(r["model"], r["source"]) for r in smoke}
    for model in ("csparsemax GUIDED", "csparsemax PREDICTED c=0", "csparsemax PREDICTED c=0.2"):
        assert {(model, "gold"), (model, "aligner")} <= sources
    assert ("csoftmax PREDICTED c=0.2", "gold") in sources
    for model in ("softmax", "sparsemax", "csparsemax CONSTANT f=2"):
        assert (model, None) in sources  # reads no fertility data: trained once
    penalty = [r for r in smoke if r.get("generate")]
    assert [r["model"] for r in penalty] == ["softmax", "sparsemax"]
    assert penalty[0]["train"] == "softmax" and penalty[0]["key"] != smoke[0]["key"]


def test_constrained_config_trains_the_lstm_as_the_authors_did():
    """Every full-run model divides the loss by sentences, as the authors' OpenNMT fork
    (``-normalization sents``), and the CovVector rows score the authors' form
    ``(W s + v beta_j)^T h_j``: read from the flags as fairseq-train reads them."""
    config = reproduction_config.load_config(MALAVIYA)
    rows = [row for _, rows in reproduction_plan.resolve_tables(config, False) for row in rows]
    covvector = 0
    for row in rows:
        flags = [*config.run_settings(False, row["corpus"]).train_flags,
                 *config.models[row["model"]]]
        args = options.parse_args_and_arch(options.get_training_parser(),
                                           ["data", "--user-dir", PLUGIN, *flags])
        assert args.sentence_avg, row["label"]
        if "CovVector" in row["label"]:
            assert args.coverage_vector and args.coverage_vector_form == "reference"
            covvector += 1
    assert covvector == 6  # softmax and sparsemax + CovVector, three corpora


def test_fertility_flags_and_post_processing_are_read_like_fairseq():
    reads = reproduction_plan.reads_fertility_data
    assert reads(["--fertility", "predicted"]) and reads(["--fertility=predicted"])
    assert reads(["--fertility", "guided", "--fertility-table", "{guided_table}"])
    assert not reads(["--fertility", "guided", "--fertility-table", "/some/table.tsv"])
    assert not reads(["--fertility", "predicted", "--fertility", "constant"])  # last one counts
    assert not reads(["--attn-fn", "softmax"])
    post = reproduction_plan.post_process_of
    assert post(["--remove-bpe", "--beam", "5"]) == "subword_nmt" == post(["--remove-bpe"])
    assert post(["--remove-bpe", "sentencepiece"]) == "sentencepiece"
    assert post(["--post-process=none"]) is None and post(["--beam", "5"]) is None


@needs_java
def test_constrained_smoke_wires_fertility_sources_generation_flags_and_metrics(
        tmp_path, monkeypatch, synthetic_bin):
    """The whole Malaviya config in smoke mode with fairseq's two commands faked: which
    data, flags and checkpoints each model gets; real aligner, METEOR, REP and DROP."""
    trained, generated, outputs = [], [], []
    monkeypatch.setattr(reproduce, "SMOKE_CORPUS", TINY_CORPUS)
    monkeypatch.setattr(pipeline, "train", fake_train(trained))
    monkeypatch.setattr(pipeline, "generate", keeping_outputs(fake_generate(generated), outputs))
    work, out = tmp_path / "work", tmp_path / "out"
    reproduce.main([MALAVIYA, "--smoke", "--data", synthetic_bin, "--updates", "3",
                    "--work-dir", work, "--out", out])

    by_name = {call["name"]: call for call in trained}
    assert len(by_name) == len(trained) == 13
    aligner_data, gold_data = work / "data-aligner", Path(synthetic_bin)
    for name, call in by_name.items():
        assert call["data"] == (aligner_data if "[aligner" in name else gold_data), name
        assert not any("{" in flag for flag in call["flags"]), name
        if "PREDICTED" in name:
            assert "label_smoothed_cross_entropy_with_fertility" in call["flags"]
    tables = {}
    for source in ("gold", "aligner"):
        flags = by_name[f"csparsemax GUIDED [{source} fertilities]"]["flags"]
        tables[source] = Path(flags[flags.index("--fertility-table") + 1])
        assert tables[source].is_file()
    assert tables["gold"] != tables["aligner"]

    # the gold GUIDED table is the synthetic lexicon's own fertility (at least 1)
    lexicon = build_lexicon()
    for line in tables["gold"].read_text().splitlines():
        word, fertility = line.split("\t")
        assert int(fertility) == max(1, lexicon.fertility[lexicon.src_words.index(word)])
    # the aligner's copy of the corpus: the binarised data and the aligner's fertilities,
    # readable by --task sparse_translation
    names = {p.name for p in aligner_data.iterdir()}
    assert "dict.src.txt" in names and "train.src-tgt.src.bin" in names
    assert not {"train.align", "test.src-tgt.fert", "MANIFEST.json"} & names
    corpus = fertility_data.Corpus(synthetic_bin, tmp_path / "check")
    for split in ("train", "valid"):
        path = aligner_data / f"{split}.src-tgt.fert"
        assert not path.is_symlink()
        lengths = [len(line.split()) for line in corpus.lines(split, "src")]
        assert len(read_fertilities(path, lengths)) == len(lengths)
        assert path.read_text() != (gold_data / f"{split}.src-tgt.fert").read_text()

    assert len(generated) == 15
    penalty = [call for call in generated if "--coverage-penalty-beta" in call["flags"]]
    assert [call["checkpoint"].parent.name for call in penalty] == ["softmax", "sparsemax"]
    flags = " ".join(penalty[0]["flags"])
    assert "--beam 5 --batch-size 128 --gen-subset test --coverage-penalty-beta 0.2 " \
           "--lenpen 0.2" in flags
    record = json.loads((out / "smoke.json").read_text())
    assert len(record["decoded"]) == 15 and record["metrics"] == ["BLEU", "METEOR", "REP", "DROP"]
    for decoded in record["decoded"].values():
        assert set(decoded["drop_by_symmetrization"]) == {"grow-diag-final-and", "forward"}
    ((path, aligner),) = record["aligners"].items()  # one aligner: no BPE to undo here
    assert aligner["pairs"] == 300 and aligner["sink_token"] == "<SINK>"
    # every metric recomputed from the translations each decoding scored (what the fake
    # generate returned): sacrebleu's BLEU, Meteor 1.5 of its own, REP and DROP as
    # Malaviya et al.'s scripts with the aligner the run saved; the fake leaves something
    # for REP and DROP to find, so neither is zero
    config = reproduction_config.load_config(MALAVIYA)
    with Meteor(config.smoke.meteor["language"]) as meteor:
        assert_decodings_score_their_outputs(
            record["decoded"], outputs, bleu=config.smoke.bleu, meteor=meteor,
            aligner=Aligner.load(path),
            symmetrizations=reproduction_plan.drop_settings(config, True)["symmetrize"])
    assert all(d["rep"] > 0 and d["drop"] > 0 for d in record["decoded"].values())

    report = (out / "smoke.md").read_text()
    assert "**symmetrisation: grow-diag-final-and** (also forward" in report
    assert "Meteor 1.5 `-l other -lower`" in report and "Run time:" in report
    assert "## Table 2 with the trained aligner's fertilities" in report
    assert ("| softmax + CovPenalty | softmax | - | --coverage-penalty-beta 0.2 --lenpen 0.2 |"
            in report)
    assert "| 29.85 | " in report and "| 5.23 |" in report  # the paper's figures
    assert "| csparsemax GUIDED [aligner fertilities] | aligner | 3 |" in report
    # the GUIDED table of the synthetic corpus's gold fertilities is an oracle, and says so
    assert "| GUIDED (oracle: gold fertilities) | csparsemax GUIDED | gold |" in report
    assert "| GUIDED | csparsemax GUIDED | aligner |" in report


def test_constrained_model_on_the_aligners_fertilities_really_trains_and_decodes(
        tmp_path, monkeypatch, synthetic_bin):
    """fairseq-train reads the aligner's fertility files from the symlinked corpus and
    trains the predictor; fairseq-generate decodes it with the coverage penalty."""
    def edit(config):
        config["metrics"] = ["BLEU", "REP"]
        config["tables"] = [{"title": "one", "fertility_source": "aligner", "rows": [
            {"label": "csparsemax + CovPenalty", "model": "csparsemax PREDICTED c=0.2",
             "generate": ["--coverage-penalty-beta", "0.2", "--lenpen", "0.2"]}]}]
    monkeypatch.setattr(reproduce, "SMOKE_CORPUS", TINY_CORPUS)
    reproduce.main([edited(tmp_path, edit), "--smoke", "--data", synthetic_bin, "--updates", "4",
                    "--work-dir", tmp_path / "work", "--out", tmp_path / "out"])
    record = json.loads((tmp_path / "out" / "smoke.json").read_text())
    (decoded,) = record["decoded"].values()
    assert decoded["sentences"] == 40
    # BLEU (sacrebleu) and REP (as rep_score.py) recomputed from the saved translations
    assert_decodings_score_their_outputs(
        record["decoded"], read_outputs((tmp_path / "work").glob("generate-*.log")),
        bleu=json.loads(MALAVIYA.read_text())["smoke"]["bleu"])
    log = (tmp_path / "work" / "csparsemax-predicted-c-0-2-aligner-fertilities" /
           "train.log").read_text()
    assert f"fertilities of 300 train sentences from {tmp_path / 'work' / 'data-aligner'}" in log
    assert '"train_fert_loss"' in log


@pytest.mark.slow  # about 75 s on one core: in every run since it no longer takes 4 minutes
def test_constrained_smoke_runs_every_table_row(tmp_path, monkeypatch):
    monkeypatch.setattr(reproduce, "SMOKE_CORPUS", TINY_CORPUS)
    reproduce.main([MALAVIYA, "--smoke", "--updates", "2", "--work-dir", tmp_path / "work",
                    "--out", tmp_path / "out"])
    record = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert len(record["trained"]) == 13 and len(record["decoded"]) == 15
    assert all(decoded["sentences"] == 30 for decoded in record["decoded"].values())
    config = reproduction_config.load_config(MALAVIYA)
    ((path, _),) = record["aligners"].items()
    with Meteor(config.smoke.meteor["language"]) as meteor:
        assert_decodings_score_their_outputs(
            record["decoded"], read_outputs((tmp_path / "work").glob("generate-*.log")),
            bleu=config.smoke.bleu, meteor=meteor, aligner=Aligner.load(path),
            symmetrizations=reproduction_plan.drop_settings(config, True)["symmetrize"])


@pytest.mark.parametrize("edit,message", [
    (lambda c: c.update(metric=["BLEU"]), "unknown key 'metric' in the config; known:"),
    (lambda c: c["smoke"].update(meteors={}), "unknown key 'meteors' in `smoke`"),
    (lambda c: c.update(metrics=["BLEU", "BERTScore"]), "`metrics` must be a list of BLEU,"),
    (lambda c: c.pop("meteor"), "METEOR needs `meteor`"),
    (lambda c: c["smoke"].update(meteor={"language": "fr"}),
     "`smoke.meteor.language` must be one of en, de, other, not 'fr'"),
    (lambda c: c.update(drop={"symmetrize": "gdfa"}), "`drop.symmetrize` must be one or a list"),
    (lambda c: c["models"]["softmax"].append("{guided}"),
     "model 'softmax' has the unknown placeholder {guided}; the driver fills {guided_table}"),
    (lambda c: c["tables"][0]["rows"][1]["generate"].append("{guided_table}"),
     "placeholder {guided_table}; the driver fills placeholders in training flags only"),
    (lambda c: c["tables"][4].update(fertility_source="silver"),
     "`fertility_source` of table \"Table 2 with the trained aligner's fertilities"),
    (lambda c: c["tables"][0]["rows"][1].update(generation=[]),
     "unknown key 'generation' in row 'softmax + CovPenalty' of 'Table 1:"),
    (lambda c: c["tables"][0]["rows"][0]["paper"].update(BLUE=1.0),
     "unknown key 'BLUE' in `paper` of row 'softmax'"),
    (lambda c: c["tables"][1]["rows"][0].pop("model"), "needs a `label` and a `model`"),
    (lambda c: c["tables"][1].update(corpus="fr-en"),
     "trains on corpus 'fr-en', which `corpora` does not define"),
    (lambda c: c["corpora"]["ja-en"].pop("prepare"), "corpus 'ja-en' needs `data` and `prepare`"),
    (lambda c: c["tables"][1].update(smoke_only=True), "so it cannot be `smoke_only`"),
])
def test_bad_constrained_config_gives_one_clear_line(tmp_path, capsys, edit, message):
    with pytest.raises(SystemExit) as exit_info:
        reproduce.main([edited(tmp_path, edit), "--smoke", "--out", tmp_path / "out"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and "edited.json" in err[-1]
    assert not (tmp_path / "out").exists()


@needs_java
def test_full_run_trains_and_decodes_each_corpus_on_its_own_data(
        tmp_path, monkeypatch, synthetic_bin):
    """Table 1's other language pairs: each corpus's models train on its data with its
    own aligner's fertilities, and are decoded and scored there."""
    corpora = {}
    for name, seed in (("ja-en", 2), ("ro-en", 3)):
        write_corpus(tmp_path / name / "raw", train=300, valid=10, test=12, seed=seed)
        corpora[name] = Path(binarize(tmp_path / name / "raw", tmp_path / name / "bin"))
    trained, generated = [], []
    monkeypatch.setattr(pipeline, "train", fake_train(trained))
    monkeypatch.setattr(pipeline, "generate", fake_generate(generated))
    monkeypatch.setattr(pipeline, "cpu_refusal", lambda flags: None)  # the fakes take --fp16
    work, out = tmp_path / "work", tmp_path / "out"
    reproduce.main([MALAVIYA, "--data", synthetic_bin, "--updates", "3", "--work-dir", work,
                    "--out", out, *(f"--corpus-data={n}={d}" for n, d in corpora.items()),
                    "--train-flags=--fp16 --fp16-init-scale 8", "--generate-flags=--fp16"])

    by_name = {call["name"]: call for call in trained}
    assert len(by_name) == len(trained) == 22
    # flags a user adds reach every training and decoding on every corpus, after the
    # config's own (fairseq takes the last of a repeated flag)
    config_flags = reproduction_config.load_config(MALAVIYA).train_flags
    for call in trained:
        flags = call["flags"]
        assert flags[flags.index("--fp16"):flags.index("--fp16") + 3] == [
            "--fp16", "--fp16-init-scale", "8"]
        assert flags.index("--fp16") > flags.index(config_flags[-1])
    assert all("--fp16" in call["flags"] for call in generated) and len(generated) == 28
    for name, call in by_name.items():
        corpus = next((c for c in corpora if f"[{c}" in name), None)
        folder = work / (corpus or ".") / "data-aligner"
        expected = folder if "aligner fertilities" in name else corpora.get(corpus, synthetic_bin)
        assert call["data"] == expected, name
    assert "csparsemax PREDICTED c=0.2 [ro-en, aligner fertilities]" in by_name
    assert not any("ja-en" in name and "CONSTANT" in name for name in by_name)  # Table 2: de-en
    record = json.loads((out / "results.json").read_text())
    # per corpus: an aligner on the units the model reads (fertilities), one on the words
    # fairseq-generate --remove-bpe prints (DROP)
    assert len(record["decoded"]) == 28 and len(record["aligners"]) == 6
    sentences = Counter(d["sentences"] for d in record["decoded"].values())
    assert sentences == {40: 12, 12: 16}  # de-en: the synthetic test set; 8 rows per pair
    assert {a["corpus"] for a in record["aligners"].values()} == {None, "ja-en", "ro-en"}
    report = (out / "README.md").read_text()
    assert "## Table 1: attention transforms and coverage baselines, KFTT Ja-En" in report
    assert "| 21.31 |" in report and "| 1.98 |" in report  # ja-en BLEU, ro-en REP (paper)
    assert "300 (ja-en), 300 (ro-en) training pairs" in report


def test_gold_fertilities_missing_from_a_corpus_are_named(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("dict.de.txt", "dict.en.txt", "train.de-en.de.idx", "train.de-en.en.idx"):
        (data / name).write_text("")
    path = edited(tmp_path, lambda c: c.update(fertility_source="gold"))
    with pytest.raises(SystemExit):
        reproduce.main([path, "--data", data, "--corpus-data", f"ja-en={data}",
                        "--corpus-data", f"ro-en={data}", "--out", tmp_path / "out"])
    err = capsys.readouterr().err
    assert f"{data / 'train.de-en.fert'} does not exist" in err
    assert '"fertility_source": "aligner"' in err


def test_full_run_names_a_missing_corpus_and_its_flag(tmp_path, capsys, synthetic_bin):
    with pytest.raises(SystemExit):
        reproduce.main([MALAVIYA, "--data", synthetic_bin, "--corpus-data",
                        f"ja-en={synthetic_bin}", "--out", tmp_path / "out"])
    err = capsys.readouterr().err
    assert "no binarised corpus in" in err and "wmt16_ro_en_bpe32k" in err
    assert "--corpus-data ro-en=DIR" in err
    with pytest.raises(SystemExit):
        reproduce.main([MALAVIYA, "--corpus-data", f"fr-en={synthetic_bin}"])
    assert "--corpus-data fr-en=DIR: the config's corpora are ja-en, ro-en" in \
        capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_java_stops_the_run_before_any_training(tmp_path, capsys, monkeypatch,
                                                        synthetic_bin):
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "java" else which(name))
    monkeypatch.setattr(reproduce, "SMOKE_CORPUS", TINY_CORPUS)
    monkeypatch.setattr(pipeline, "train", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(SystemExit):
        reproduce.main([MALAVIYA, "--smoke", "--data", synthetic_bin, "--work-dir",
                        tmp_path / "work", "--out", tmp_path / "out"])
    assert "METEOR needs Java" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bpe_corpus_gets_fertilities_per_bpe_unit_and_drop_aligner_on_words(tmp_path):
    """As on IWSLT: fertilities must count the units the model reads, DROP's aligner
    the words that fairseq-generate --remove-bpe prints."""
    raw, bpe = tmp_path / "raw", tmp_path / "bpe"
    write_corpus(raw, train=200, valid=10, test=10)
    bpe.mkdir()
    for path in raw.iterdir():
        text = path.read_text()
        if path.suffix in (".src", ".tgt"):  # "bato" -> "ba@@ to"
            text = re.sub(r"\b(\w\w)(\w+)", r"\1@@ \2", text)
        if path.name != "MANIFEST.json":
            (bpe / path.name).write_text(text)
    corpus = fertility_data.Corpus(binarize(bpe, tmp_path / "bin"), tmp_path / "work")
    aligners = fertility_data.Aligners(corpus, tmp_path / "work", iterations=2)
    data = fertility_data.aligner_fertility_data(corpus, aligners, tmp_path / "work")
    units = [len(line.split()) for line in corpus.lines("train", "src")]
    assert read_fertilities(data.data / "train.src-tgt.fert", units)  # one per BPE unit
    assert "@@" in data.guided_table.read_text()
    words = aligners.load("subword_nmt")
    assert set(aligners.models) == {None, "subword_nmt"}
    assert words.manifest["pairs"] == 200
    assert not any("@@" in w for w in words.manifest["src_vocab_sample"])
    assert corpus.lines("train", "src", "subword_nmt")[0] == (raw / "train.src").read_text(
    ).splitlines()[0]


# -- Tsai et al. (2019): attention parameters, models that may diverge ---------------------------

TSAI = REPO / "configs" / "tsai2019_kernel.json"


def test_kernel_config_reports_diverged_models_and_attention_parameters(
        tmp_path, monkeypatch, synthetic_bin):
    """Linear-kernel trainings that fail are reported in their rows, not fatal; every
    other row gets BLEU and its model's attention parameters."""
    trained, generated = [], []
    train = fake_train(trained)

    def diverging(data, save_dir, flags, max_update, desc="", **kwargs):
        if desc.startswith("linear"):
            raise RuntimeError("fairseq-train failed: FloatingPointError: loss is nan")
        return train(data, save_dir, flags, max_update, desc, **kwargs)

    monkeypatch.setattr(pipeline, "train", diverging)
    monkeypatch.setattr(pipeline, "generate", fake_generate(generated))
    monkeypatch.setattr(reproduce, "attention_parameters", lambda path: len(str(path)))
    reproduce.main([TSAI, "--smoke", "--data", synthetic_bin, "--updates", "3",
                    "--work-dir", tmp_path / "work", "--out", tmp_path / "out"])
    record = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert len(record["trained"]) == 17 and len(generated) == 15  # 2 linear models failed
    failed = {name for name, t in record["trained"].items() if "failed" in t}
    assert failed == {"linear, asymmetric", "linear, symmetric"}
    report = (tmp_path / "out" / "smoke.md").read_text()
    assert "| linear, asymmetric | linear, asymmetric | as trained | did not train | " \
           "did not converge | - |" in report
    assert "Trainings that failed" in report and "loss is nan" in report
    assert "attention parameters (ours, synthetic smoke)" in report


def test_kernel_config_trains_vaswanis_model_for_the_direct_sum_rows():
    """Table 1's direct sum, every kernel of Table 2 and Table 4's direct sum with value
    PE (33.98 each) add positions once, to the embeddings; Table 4's direct sum without
    value PE adds them at every site; no other row is a direct sum."""
    config = reproduction_config.load_config(TSAI)
    plan = {}
    for table, rows in reproduction_plan.resolve_tables(config, False):
        for row in rows:
            flags = [*config.train_flags, *config.models[row["model"]]]
            plan[table.title.split(":")[0], row["row"]] = (
                reproduction_plan.flag_value(flags, "--pe-integration", "direct_sum"),
                "--no-value-pe" in flags)
    direct = {mode: [key for key, (pe, _) in plan.items() if pe == mode]
              for mode in ("direct_sum_input", "direct_sum")}
    assert direct["direct_sum_input"] == [("Table 1", 0), *(("Table 2", i) for i in range(8)),
                                          ("Table 4", 0)]
    assert direct["direct_sum"] == [("Table 4", 1)] and plan["Table 4", 1][1]
    assert {plan["Table 2", i][1] for i in range(8)} == {False}


def test_a_model_that_may_not_diverge_still_stops_the_run(tmp_path, monkeypatch, synthetic_bin):
    def failing(*args, **kwargs):
        raise RuntimeError("fairseq-train failed: out of memory")

    monkeypatch.setattr(pipeline, "train", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        reproduce.main([TSAI, "--smoke", "--data", synthetic_bin, "--updates", "3",
                        "--work-dir", tmp_path / "work", "--out", tmp_path / "out"])
    assert not (tmp_path / "out").exists()


def test_attention_parameters_count_every_attention_site(tmp_path, synthetic_bin):
    import torch

    from helpers.models import build

    _, model = build(synthetic_bin, "kernel_transformer", ["--pe-integration", "product_sym"])
    torch.save({"model": model.state_dict()}, tmp_path / "checkpoint.pt")
    expected = sum(p.numel() for name, p in model.named_parameters()
                   if "self_attn." in name or "encoder_attn." in name)
    assert reproduce.attention_parameters(tmp_path / "checkpoint.pt") == expected > 0


def test_the_time_estimate_of_trainings_that_end_by_epochs_counts_their_tokens(synthetic_bin,
                                                                               monkeypatch):
    """Malaviya et al.'s models train 13 epochs: at W target tokens/s, 13 x the training
    target tokens / W each; the run's --updates makes them end by updates instead."""
    config = reproduction_config.load_config(MALAVIYA)
    runs = [("a", None, None, None, None), ("b", None, None, None, None)]
    target = fertility_data.target_tokens(synthetic_bin)
    assert target == sum(len(line.split()) + 1 for line in fertility_data.Corpus(
        synthetic_bin, Path(".")).lines("train", "tgt"))  # end-of-sentence included
    datas = {"a": synthetic_bin, "b": synthetic_bin}
    minutes = 2 * 13 * target / 100.0 / 60
    line = reproduce.time_estimate(config, runs, datas, False, None, 1.0, 100.0)
    assert 5 < minutes < 90 and f"the 2 trainings take about {minutes:.0f} minutes here" in line
    assert "under a minute" in reproduce.time_estimate(config, runs, datas, False, 20, 1.0, 10.0)
    # the plan says so before training
    monkeypatch.setattr(batch, "visible_gpus", lambda: 0)  # what a CPU-only machine says
    rows = [row for _, table in reproduction_plan.resolve_tables(config, False) for row in table]
    plan = reproduce.plan(config, rows, dict.fromkeys([None, "ja-en", "ro-en"], synthetic_bin),
                          False, None)
    assert plan[0] == "plan: 22 trainings on the CPU (no GPU visible), then 28 decodings"
    assert f"  train 'softmax': 13 epochs of {target:,} target tokens each" in plan


def test_the_plan_says_what_it_trains_on_and_gpu_flags_are_refused_on_a_cpu(
        tmp_path, monkeypatch, capsys, synthetic_bin):
    """The plan names the GPUs it trains on, or the CPU where none is visible (never "x 1
    GPU" there); ``--train-flags=--fp16`` where no GPU is visible stops the command as typed
    before anything is written, in one line; --help says --out is created."""
    import subprocess

    import torch

    config = reproduction_config.load_config(CONFIG)
    rows = [row for _, table in reproduction_plan.resolve_tables(config, True) for row in table]
    datas = {None: synthetic_bin}
    monkeypatch.setattr(batch, "visible_gpus", lambda: 0)
    cpu = reproduce.plan(config, rows, datas, True, None)
    assert cpu[0].startswith("plan: 4 trainings on the CPU (no GPU visible), then ")
    assert all("GPU" not in line for line in cpu[1:])
    assert "x update-freq 1 x 1 CPU process = " in cpu[1]
    monkeypatch.setattr(batch, "visible_gpus", lambda: 2)
    gpus = reproduce.plan(config, rows, datas, True, None)
    assert gpus[0].startswith("plan: 4 trainings on 2 GPUs, then ")
    assert "x update-freq 1 x 2 GPUs = " in gpus[1]
    monkeypatch.undo()

    typed = [str(REPO / ".venv" / "bin" / "sparse-attn-reproduce"), str(CONFIG), "--smoke",
             "--out", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work")]
    if not torch.cuda.is_available():
        refused = subprocess.run([*typed, "--train-flags=--fp16 --update-freq 2"],
                                 capture_output=True, text=True, cwd=tmp_path)
        assert (refused.returncode, refused.stdout) == (1, "")
        assert refused.stderr == (
            "sparse-attn-reproduce: error: --train-flags '--fp16 --update-freq 2': "
            "fairseq-train cannot train with --fp16 without a GPU, and this machine shows "
            "none (torch.cuda.is_available() is False) (see sparse-attn-reproduce --help)\n")
        assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()
    shown = subprocess.run([typed[0], "--help"], capture_output=True, text=True)
    assert "the folder the report goes to, created with its parents where missing" in " ".join(
        shown.stdout.split())
