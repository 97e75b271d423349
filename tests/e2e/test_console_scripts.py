"""Every command as a user types it: the console scripts setup.py installs (run from the
virtualenv's bin) and the ``python -m`` entries, each in a new process. A successful run
exits 0 with its output on stdout and its files written; bad input exits 1 with exactly
one ``PROG: error: ...`` line on stderr and no traceback."""

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import BIN, REPO, fairseq_env

#: Every console script setup.py installs; each has a test below.
SCRIPTS = ("sparse-attn-score", "sparse-attn-align", "sparse-attn-analyze", "sparse-attn-synth",
           "sparse-attn-compare", "sparse-attn-reproduce", "sparse-attn-results-index",
           "sparse-attn-toy-example", "sparse-attn-flags")
RECIPES = ("iwslt14_de_en", "iwslt15_en_vi", "wmt14_en_de", "kftt_ja_en", "wmt16_ro_en",
           "multi30k_de_en")


def command(argv, cwd=None):
    """Run ``argv`` in a new process that imports this checkout."""
    env = fairseq_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env,
                          cwd=cwd)


def script(name, *args, cwd=None):
    return command([BIN / name, *args], cwd)


def module(name, *args):
    return command([sys.executable, "-m", name, *args])


def succeeded(proc) -> str:
    """Its stdout, once it exited 0 without a traceback."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc.stdout


def failed_in_one_line(proc, prog: str) -> str:
    """The one error line of a run that exited 1, without the ``PROG: error: `` prefix."""
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith(f"{prog}: error: ")
    return errors[0][len(f"{prog}: error: "):]


def test_every_console_script_is_tested_here():
    tree = ast.parse((REPO / "setup.py").read_text())
    entries = next(node for node in ast.walk(tree) if isinstance(node, ast.Dict)
                   and any(getattr(k, "value", None) == "console_scripts" for k in node.keys))
    declared = [line.split("=")[0].strip() for line in ast.literal_eval(entries.values[0])]
    assert sorted(declared) == sorted(SCRIPTS)


# -- sparse-attn-score -------------------------------------------------------------------------
@pytest.fixture
def texts(tmp_path):
    for name, lines in (("hyp", ["the cat sat on the mat .", "a dog a dog barked"]),
                        ("ref", ["the cat sat on a mat .", "the dog barked"]),
                        ("src", ["x y", "z"])):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    return tmp_path


def test_score_prints_its_table_writes_its_files_and_exits_0(texts):
    proc = script("sparse-attn-score", "--hyp", texts / "hyp", "--ref", texts / "ref",
                  "--src", texts / "src", "--json", "-", "--per-sentence", texts / "per.tsv")
    scores = json.loads(succeeded(proc))  # JSON to stdout is the JSON alone: parseable
    table = proc.stderr.splitlines()  # the table, once (sys.exit(scores) printed them again)
    assert table[0].split() == ["metric", "score", "details"]
    assert [line.split()[0] for line in table[1:]] == ["BLEU", "chrF", "REP"]
    assert set(scores) == {"bleu", "chrf", "rep"} and scores["rep"]["score"] > 0
    assert (texts / "per.tsv").read_text().splitlines()[:2] == ["id\trep", "0\t0"]


@pytest.mark.parametrize("args,message", [
    (["--ref", "{d}/missing"], "{d}/missing: no such file"),
    (["--ref", "{d}/ref", "--metrics", "bleu,cider"],
     "argument --metrics: unknown metric(s) cider"),
    (["--ref", "{d}/ref", "--json", "{d}/src/scores.json"], "{d}/src"),  # src: a file
])
def test_score_bad_input(texts, args, message):
    argv = ["--hyp", texts / "hyp", *[a.format(d=texts) for a in args]]
    assert message.format(d=texts) in failed_in_one_line(script("sparse-attn-score", *argv),
                                                         "sparse-attn-score")


# -- sparse-attn-flags -------------------------------------------------------------------------
def test_flags_lists_what_fairseq_train_help_cannot():
    """``fairseq-train --help`` cannot show a model's or a criterion's flags (fairseq adds
    them after a first parse that --help ends); ``sparse-attn-flags ARCH`` lists the
    architecture's, --task sparse_translation's and our criteria's."""
    helped = command([BIN / "fairseq-train", "--user-dir", REPO / "sparse_attn_plugin",
                      "--arch", "sparse_transformer", "--criterion", "entmax_loss", "--help"])
    assert "--attn-fn" not in helped.stdout and "--loss-alpha" not in helped.stdout
    listed = {arch: " ".join(succeeded(script("sparse-attn-flags", arch)).split())
              for arch in ("sparse_transformer", "sparse_lstm")}
    for flag in ("--attn-fn NAME", "--decoder-cross-attn-fn NAME", "--attn-impl IMPL",
                 "--fertility-value F", "--sink-token", "--encoder-layers",
                 "--coverage-penalty-beta", "--fertility-loss-weight",
                 "--criterion entmax_loss: --loss-alpha LOSS_ALPHA alpha of the output's"):
        assert flag in listed["sparse_transformer"], flag
    assert ("--attn-fn NAME attention normaliser: softmax, topk, sparsemax, entmax15, "
            "entmax_alpha, csoftmax, csparsemax (default softmax)") in listed["sparse_lstm"]
    assert "--coverage-vector-form" in listed["sparse_lstm"]
    assert failed_in_one_line(script("sparse-attn-flags", "transformer"),
                              "sparse-attn-flags").startswith(
        "unknown ARCH 'transformer'; choose from kernel_transformer")


