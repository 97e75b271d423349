#!/usr/bin/env bash
# Issue 16's question: does a kind of attention that trails softmax by more than 1 BLEU on
# Multi30k De-En after 1500 updates (results/multi30k/) still trail it at convergence?
# The same rows as results/multi30k/ (same architecture, data, seed), each trained until its
# validation loss has not improved for 5 epochs, into results/multi30k_convergence/.
# Its own work folder: the capped rows of results/multi30k/ stay as they are.
# Resumable. Sized for a GPU (about 10 minutes a row on an H100); on 2 CPU cores a row
# takes several hours.
#
#   scripts/real_data_convergence.sh [ROWS]   # default softmax,sparsemax,hard,entmax15
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
ROWS=${1:-softmax,sparsemax,hard,entmax15}
if [[ "$ROWS" == -* ]]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
if [[ ! -f data-bin/multi30k_de_en/PREPARED.json ]]; then
  echo "scripts/real_data_convergence.sh: error: prepare Multi30k first" \
       "(python -m data_prep.multi30k_de_en)" >&2
  exit 1
fi
"$PYTHON" -m sparse_attn_plugin.experiments.compare --data data-bin/multi30k_de_en --rows "$ROWS" \
  --max-updates 12000 --minutes-per-row 240 \
  --work-dir .work/compare/multi30k_de_en_convergence --out results/multi30k_convergence
