"""The Explicit Sparse (Zhao et al. 2019) and Adaptively Sparse (Correia et al. 2019)
reproductions: seeds averaged per row, decoding on the validation split, checkpoint
averaging, training speed ratios, per-corpus settings and one report per table."""

import json
import re
import statistics
from pathlib import Path

import pytest
import torch

from sparse_attn_data.synthetic import binarize, write_corpus
from sparse_attn_experiments import pipeline, reproduce
from sparse_attn_experiments.reproduction import batch, selection
from sparse_attn_experiments.reproduction import config as reproduction_config
from sparse_attn_experiments.reproduction import plan as reproduction_plan
from sparse_attn_experiments.reproduction.plan import flag_value
from sparse_attn_plugin.evaluation import Meteor
from sparse_attn_plugin.evaluation.aligner import Aligner

from helpers import REPO, needs_java
from helpers.fakes import fake_generate, fake_train
from helpers.metrics import assert_decodings_score_their_outputs, keeping_outputs

pytestmark = pytest.mark.usefixtures("fast_fairseq")

ZHAO = REPO / "configs" / "zhao2019_explicit_sparse.json"
CORREIA = REPO / "configs" / "correia2019_adaptively_sparse.json"
TINY_CORPUS = {"train": 600, "valid": 20, "test": 30}


def edited(tmp_path, edit, source=ZHAO):
    config = json.loads(source.read_text())
    edit(config)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(config))
    return path


def average_every_two(config):
    """Smoke settings that save a checkpoint per update and average the last two."""
    flags = config["smoke"]["train_flags"]
    flags[flags.index("--save-interval-updates") + 1] = "1"
    config["smoke"]["average_last"] = 2


def planned(path, smoke):
    config = reproduction_config.load_config(path)
    rows = [row for _, rows in reproduction_plan.resolve_tables(config, smoke) for row in rows]
    return config, rows


def test_explicit_sparse_plans_seeds_splits_and_the_corpora_of_each_table():
    config, smoke = planned(ZHAO, True)
    _, full = planned(ZHAO, False)
    titles = [t.title for t, _ in reproduction_plan.resolve_tables(config, True)]
    # Table 1's En-Vi and En-De parts repeat its De-En part on the synthetic corpus;
    # Table 5 (an En-Vi table) does not: it decodes a switch on the validation split
    assert [t.split(":")[0] for t in titles] == ["Table 1", "Figure 3", "Table 4", "Table 5"]
    assert len({r["train"] for r in smoke}) == 20 and len({r["key"] for r in smoke}) == 23
    assert len({r["train"] for r in full}) == 24 and len({r["key"] for r in full}) == 27
    sweep = [r for r in smoke if r["seed"] is not None]
    assert len(sweep) == 15 and {r["subset"] for r in sweep} == {"valid"}
    assert "top-k, k = 4 [seed 3]" in {r["train"] for r in sweep}
    switch = [r for r in full if r.get("overrides")]
    assert switch[0]["corpus"] == "en-vi" and switch[0]["overrides"] == {"topk_train_only": True}
    # per-corpus settings: En-De trains the big transformer, En-Vi decodes with beam 4
    assert "sparse_transformer_vaswani_wmt_en_de_big" in config.run_settings(
        False, "en-de").train_flags
    assert "--lenpen" in config.run_settings(False, "en-vi").generate_flags
    assert config.run_setting(False, "average_last", corpus="en-vi") == 10
    assert config.run_setting(True, "average_last", corpus="en-vi") == 4
    assert reproduction_plan.averaging_problem(config, True) is None
    assert reproduction_plan.averaging_problem(config, False) is None


def test_explicit_sparse_scores_en_vi_case_insensitively():
    """Zhao et al., appendix A.2: IWSLT15 En-Vi BLEU is uncased (Table 1 and Table 5)."""
    config = reproduction_config.load_config(ZHAO)
    en_vi = [table.title.split(":")[0] for table, _ in
             reproduction_plan.resolve_tables(config, False) if table.corpus == "en-vi"]
    assert en_vi == ["Table 1", "Table 5"]
    assert config.run_settings(False, "en-vi").bleu["lowercase"] is True


