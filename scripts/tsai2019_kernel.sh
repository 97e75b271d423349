#!/usr/bin/env bash
# Tsai et al. (2019), "Transformer Dissection": Tables 1-4 on IWSLT14 De-En (positional
# embedding integration, kernels, attention sites with positions, value function with or
# without positions), BLEU beside the paper's and each variant's attention parameters.
# The direct-sum rows (Tables 1 and 2, Table 4 with value PE) train Vaswani et al.'s model
# (positions added once to the embeddings); Table 4's direct sum without value PE and the
# other integrations put positions into the kernel at every attention site.
#
#   scripts/tsai2019_kernel.sh --smoke       # synthetic corpus, 17 small models, 2 CPU cores
#   scripts/tsai2019_kernel.sh               # the paper's setting (GPU); data from
#                                            # python -m sparse_attn_data.iwslt14_de_en
#
# Settings: configs/tsai2019_kernel.json. Published results: results/kernel/
# (--out results/kernel/; without --out a run writes to .work/NAME[-smoke]/report) (README.md for the full
# run, smoke.md for --smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m sparse_attn_experiments.reproduce configs/tsai2019_kernel.json "$@"
