#!/usr/bin/env bash
# Correia et al. (2019), "Adaptively Sparse Transformers": BLEU of softmax, 1.5-entmax and
# learned alpha-entmax on De-En, Ja-En, Ro-En and En-De, with METEOR, REP, DROP and
# training and decoding speed ratios beside it. Learned alphas, head diversity and
# attention maps of the trained models: sparse-attn-analyze (see README).
#
#   scripts/correia2019_adaptively_sparse.sh --smoke   # synthetic corpus, 3 small models
#   scripts/correia2019_adaptively_sparse.sh           # the paper's setting (GPUs); data from
#       python -m sparse_attn_data.iwslt14_de_en --bpe-merges 32000 --name iwslt14_de_en_bpe32k
#       python -m sparse_attn_data.kftt_ja_en --bpe-merges 32000 --name kftt_ja_en_bpe32k
#       python -m sparse_attn_data.wmt16_ro_en --bpe-merges 32000 --name wmt16_ro_en_bpe32k
#       python -m sparse_attn_data.wmt14_en_de --bpe-merges 32000 --name wmt14_en_de_bpe32k
#
# Settings: configs/correia2019_adaptively_sparse.json. Published results: results/adaptively_sparse/
# (--out results/adaptively_sparse/; without --out a run writes to .work/NAME[-smoke]/report)
# (README.md and one file per table for the full run; smoke.md and smoke/ for --smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m sparse_attn_experiments.reproduce configs/correia2019_adaptively_sparse.json "$@"