def test_adaptively_sparse_plans_three_normalisers_on_four_corpora():
    config, smoke = planned(CORREIA, True)
    _, full = planned(CORREIA, False)
    assert {r["model"] for r in smoke} == {"softmax", "1.5-entmax", "alpha-entmax"}
    assert len({r["train"] for r in smoke}) == 3 and len({r["train"] for r in full}) == 12
    assert {r["corpus"] for r in full} == {None, "ja-en", "ro-en", "en-de"}
    assert config.run_setting(False, "meteor", corpus="en-de") == {"language": "de"}
    assert config.run_setting(False, "meteor", corpus="ja-en") == {"language": "en"}


@needs_java
def test_explicit_sparse_smoke_wires_seeds_splits_averages_and_speeds(
        tmp_path, monkeypatch, synthetic_bin):
    """The whole Zhao et al. config in smoke mode with fairseq's two commands faked."""
    trained, generated, outputs = [], [], []
    monkeypatch.setattr(pipeline, "train", fake_train(trained))
    monkeypatch.setattr(pipeline, "generate", keeping_outputs(fake_generate(generated), outputs))
    out = tmp_path / "out"
    reproduce.main([edited(tmp_path, average_every_two), "--smoke", "--data", synthetic_bin,
                    "--updates", "3", "--work-dir", tmp_path / "work", "--out", out])

    assert len(trained) == 20 and len(generated) == 23
    seeded = {call["name"]: call["flags"] for call in trained if "[seed" in call["name"]}
    assert len(seeded) == 15
    for name, flags in seeded.items():
        seed = re.search(r"\[seed (\d)\]", name).group(1)
        assert flags[flags.index("--seed", flags.index("--attn-fn")) + 1] == seed, name
    # every decoding reads the average of its training's last two checkpoints
    assert {call["checkpoint"].name for call in generated} == {"checkpoint_avg2.pt"}
    averaged = torch.load(generated[0]["checkpoint"], weights_only=False)["model"]["w"]
    assert averaged.tolist() == [2.5, 2.5]                # updates 2 and 3
    valid = [call for call in generated if flag_value(call["flags"], "--gen-subset") == "valid"]
    assert len(valid) == 18                               # Figure 3 (15) and Table 5 (3)
    switched = [call for call in generated if "{'topk_train_only': True}" in call["flags"]]
    assert len(switched) == 1

    record = json.loads((out / "smoke.json").read_text())
    assert record["metrics"] == ["BLEU", "METEOR", "REP", "DROP", "speed", "train_speed"]
    assert all(t["averaged"] == 2 for t in record["trained"].values())
    config = reproduction_config.load_config(ZHAO)
    # every metric recomputed from the translations each decoding scored (what the fake
    # returned, valid or test): sacrebleu's BLEU, a Meteor 1.5 of its own, REP and DROP
    # as Malaviya et al.'s scripts, with the aligner the run saved
    ((path, _),) = record["aligners"].items()
    with Meteor(config.smoke.meteor["language"]) as meteor:
        assert_decodings_score_their_outputs(
            record["decoded"], outputs, bleu=config.smoke.bleu, meteor=meteor,
            aligner=Aligner.load(path),
            symmetrizations=reproduction_plan.drop_settings(config, True)["symmetrize"])
    sweep_table = next(rows for table, rows in reproduction_plan.resolve_tables(config, True)
                       if table.title.startswith("Figure 3"))
    k4 = [record["decoded"][r["key"]]["bleu"] for r in sweep_table if r["model"] == "top-k, k = 4"]
    speed = {name: t["words_per_second"] for name, t in record["trained"].items()}

    figure3 = (out / "smoke" / "figure-3-k-iwslt14-de-en-valid.md").read_text()
    assert "mean ± standard deviation over 3 trainings (seeds 1, 2, 3)" in figure3
    assert "Decoded and scored on the valid split." in figure3
    assert f"| {statistics.mean(k4):.2f} ± {statistics.stdev(k4):.2f} |" in figure3
    assert "- commit:" in figure3 and "SMOKE RUN" in figure3
    assert "BLEU - first row" not in figure3  # seeds pooled: not paired
    table1 = (out / "smoke" / "table-1-bleu-iwslt14-de-en.md").read_text()
    # the fake translates alike for every model: each row ties with the first
    assert "| BLEU - first row, 95% interval, p (ours, synthetic smoke) |" in table1
    assert table1.count("| +0.00 [+0.00, +0.00], p 1.000 |") == table1.count("\n| ") - 2
    table4 = (out / "smoke" / "table-4-speed-and-bleu-iwslt14-de-en.md").read_text()
    ratio = speed["alpha-entmax"] / speed["softmax"]
    assert re.search(rf"\| alpha-entmax \| alpha-entmax \| as trained \|.*\| {ratio:.2f} \| "
                     r"0\.27 \|", table4)
    assert "train words/s ÷ first row (ours, synthetic smoke)" in table4
    assert "average of its last 2 saved checkpoints" in table4
    report = (out / "smoke.md").read_text()
    assert "Not in the smoke run" in report and "Table 1: BLEU, WMT14 En-De" in report
    not_run = report.split("Not in the smoke run")[1].split("\n")[0]
    assert "Table 5" not in not_run and "## Table 5: top-k in training only" in report
    assert sorted(p.name for p in (out / "smoke").iterdir()) == [
        "figure-3-k-iwslt14-de-en-valid.md", "table-1-bleu-iwslt14-de-en.md",
        "table-4-speed-and-bleu-iwslt14-de-en.md",
        "table-5-top-k-in-training-only-or-in-training-and-inference-iwslt15-en-vi-valid.md"]