# -- sparse-attn-align -------------------------------------------------------------------------
def test_align_trains_aligns_and_writes_fertilities(synthetic_bin, tmp_path):
    raw = synthetic_bin.parent / "raw"
    model = tmp_path / "aligner"
    proc = script("sparse-attn-align", "train", "--src", raw / "train.src", "--tgt",
                  raw / "train.tgt", "--out", model, "--quiet")
    assert succeeded(proc) == "" and "aligner trained on 300 pairs" in proc.stderr
    assert (model / "manifest.json").is_file()
    succeeded(script("sparse-attn-align", "align", "--model", model, "--src", raw / "test.src",
                     "--tgt", raw / "test.tgt", "--out", tmp_path / "test.align"))
    links = (tmp_path / "test.align").read_text().splitlines()
    assert len(links) == 40 and all("-" in pair for pair in links[0].split())
    succeeded(script("sparse-attn-align", "fertility", "--model", model, "--src",
                     raw / "test.src", "--tgt", raw / "test.tgt", "--out-fert",
                     tmp_path / "test.fert", "--out-guided", tmp_path / "guided.tsv"))
    ferts = (tmp_path / "test.fert").read_text().splitlines()
    sources = (raw / "test.src").read_text().splitlines()
    assert [len(f.split()) for f in ferts] == [len(s.split()) for s in sources]
    assert (tmp_path / "guided.tsv").read_text().count("\t") > 0


def test_align_bad_input(synthetic_bin, tmp_path):
    raw = synthetic_bin.parent / "raw"
    proc = script("sparse-attn-align", "align", "--model", tmp_path / "nowhere", "--src",
                  raw / "test.src", "--tgt", raw / "train.tgt", "--out", tmp_path / "a")
    assert "line counts differ" in failed_in_one_line(proc, "sparse-attn-align")
    assert not (tmp_path / "a").exists()


# -- sparse-attn-analyze -----------------------------------------------------------------------
def test_analyze_heads_writes_its_tables_and_figure(alpha_run, synthetic_bin, tmp_path):
    out = succeeded(script("sparse-attn-analyze", "heads", alpha_run / "checkpoint_last.pt",
                           "--data", synthetic_bin, "--out", tmp_path, "--name", "run"))
    names = ("run-heads.csv", "run-heads.md", "run-alphas.png")
    assert out.split() == [str(tmp_path / name) for name in names]
    assert all((tmp_path / name).stat().st_size > 0 for name in names)


