"""README's IWSLT14 training block, run as written by bash at a tiny size: the IWSLT14
recipe on a fixture archive in the release's format, then for each method fairseq-train,
fairseq-generate and sparse-attn-score; then its "Analysing attention" block on the runs
it made (heads, the learned alphas' trajectory over the epoch checkpoints the loop keeps,
maps). Each command a user types runs with a few flags appended to make it tiny and
offline (fairseq and argparse take the last of a repeated flag); fairseq's commands run
through the session's fork server, the same ``cli_main`` without an interpreter start-up
each."""

import json
import re
import subprocess

import pytest
import torch

from sparse_attn_plugin.evaluation import read_generate_output
from sparse_attn_plugin.evaluation.text import remove_bpe
from sparse_attn_plugin.reading import read_lines

from helpers import REPO, archives, fairseq_env
from helpers.corpora import load_split
from helpers.metrics import rescored

CLIENT = REPO / "tests" / "helpers" / "fairseq_client.py"

METHODS = ("softmax", "topk", "entmax15", "entmax_alpha")
TRAINING = "<!-- tests/e2e/test_readme_path.py runs this block as written, at a tiny size -->"
ANALYSIS = ("<!-- tests/e2e/test_readme_path.py runs this block as written, on the runs of "
            "the training block -->")
TINY = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16 "
        "--encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2 "
        "--decoder-attention-heads 2 --max-epoch 2 --cpu")


def readme_block(marker: str) -> str:
    """The bash block under one of the README's markers for this test."""
    text = (REPO / "README.md").read_text()
    assert text.count(marker) == 1, marker
    return re.search(r"```bash\n(.*?)```", text.split(marker)[1], re.S).group(1)


@pytest.mark.slow
def test_the_readme_path_runs_as_written(tmp_path, fairseq_server):
    archives.iwslt14_archive(tmp_path / "raw", train=300)
    for name in (".venv", "sparse_attn_plugin"):
        (tmp_path / name).symlink_to(REPO / name)
    client = f"command python -S {CLIENT} {fairseq_server}"
    shims = f"""set -eo pipefail
python() {{
  if [ "${{1:-}} ${{2:-}}" = "-m sparse_attn_data.iwslt14_de_en" ]; then
    command python "$@" --raw-dir {tmp_path / 'raw'} --no-checksums --bpe-merges 40
  else command python "$@"; fi
}}
fairseq-train() {{ {client} fairseq-train "$@" {TINY}; }}
fairseq-generate() {{ {client} fairseq-generate "$@" --cpu --max-len-b 20; }}
"""
    proc = subprocess.run(["bash", "-c", shims + readme_block(TRAINING) + "\n"
                           + readme_block(ANALYSIS)], cwd=tmp_path, env=fairseq_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]

    data = tmp_path / "data-bin" / "iwslt14_de_en"
    test_pairs = len(load_split(data, "test", "de", "en")[0])
    for method in METHODS:
        folder = tmp_path / "checkpoints" / method
        state = torch.load(folder / "checkpoint_best.pt", map_location="cpu", weights_only=False)
        assert state["cfg"]["model"].attn_fn == method  # each method in its own --save-dir
        hypotheses = [line for line in (folder / "test.out").read_text().splitlines()
                      if line.startswith("H-")]
        assert len(hypotheses) == test_pairs  # no sentence dropped
        scores = json.loads((folder / "scores.json").read_text())
        # the scores recomputed from the translations fairseq-generate saved (sacrebleu's
        # BLEU, REP as Malaviya et al.'s rep_score.py), subwords merged as --remove-bpe
        out = read_generate_output(read_lines(folder / "test.out"))
        merged = [[remove_bpe(line, "subword_nmt") for line in lines]
                  for lines in (out.hypotheses, out.references)]
        expected = rescored(*merged, bleu={"tokenize": "none"})
        assert (scores["bleu"]["score"], scores["rep"]["score"]) == (expected["bleu"],
                                                                     expected["rep"])
        assert "tok:none" in scores["bleu"]["signature"]

    # The analysis block: what each command says it writes, from the runs above.
    analysis = tmp_path / "analysis"
    assert sorted(p.name for p in analysis.iterdir()) == [
        "entmax_alpha-alpha-trajectory.csv", "entmax_alpha-alpha-trajectory.png",
        "entmax_alpha-alphas.png", "entmax_alpha-heads.csv", "entmax_alpha-heads.md",
        "softmax-vs-entmax15-maps.png"]
    assert proc.stdout.splitlines()[-6:] == [f"analysis/{name}" for name in (
        "entmax_alpha-heads.csv", "entmax_alpha-heads.md", "entmax_alpha-alphas.png",
        "entmax_alpha-alpha-trajectory.csv", "entmax_alpha-alpha-trajectory.png",
        "softmax-vs-entmax15-maps.png")]
    epochs = sorted((tmp_path / "checkpoints" / "entmax_alpha").glob("checkpoint[0-9]*.pt"))
    trajectory = (analysis / "entmax_alpha-alpha-trajectory.csv").read_text().splitlines()
    updates = sorted({int(line.split(",")[0]) for line in trajectory[1:]})
    assert len(epochs) == 2 and len(updates) == 2  # a point for each epoch (--max-epoch 2)