@needs_java
def test_full_run_uses_each_corpus_settings(tmp_path, monkeypatch, synthetic_bin):
    """Per-corpus model, generation, BLEU and METEOR settings of the Zhao et al. config."""
    corpora = {}
    for name, seed in (("en-vi", 2), ("en-de", 3)):
        write_corpus(tmp_path / name / "raw", train=300, valid=10, test=12, seed=seed)
        corpora[name] = Path(binarize(tmp_path / name / "raw", tmp_path / name / "bin"))

    def keep_all(config):  # the fake saves one checkpoint per update: average them all
        for settings in (config, *config["corpora"].values()):
            settings["average_last"] = 3
        for settings in (config, config["corpora"]["en-de"]):
            settings["select"]["average_windows"] = {"size": 3, "step": 1, "count": 1}
        flags = config["corpora"]["en-vi"]["train_flags"]
        flags[flags.index("--save-interval-updates") + 1] = "1"
    trained, generated = [], []
    monkeypatch.setattr(pipeline, "train", fake_train(trained))
    monkeypatch.setattr(pipeline, "generate", fake_generate(generated))
    out = tmp_path / "out"
    reproduce.main([edited(tmp_path, keep_all), "--data", synthetic_bin, "--updates", "3",
                    "--work-dir", tmp_path / "work", "--out", out,
                    *(f"--corpus-data={n}={d}" for n, d in corpora.items())])

    by_name = {call["name"]: call for call in trained}
    assert len(by_name) == 32  # three seeds of each model, except on En-De
    assert "sparse_transformer_vaswani_wmt_en_de_big" in by_name["softmax [en-de]"]["flags"]
    assert "sparse_transformer_iwslt_de_en" in by_name["softmax [seed 1]"]["flags"]
    assert by_name["softmax [en-vi, seed 3]"]["data"] == corpora["en-vi"]
    en_vi = [c for c in generated if c["data"] == corpora["en-vi"]]
    assert en_vi and all("--lenpen" in c["flags"] for c in en_vi)
    report = (out / "README.md").read_text()
    assert "en-de: `-l de -norm -m exact stem" in report and "en-vi: `-l other" in report
    assert re.search(r"en-de: `[^`]*\|compounds:split`", report)     # WMT14's BLEU convention
    assert re.search(r"en-vi: `[^`]*\|case:lc\|[^`]*\|tok:intl\|", report)
    assert (out / "table-1-bleu-wmt14-en-de.md").is_file()


def test_decoding_the_average_of_real_checkpoints(tmp_path, monkeypatch):
    """fairseq-train saves, the driver averages, fairseq-generate decodes the average."""
    def tiny(config):
        average_every_two(config)
        config["tables"] = [{**config["tables"][0], "rows": config["tables"][0]["rows"][1:]}]
        config["metrics"] = ["BLEU", "train_speed"]
    monkeypatch.setattr(reproduce, "SMOKE_CORPUS", TINY_CORPUS)
    out, work = tmp_path / "out", tmp_path / "work"
    reproduce.main([edited(tmp_path, tiny), "--smoke", "--updates", "3", "--work-dir", work,
                    "--out", out])
    record = json.loads((out / "smoke.json").read_text())
    assert all(d["sentences"] == 30 for d in record["decoded"].values())
    folder = work / "top-k-k-8"
    saved = sorted(p.name for p in folder.glob("checkpoint_*_*.pt"))
    assert saved == ["checkpoint_1_1.pt", "checkpoint_1_2.pt", "checkpoint_1_3.pt"]
    average = torch.load(folder / "checkpoint_avg2.pt", weights_only=False)["model"]
    last = [torch.load(folder / name, weights_only=False)["model"] for name in saved[1:]]
    for name, tensor in average.items():
        if tensor.is_floating_point():
            torch.testing.assert_close(tensor, (last[0][name] + last[1][name]) / 2)
    assert "generate" in " ".join(p.name for p in work.iterdir())
    log = next(work.glob("generate-top-k-k-8*.log")).read_text()
    assert "checkpoint_avg2.pt" in log


