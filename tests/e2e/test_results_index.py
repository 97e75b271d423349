"""results/README.md: the index reads every number from the records scripts wrote."""

import json
import shutil

from sparse_attn_experiments import pipeline, reproduce, results_index
from sparse_attn_experiments.provenance import provenance_header

from helpers import REPO
from helpers.fakes import fake_generate, fake_train


def test_index_puts_our_recorded_numbers_beside_the_papers(tmp_path, monkeypatch, synthetic_bin):
    configs, results = tmp_path / "configs", tmp_path / "results"
    configs.mkdir()
    for name in ("correia2019_adaptively_sparse.json", "zhao2019_explicit_sparse.json"):
        shutil.copy(REPO / "configs" / name, configs / name)
    config = json.loads((configs / "correia2019_adaptively_sparse.json").read_text())
    config["metrics"] = ["BLEU", "speed"]
    (configs / "correia2019_adaptively_sparse.json").write_text(json.dumps(config))
    monkeypatch.setattr(pipeline, "train", fake_train([]))
    monkeypatch.setattr(pipeline, "generate", fake_generate([]))
    out = results / "adaptively_sparse"
    reproduce.main([configs / "correia2019_adaptively_sparse.json", "--smoke", "--data",
                    synthetic_bin, "--updates", "2", "--work-dir", tmp_path / "work",
                    "--out", out])
    (results / "bench").mkdir()
    (results / "bench" / "speed.md").write_text("# Some benchmark\n\n"
                                                + provenance_header("bench.py"))
    (results / "bench" / "notes.md").write_text("# No provenance: not listed\n")
    compared = results / "multi30k"
    compared.mkdir()
    (compared / "README.md").write_text("# A comparison\n\n" + provenance_header("compare"))
    row = {"attention": "entmax15", "bleu": {"test": 35.5, "test1": 30.25}, "rep": 1.5,
           "drop": 4.0, "updates": 1500, "stopped": "converged",
           "validation_curve": [[1000, 4.5], [1500, 4.6]], "valid_loss": 4.5}
    (compared / "comparison.json").write_text(json.dumps({
        "corpus": "multi30k_de_en", "smoke": False, "rows": [row],
        "tests": {"test": "test_2016_flickr", "test1": "test_2017_flickr"}}))

    results_index.main(["--results", str(results), "--configs", str(configs)])
    index = (results / "README.md").read_text()
    record = json.loads((out / "smoke.json").read_text())
    bleu = {json.loads(key)[0]: d["bleu"] for key, d in record["decoded"].items()}
    chrf = {json.loads(key)[0]: d["chrf"] for key, d in record["decoded"].items()}
    assert (f"| Table 1: BLEU, IWSLT De-En | alpha-entmax | BLEU {bleu['alpha-entmax']:.2f}; "
            f"chrF {chrf['alpha-entmax']:.2f} | BLEU 29.90; chrF - |") in index
    assert "[adaptively_sparse/smoke.md](adaptively_sparse/smoke.md)" in index
    assert "12 trainings (12 x 100,000 updates)" in index        # Correia at full scale
    assert "24 trainings (20 x 90 epochs, 2 x 35,000 updates, 2 x 72 epochs)" in index
    assert "`scripts/zhao2019_explicit_sparse.sh`" in index
    assert "| [bench/speed.md](bench/speed.md) | Some benchmark |" in index
    assert "notes.md" not in index and "- commit:" in index
    assert ("| attention | BLEU test_2016_flickr | BLEU test_2017_flickr | REP | DROP (forward) |"
            in index)
    assert "| entmax15 | 35.50 | 30.25 | 1.50 | 4.00 | 1500 (converged) |" in index
    assert ("### multi30k_de_en (`multi30k/`)\n\nRun: [multi30k/README.md](multi30k/README.md)"
            in index)
    assert "| Lample, Conneau, Denoyer and Ranzato (2018)" in index  # published, beside
    assert "[multi30k/README.md]" not in index.split("## Benchmarks")[1]


    # The config changes after the run (a model renamed): its tables say so, no crash.
    config["models"]["alpha-entmax (new)"] = config["models"].pop("alpha-entmax")
    for table in config["tables"]:
        for row in table["rows"]:
            row["model"] = row["model"].replace("alpha-entmax", "alpha-entmax (new)")
    (configs / "correia2019_adaptively_sparse.json").write_text(json.dumps(config))
    results_index.main(["--results", str(results), "--configs", str(configs)])
    index = (results / "README.md").read_text()
    assert f"| Table 1: BLEU, IWSLT De-En | softmax | {results_index.STALE} | - |" in index
    assert f"BLEU {bleu['softmax']:.2f}" not in index


def test_the_committed_index_is_what_the_records_give():
    """results/README.md was regenerated after the last result landed."""
    committed = (REPO / "results" / "README.md").read_text()
    fresh = results_index.render(REPO / "results", REPO / "configs",
                                 REPO / "scripts", "check")
    body = [line for line in committed.splitlines() if not line.startswith("- ")]
    assert body == [line for line in fresh.splitlines() if not line.startswith("- ")], \
        "results/README.md is stale: run sparse-attn-results-index"


def test_what_the_index_says_of_gpus_comes_from_the_records(tmp_path):
    """A paper with no full run: the index says what its records' machine lines say of
    GPUs (it once wrote "this machine has none" whatever they said)."""
    configs, results = tmp_path / "configs", tmp_path / "results"
    configs.mkdir()
    shutil.copy(REPO / "configs" / "tsai2019_kernel.json", configs)
    folder = results / "kernel"
    folder.mkdir(parents=True)
    cpu = "AMD EPYC, 2 cores, torch 2.13.0+cpu (2 threads); Python 3.11.7, Linux"
    gpu = ("AMD EPYC, 16 cores, torch 2.11.0+cu130 (16 threads); GPU NVIDIA H100 80GB HBM3; "
           "Python 3.12.3, Linux")

    def full_scale(machine):
        (folder / "notes.md").write_text(f"# A run\n\n- commit: `0123456789ab`\n"
                                         f"- machine: {machine}\n")
        index = results_index.render(results, configs, REPO / "scripts", "check")
        return next(line for line in index.splitlines() if line.startswith("Full scale"))

    assert ("not run: `kernel/` holds no full run, and none of its records was made on a GPU"
            in full_scale(cpu))
    on_gpu = full_scale(gpu)
    assert "its records name GPU NVIDIA H100 80GB HBM3" in on_gpu
    assert "none" not in on_gpu and "has none" not in full_scale(cpu)
