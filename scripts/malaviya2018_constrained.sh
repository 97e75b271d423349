#!/usr/bin/env bash
# Malaviya, Ferreira and Martins (2018), "Sparse and Constrained Attention for Neural
# Machine Translation": Table 1 (softmax, sparsemax, their CovPenalty and CovVector
# baselines, csoftmax and csparsemax with predicted fertilities, scored with BLEU,
# METEOR, REP and DROP) on IWSLT14 De-En, KFTT Ja-En and WMT16 Ro-En, and Table 2
# (csparsemax's fertility strategies) on IWSLT14 De-En. One table or corpus alone:
# --table 'Table 1: attention transforms and coverage baselines, IWSLT14'.
#
#   scripts/malaviya2018_constrained.sh --smoke    # synthetic corpus, ~14 min on 2 CPU cores;
#                                                   # gold and aligner fertilities
#   scripts/malaviya2018_constrained.sh            # the paper's setting (GPU, about a day)
#   scripts/malaviya2018_constrained.sh --data DIR --updates N --work-dir DIR --out DIR
#
# Settings: configs/malaviya2018_constrained.json. Published results: results/constrained/
# (--out results/constrained/; without --out a run writes to .work/NAME[-smoke]/report)
# (README.md for the full run, smoke.md for --smoke). The toy example of the paper's
# Figure 1: sparse-attn-toy-example --out results/constrained
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m sparse_attn_experiments.reproduce \
    configs/malaviya2018_constrained.json "$@"