@pytest.mark.parametrize("edit,message", [
    (lambda c: c["tables"][3].update(seeds=[1, 1]), "`seeds` of table 'Figure 3: k, IWSLT14 "
                                                    "De-En valid' must be a list of distinct"),
    (lambda c: c["tables"][3].update(subset="train"), "must be one of valid, test, not 'train'"),
    (lambda c: c["smoke"].update(average_last=0), "`smoke.average_last` must be a positive"),
    (lambda c: c["corpora"]["en-vi"].update(beam=4), "unknown key 'beam' in corpus 'en-vi'"),
    (lambda c: c["corpora"]["en-de"].update(bleu=[]), "`corpora.en-de.bleu` must be a JSON"),
    (lambda c: c.update(metrics=["BLEU", "speed-up"]), "`metrics` must be a list of"),
    (lambda c: c["smoke"].update(average_last=5),
     "averaging the last 5 checkpoints, but model 'softmax' keeps 4 (200 updates, "
     "--save-interval-updates 10, --keep-interval-updates 4, --no-epoch-checkpoints)"),
])
def test_bad_settings_give_one_clear_line_before_anything_runs(tmp_path, capsys, edit, message):
    with pytest.raises(SystemExit) as exit_info:
        reproduce.main([edited(tmp_path, edit), "--smoke", "--out", tmp_path / "out",
                        "--work-dir", tmp_path / "work"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]
    assert not (tmp_path / "out").exists() and not (tmp_path / "work" / "softmax").exists()


# -- Zhao et al.'s selection (appendix A.2, fairseq_deen_est.sh) and the paper's batch -------

def test_explicit_sparse_de_en_follows_the_released_script():
    """fairseq_deen_est.sh: no shared decoder embeddings, fairseq 0.9's default clip-norm
    25, 50 epoch checkpoints kept, three seeds, and the averages of the 10 epoch
    checkpoints up to epoch 50, 55, ..., 90 compared on the validation set."""
    config = reproduction_config.load_config(ZHAO)
    flags = config.train_flags
    assert "--share-decoder-input-output-embed" not in flags
    assert flag_value(flags, "--clip-norm") == "25"
    assert flag_value(flags, "--keep-last-epochs") == "50"
    assert config.select["seeds"] == [1, 2, 3]
    epochs = [Path(f"checkpoint{e}.pt") for e in range(1, 91)]
    windows = selection.windows_of(epochs, **config.select["average_windows"])
    assert [selection.label(w) for w in windows] == [
        f"checkpoint{end - 9}..checkpoint{end}" for end in range(50, 91, 5)]
    _, rows = reproduction_plan.resolve_tables(config, False)[0]
    assert rows[0]["train"] == "softmax [best of seeds 1, 2, 3]"
    assert list(rows[0]["candidates"]) == [1, 2, 3]
    # En-Vi: best of three seeds; WMT14 En-De (not a small dataset): windows only
    settings = {corpus: config.run_settings(False, corpus) for corpus in ("en-vi", "en-de")}
    assert settings["en-vi"].select == {"seeds": [1, 2, 3]}
    assert "seeds" not in settings["en-de"].select


def selecting(config):
    """Table 1 De-En only, BLEU only, two seeds and two windows of two checkpoints."""
    config["tables"] = config["tables"][:1]
    config["metrics"] = ["BLEU"]
    config["select"] = {"seeds": [1, 2], "average_windows": {"size": 2, "step": 1, "count": 2}}


def test_selection_decodes_the_best_window_of_the_best_seed(tmp_path, monkeypatch,
                                                             synthetic_bin):
    """Validation BLEU picks seed 1's newest window but seed 2's older one, which is
    best of all; the test split is decoded with it and the choices are recorded."""
    trained, generated = [], []
    plain = fake_generate(generated)
    good = {("softmax-seed-1", "checkpoint_1_3_checkpoint_1_4"): 1,  # all but one right
            ("softmax-seed-2", "checkpoint_1_2_checkpoint_1_3"): 0}  # every sentence right

    def generate(data, checkpoint, flags, log, env=None):
        result = plain(data, checkpoint, flags, log, env)
        wrong = good.get((checkpoint.parent.name, checkpoint.stem[len("checkpoint_avg_"):]))
        if wrong is not None and flag_value(flags, "--gen-subset") == "valid":
            result.output.hypotheses[wrong:] = result.output.references[wrong:]
        return result
    monkeypatch.setattr(pipeline, "train", fake_train(trained))
    monkeypatch.setattr(pipeline, "generate", generate)
    out, work = tmp_path / "out", tmp_path / "work"
    reproduce.main([edited(tmp_path, selecting), "--data", synthetic_bin, "--updates", "4",
                    "--work-dir", work, "--out", out])

    assert sorted(call["name"] for call in trained) == [
        "softmax [seed 1]", "softmax [seed 2]", "top-k, k = 8 [seed 1]", "top-k, k = 8 [seed 2]"]
    record = json.loads((out / "results.json").read_text())["trained"]
    chosen = record["softmax [best of seeds 1, 2]"]
    assert chosen["seed"] == 2 and chosen["window"] == "checkpoint_1_2..checkpoint_1_3"
    assert chosen["valid_bleu"] == pytest.approx(100)
    assert list(chosen["valid_bleu_by_seed"]) == ["1", "2"]
    assert record["softmax [seed 1]"]["window"] == "checkpoint_1_3..checkpoint_1_4"
    assert set(record["softmax [seed 1]"]["valid_bleu_by_window"]) == {
        "checkpoint_1_2..checkpoint_1_3", "checkpoint_1_3..checkpoint_1_4"}
    test = [c for c in generated if flag_value(c["flags"], "--gen-subset") == "test"]
    assert len(test) == 2 and test[0]["checkpoint"] == (
        work / "softmax-seed-2" / "checkpoint_avg_checkpoint_1_2_checkpoint_1_3.pt")
    averaged = torch.load(test[0]["checkpoint"], weights_only=False)["model"]["w"]
    assert averaged.tolist() == [2.5, 2.5]
    assert sorted(p.name for p in (work / "softmax-seed-2").glob("checkpoint_avg*")) == [
        "checkpoint_avg_checkpoint_1_2_checkpoint_1_3.pt"]  # the other window's is deleted
    report = (out / "README.md").read_text()
    assert "of 2 trainings (seeds 1, 2), the one with the best validation BLEU" in report
    assert "seed 2, average of checkpoint_1_2..checkpoint_1_3 (100.00)" in report
    assert "of the last 2 such windows, 1 checkpoints apart" in report


def one_table_per_corpus(config):
    """Table 1 De-En and En-De, BLEU only, nothing selected."""
    config["tables"] = [config["tables"][0], config["tables"][2]]
    config["metrics"] = ["BLEU"]
    for settings in (config, config["corpora"]["en-de"]):
        settings.pop("select")


@pytest.mark.parametrize("gpus,update_freq", [(1, {"de-en": "4", "en-de": "128"}),
                                              (2, {"de-en": "2", "en-de": "64"})])
def test_the_papers_batch_is_kept_on_the_gpus_the_run_has(tmp_path, monkeypatch, capsys,
                                                          synthetic_bin, gpus, update_freq):
    """Zhao et al.'s IWSLT14 De-En (4000 tokens x 4, one GPU) and WMT14 En-De (3584 tokens
    x 32 on 4 GPUs) keep their batch per update on 1 or 2 GPUs."""
    monkeypatch.setattr(batch, "visible_gpus", lambda: gpus)
    trained = []
    monkeypatch.setattr(pipeline, "train", fake_train(trained))
    monkeypatch.setattr(pipeline, "generate", fake_generate([]))
    out = tmp_path / "out"
    reproduce.main([edited(tmp_path, one_table_per_corpus), "--data", synthetic_bin,
                    "--corpus-data", f"en-de={synthetic_bin}", "--updates", "2",
                    "--work-dir", tmp_path / "work", "--out", out])
    flags = {call["name"]: call["flags"] for call in trained}
    assert flags["softmax"].count("--update-freq") == 1
    assert flag_value(flags["softmax"], "--update-freq") == update_freq["de-en"]
    assert flag_value(flags["softmax [en-de]"], "--update-freq") == update_freq["en-de"]
    said = (f"3584 tokens x update-freq {update_freq['en-de']} x {gpus} GPU"
            f"{'s' * (gpus > 1)} = 458,752 tokens per update (the paper's: 4 GPUs x "
            "update-freq 32)")
    assert said in capsys.readouterr().out
    record = json.loads((out / "results.json").read_text())["trained"]
    assert record["softmax [en-de]"]["batch"] == said
    assert record["softmax"]["batch"].endswith("= 16,000 tokens per update (the paper's: "
                                               "1 GPU x update-freq 4)")


def test_a_batch_that_cannot_be_kept_is_refused_before_training(tmp_path, monkeypatch,
                                                                capsys, synthetic_bin):
    monkeypatch.setattr(batch, "visible_gpus", lambda: 3)
    monkeypatch.setattr(pipeline, "train", fake_train(trained := []))
    with pytest.raises(SystemExit) as exit_info:
        reproduce.main([edited(tmp_path, one_table_per_corpus), "--data", synthetic_bin,
                        "--corpus-data", f"en-de={synthetic_bin}", "--out", tmp_path / "out",
                        "--work-dir", tmp_path / "work"])
    assert exit_info.value.code == 1 and not trained
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert ("softmax: the paper's batch (4000 tokens x update-freq 4 x 1 GPU) cannot be kept "
            "on 3 GPUs: update-freq 4/3 is not a whole number") in err
    # fairseq's own --distributed-world-size counts as the GPUs it trains on
    flags, _ = batch.keep_batch(["--max-tokens", "3584", "--update-freq=32",
                                 "--distributed-world-size", "8"], 4)
    assert flags == ["--max-tokens", "3584", "--distributed-world-size", "8",
                     "--update-freq", "16"]


def test_one_table_needs_only_its_corpus_and_says_its_plan_first(tmp_path, monkeypatch,
                                                                   synthetic_bin, capsys):
    """Zhao et al.'s IWSLT14 Table 1 alone: no En-Vi or WMT14 corpus is asked for, only
    its two models train (three seeds each, the best chosen), and the run says so first."""
    trained, generated = [], []
    monkeypatch.setattr(batch, "visible_gpus", lambda: 0)  # what a CPU-only machine says
    monkeypatch.setattr(pipeline, "train", fake_train(trained))
    monkeypatch.setattr(pipeline, "generate", fake_generate(generated))

    def keep_all(config):  # the fake saves one checkpoint per update: average them all
        config["average_last"] = 3
        config["select"]["average_windows"] = {"size": 3, "step": 1, "count": 1}
        config["metrics"] = ["BLEU"]  # the tables are the subject, not the metrics
    reproduce.main([edited(tmp_path, keep_all), "--table", "table 1: bleu, iwslt14",
                    "--data", synthetic_bin,
                    "--updates", "3", "--work-dir", tmp_path / "work", "--out", tmp_path / "out"])
    printed = capsys.readouterr().out
    assert "plan: 6 trainings on the CPU (no GPU visible), then 2 decodings" in printed
    assert "train 'softmax [seed 1]': 3 updates of 4000 tokens x update-freq 4 x 1 CPU " \
           "process = 16,000 tokens per update" in printed
    assert printed.index("plan:") < printed.index("1/6 train")
    # 6 trainings x 3 updates at the fake's 0.5 updates/s
    assert "estimate: the 6 trainings take under a minute here, at the 0.50 updates/s and " \
           "1,000 target tokens/s of the first one's first minute" in printed
    assert sorted({call["name"].split(" [")[0] for call in trained}) == ["softmax", "top-k, k = 8"]
    report = (tmp_path / "out" / "README.md").read_text()
    assert "## Table 1: BLEU, IWSLT14 De-En" in report and "IWSLT15" not in report.split(
        "## Table 1")[1]


@pytest.mark.parametrize("argv,message", [
    (["--table", "Table 9"], "--table 'Table 9' names no table of explicit_sparse; its tables: "
                             "Table 1: BLEU, IWSLT14 De-En;"),
    (["--train-flags=--fp16 '"], "--train-flags / --generate-flags: No closing quotation"),
])
def test_bad_selections_and_flags_are_one_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        reproduce.main([ZHAO, *argv, "--out", tmp_path / "out"])
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "out").exists()