@pytest.mark.parametrize("name,message", [
    ("dict.src.txt", "dict.src.txt: not a fairseq checkpoint"),  # an IndexError traceback once
    ("", "bin: a folder, not a checkpoint file"),                 # the corpus folder itself
])
def test_analyze_heads_of_a_file_that_is_not_a_checkpoint(synthetic_bin, tmp_path, name,
                                                         message):
    proc = script("sparse-attn-analyze", "heads", synthetic_bin / name, "--data",
                  synthetic_bin, "--out", tmp_path / "out")
    assert message in failed_in_one_line(proc, "sparse-attn-analyze")
    assert not (tmp_path / "out").exists()


def test_analyze_usage_error_of_a_subcommand(tmp_path):
    proc = script("sparse-attn-analyze", "heads", "--out", tmp_path / "out")
    assert failed_in_one_line(proc, "sparse-attn-analyze") == (
        "the following arguments are required: checkpoint, --data "
        "(see sparse-attn-analyze heads --help)")


# -- sparse-attn-synth -------------------------------------------------------------------------
def test_synth_writes_the_corpus(tmp_path):
    out = succeeded(script("sparse-attn-synth", "--out", tmp_path / "raw", "--train", "30",
                           "--valid", "5", "--test", "5"))
    assert out.startswith(f"synthetic corpus in {tmp_path / 'raw'}: train 30 / valid 5 / test 5")
    assert len((tmp_path / "raw" / "train.src").read_text().splitlines()) == 30
    assert (tmp_path / "raw" / "MANIFEST.json").is_file()


@pytest.mark.parametrize("args,message", [
    (["--min-len", "9", "--max-len", "3"], "--min-len (9) is larger than --max-len (3)"),
    (["--train", "many"], "argument --train: invalid int value: 'many'"),
])
def test_synth_bad_input(tmp_path, args, message):
    proc = script("sparse-attn-synth", "--out", tmp_path / "raw", *args)
    assert message in failed_in_one_line(proc, "sparse-attn-synth")
    assert not (tmp_path / "raw").exists()


# -- sparse-attn-compare (a full comparison trains eight models: only its refusals run
# here; small comparisons run in test_compare) ----------------------------------------------
def test_compare_refuses_fertility_rows_on_data_without_fertilities(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "valid", "test"):
        (data / f"{split}.ja-en.ja.idx").touch()
    proc = script("sparse-attn-compare", "--data", data, "--model", "lstm", "--out",
                  tmp_path / "out", "--work-dir", tmp_path / "work")
    assert "rows csparsemax train on fertility files" in failed_in_one_line(
        proc, "sparse-attn-compare")
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


@pytest.mark.parametrize("args,message", [
    (["--rows", "softmax,nope"], "unknown --rows ['nope'] for --model tiny"),
    (["--model", "lstm", "--rows", "entmax15"], "unknown --rows ['entmax15'] for --model lstm"),
    (["--max-updates", "0"], "--max-updates, --validate-every, --train-size and --eval-size "
                             "must be positive"),
    (["--data", "nowhere"], "nowhere: no such data folder"),
])
def test_compare_bad_input(tmp_path, args, message):
    proc = script("sparse-attn-compare", *args, "--out", tmp_path / "out", "--work-dir",
                  tmp_path / "work")
    assert message in failed_in_one_line(proc, "sparse-attn-compare")
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


@pytest.mark.parametrize("text", ["{not json", '{"rows": [{"bleu": 1}]}', "[]"])
def test_compare_refuses_an_out_folder_holding_another_comparison_json(tmp_path, text):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "comparison.json").write_text(text)
    proc = script("sparse-attn-compare", "--out", tmp_path / "out", "--work-dir",
                  tmp_path / "work")
    assert "comparison.json is not a comparison sparse-attn-compare wrote" in (
        failed_in_one_line(proc, "sparse-attn-compare"))
    assert (tmp_path / "out" / "comparison.json").read_text() == text  # left as it was
    assert not (tmp_path / "work").exists()


def test_toy_example_writes_figure1_and_exits_0(tmp_path):
    out = succeeded(script("sparse-attn-toy-example", "--out", tmp_path))
    assert out.startswith("# Malaviya et al. (2018), Figure 1")
    assert (tmp_path / "figure1.md").read_text() in out
    assert set(json.loads((tmp_path / "figure1.json").read_text())["transforms"]) == {
        "softmax", "sparsemax", "csoftmax", "csparsemax"}


