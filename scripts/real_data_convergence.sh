#!/usr/bin/env bash
# Issue 16's question: does a kind of attention that trails softmax by more than 1 BLEU on
# Multi30k De-En after 1500 updates (results/multi30k/) still trail it at convergence?
# The rows trained with one architecture, data and seed, each until its validation loss has
# not improved for 5 epochs. MODEL `small` (the default) is results/multi30k/'s transformer,
# into multi30k_convergence/: the CPU model those rows trained (1,500 updates each on 2 CPU
# cores), here up to 30,000 updates a row, 20 times as many: days a row on such a machine
# (not run yet; no record times a row of it anywhere). MODEL `tiny` (2+2 layers, 64-dim) is
# small enough for a CPU, into multi30k_convergence_tiny/: the committed
# results/multi30k_convergence_tiny/ trained each row on one core, up to its 30,000 updates.
# Each row is also decoded with softmax at every site (--decode-with softmax), to tell a
# gap learned in training from one made by the normaliser at decoding, and translated at
# the length penalty it does best with on valid (--tune-lenpen), to tell a gap in what a
# row translates from one in where its beam search ends sentences.
# The report goes under .work/ (not committed); PUBLISH=results puts it into results/, as
# the project publishes its records. Its own work folder: the capped rows of
# results/multi30k/ stay as they are. Resumable.
#
#   [PUBLISH=results] scripts/real_data_convergence.sh [MODEL [ROWS]]
#   # e.g. scripts/real_data_convergence.sh tiny softmax,sparsemax
#   # ROWS default: softmax,sparsemax,hard,csparsemax,entmax_alpha,entmax15
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
PUBLISH=${PUBLISH:-.work}
MODEL=${1:-small}
ROWS=${2:-softmax,sparsemax,hard,csparsemax,entmax_alpha,entmax15}
if [[ "$MODEL" == -* ]]; then
  sed -n '2,/^set -euo pipefail/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
case "$MODEL" in
  small) OUT=$PUBLISH/multi30k_convergence ;;
  tiny) OUT=$PUBLISH/multi30k_convergence_tiny ;;
  *) echo "scripts/real_data_convergence.sh: error: unknown MODEL '$MODEL' (small or tiny)" >&2
     exit 1 ;;
esac
if [[ ! -f data-bin/multi30k_de_en/PREPARED.json ]]; then
  echo "scripts/real_data_convergence.sh: error: prepare Multi30k first" \
       "(python -m sparse_attn_data.multi30k_de_en)" >&2
  exit 1
fi
"$PYTHON" -m sparse_attn_experiments.compare --data data-bin/multi30k_de_en --model "$MODEL" \
  --rows "$ROWS" --max-updates 30000 --minutes-per-row 720 --decode-with softmax \
  --tune-lenpen 1,1.5,2,3 --work-dir .work/compare/multi30k_de_en_convergence --out "$OUT"
