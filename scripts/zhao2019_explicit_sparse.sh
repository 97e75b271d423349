#!/usr/bin/env bash
# Zhao et al. (2019), "Explicit Sparse Transformer": Table 1 (IWSLT14 De-En, IWSLT15 En-Vi,
# WMT14 En-De), Figure 3 (k in 4, 8, 16, 32, inf; three seeds; mean valid BLEU), Table 4
# (training and decoding speed of softmax, sparsemax, 1.5-entmax, alpha-entmax and top-k, as
# ratios to softmax) and Table 5 (top-k in training only, or in training and inference).
# As the paper: three seeds per model on IWSLT, each decoded as the average of 10 epoch
# checkpoints, the window and the seed chosen by validation BLEU (En-Vi: the last 10
# averaged); --update-freq scaled to keep the paper's batch on the GPUs at hand; scored
# with BLEU, METEOR, REP and DROP beside the paper's figures.
#
#   scripts/zhao2019_explicit_sparse.sh --smoke   # synthetic corpus, 20 small models, 2 CPU cores
#   scripts/zhao2019_explicit_sparse.sh           # the paper's setting (GPUs); data from
#       python -m sparse_attn_data.iwslt14_de_en --bpe-merges 14000 --name iwslt14_de_en_bpe14k
#       python -m sparse_attn_data.iwslt15_en_vi
#       python -m sparse_attn_data.wmt14_en_de
#
# Settings: configs/zhao2019_explicit_sparse.json. Published results: results/explicit_sparse/
# (--out results/explicit_sparse/; without --out a run writes to .work/NAME[-smoke]/report)
# (README.md and one file per table for the full run; smoke.md and smoke/ for --smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m sparse_attn_experiments.reproduce configs/zhao2019_explicit_sparse.json "$@"