def test_a_users_run_writes_into_the_work_folder_not_results(tmp_path):
    succeeded(script("sparse-attn-toy-example", cwd=tmp_path))
    assert (tmp_path / ".work" / "toy_example" / "figure1.md").is_file()
    assert not (tmp_path / "results").exists()


def test_toy_example_bad_output_folder(tmp_path):
    (tmp_path / "file").write_text("x\n")
    proc = script("sparse-attn-toy-example", "--out", tmp_path / "file" / "d")
    assert "Not a directory" in failed_in_one_line(proc, "sparse-attn-toy-example")


def test_reproduce_and_results_index_bad_input(tmp_path):
    proc = script("sparse-attn-reproduce", tmp_path / "nope.json", "--smoke")
    assert "no such config file" in failed_in_one_line(proc, "sparse-attn-reproduce")
    proc = script("sparse-attn-results-index", "--results", tmp_path / "nowhere")
    assert "must be folders" in failed_in_one_line(proc, "sparse-attn-results-index")


def commands_shown():
    """Every ``python -m MODULE``, ``python FILE.py`` and ``sparse-attn-NAME`` that
    README.md, docs/, scripts/, configs/ and the records in results/ show a user, with where
    each is shown."""
    shown = {}
    pattern = re.compile(r"python3? -m ([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)(?![\w.…])"
                         r"|python3? ((?:benchmarks|scripts)/\w+\.py)"  # not NAME, not …
                         r"|(?<![\w/-])(sparse-attn-[a-z]+(?:-[a-z]+)*)(?![\w/.-])")
    places = [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "scripts").iterdir(),
              *(REPO / "configs").rglob("*.json"), *(REPO / "results").rglob("*.md"),
              *(REPO / "results").rglob("*.json")]
    for path in places:
        for match in pattern.finditer(path.read_text()):
            shown.setdefault(next(filter(None, match.groups())), str(path.relative_to(REPO)))
    return shown


def test_every_python_command_shown_or_recorded_still_runs():
    """What a user copies from the docs or from a results record names a module that still
    runs as a command, a file that is still there, or a console script we install: no old
    path survives a move."""
    shown = commands_shown()
    assert {"sparse_attn_data.iwslt14_de_en", "benchmarks/bench_training.py",
            "sparse-attn-reproduce"} <= set(shown)
    missing = []
    for name, where in sorted(shown.items()):
        if name.startswith("sparse-attn-"):
            ok = name in SCRIPTS
        elif name.endswith(".py"):
            ok = (REPO / name).is_file()
        elif name.split(".")[0] in ("sparse_attn_plugin", "sparse_attn_experiments",
                                    "sparse_attn_data"):
            spec = importlib.util.find_spec(name)
            ok = spec is not None and spec.origin is not None and \
                'if __name__ == "__main__":' in Path(spec.origin).read_text()
        else:
            ok = importlib.util.find_spec(name.split(".")[0]) is not None  # pip, fairseq_cli, ...
        if not ok:
            missing.append(f"{where}: {name}")
    assert missing == []


# -- python -m entries -------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", RECIPES)
def test_data_prep_recipe_without_its_archives(recipe, tmp_path):
    (tmp_path / "raw").mkdir()
    proc = module(f"sparse_attn_data.{recipe}", "--raw-dir", tmp_path / "raw", "--dest-dir",
                  tmp_path / "bin", "--work-dir", tmp_path / "work")
    assert ": not found; offline mode" in failed_in_one_line(
        proc, f"python -m sparse_attn_data.{recipe}")
    assert not (tmp_path / "bin").exists()


def test_data_prep_parallel_without_its_files(tmp_path):
    proc = module("sparse_attn_data.parallel", "--src", "de", "--tgt", "en", "--train",
                  tmp_path / "train", "--valid", tmp_path / "valid", "--test", tmp_path / "test",
                  "--name", "mine", "--dest-dir", tmp_path / "bin", "--work-dir",
                  tmp_path / "work")
    assert failed_in_one_line(proc, "python -m sparse_attn_data.parallel") == \
        f"{tmp_path / 'train.de'}: no such file"
    assert not (tmp_path / "bin").exists()
