#!/usr/bin/env bash
# Xu et al. (2021), "Learning Hard Retrieval Decoder Attention for Transformers":
# Tables 1, 3 and 4 on WMT14 En-De (hard retrieval per attention site; soft/hard
# training crossed with soft/hard decoding via --model-overrides).
#
#   scripts/xu2021_hard_attention.sh --smoke     # synthetic corpus, minutes on a CPU
#   scripts/xu2021_hard_attention.sh             # the paper's setting (GPU, days); data from
#       python -m sparse_attn_data.wmt14_en_de --bpe-merges 32000 --valid newstest2012+newstest2013 \
#           --max-train-subwords 256 --name wmt14_en_de_xu2021
#   scripts/xu2021_hard_attention.sh --data DIR --updates N --work-dir DIR --out DIR
#
# Settings: configs/xu2021_hard_attention.json. Published results: results/hard_attention/
# (--out results/hard_attention/; without --out a run writes to .work/NAME[-smoke]/report)
# (README.md for the full run, smoke.md for --smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m sparse_attn_experiments.reproduce \
    configs/xu2021_hard_attention.json "$@"
