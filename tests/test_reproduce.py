"""The reproduction driver: a paper config runs end to end in smoke mode, and bad
configs or a missing corpus stop with one clear line before anything is written."""

import json

import pytest

from sparse_attn_plugin import pipeline, reproduce
from sparse_attn_plugin.provenance import REPO_ROOT

CONFIG = REPO_ROOT / "configs" / "xu2021_hard_attention.json"


def test_hard_attention_smoke_runs_every_table_row(tmp_path, monkeypatch):
    monkeypatch.setattr(reproduce, "SMOKE_CORPUS", {"train": 600, "valid": 20, "test": 30})
    reproduce.main([CONFIG, "--smoke", "--updates", "6", "--work-dir", tmp_path / "work",
                    "--out", tmp_path / "out"])
    record = json.loads((tmp_path / "out" / "smoke.json").read_text())
    config = reproduce.load_config(CONFIG)
    rows = [row for table in config["tables"] for row in table["rows"]]
    assert set(record["decoded"]) == {reproduce.decoding_key(row) for row in rows}
    assert len(record["decoded"]) == 6  # 4 trained models + 2 decode-time switches
    for decoded in record["decoded"].values():
        assert decoded["sentences"] == 30 and 0 <= decoded["bleu"] <= 100
        assert decoded["sentences_per_second"] > 0
    assert set(record["trained"]) == set(config["models"])
    report = (tmp_path / "out" / "smoke.md").read_text()
    assert "SMOKE RUN" in report and "- commit:" in report
    for table in config["tables"]:
        assert f"## {table['title']}" in report
    assert "| soft trained, hard decoded | softmax | decoder_cross_attn_fn=hard, " in report
    assert "| 26.30 |" in report  # the paper's figure beside ours
    switched = (tmp_path / "work" / "generate-softmax-decoder-cross-attn-fn-hard-decoder-self"
                "-attn-fn-hard.log").read_text()
    assert "'decoder_cross_attn_fn': 'hard'" in switched

    # fairseq drops a last batch under 8 sentences unless told otherwise: caught, not scored
    with pytest.raises(RuntimeError, match="translated 24 of 30 sentences"):
        pipeline.generate(tmp_path / "work" / "bin", tmp_path / "work" / "softmax" /
                          "checkpoint_last.pt", ["--cpu", "--batch-size", "128",
                                                 "--required-batch-size-multiple", "8"],
                          tmp_path / "dropped.log")


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
    assert exit_info.value.code == 2
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
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "no binarised corpus in" in err and "python -m data_prep.wmt14_en_de" in err
    assert not (tmp_path / "out").exists()
