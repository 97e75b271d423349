#!/usr/bin/env bash
# Every kind of attention on real corpora (issue 16): Multi30k De-En with the CPU-sized
# transformer into multi30k/, and Malaviya et al.'s softmax / sparsemax / csparsemax
# (PREDICTED, c = 0.2) comparison on the 30k-pair KFTT Ja-En sample with the CPU-sized
# LSTM into kftt30k/: under .work/ (not committed); PUBLISH=results puts them into
# results/, as the project publishes results/multi30k/ and results/kftt30k/ (and then
# reuses the rows committed there). Resumable: run it again after an interruption;
# prepared corpora and finished rows are reused. On 2 CPU cores it takes many hours.
#
#   [PUBLISH=results] scripts/real_data_comparisons.sh [--realdata DIR]   # default ../shared/realdata
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
PUBLISH=${PUBLISH:-.work}
REALDATA=../shared/realdata
if [[ "${1:-}" == "--realdata" ]]; then REALDATA=$2; fi
if [[ ! -d "$REALDATA/multi30k/raw" || ! -d "$REALDATA/kftt_cicada30k" ]]; then
  echo "scripts/real_data_comparisons.sh: error: needs the real corpora in $REALDATA" >&2
  exit 1
fi

"$PYTHON" -m sparse_attn_data.multi30k_de_en --raw-dir "$REALDATA/multi30k/raw"
"$PYTHON" -m sparse_attn_experiments.compare --data data-bin/multi30k_de_en --out "$PUBLISH/multi30k" \
  --rows softmax,entmax15,hard,sparsemax,entmax_alpha,topk,csparsemax,kernel_rbf \
  --max-updates 1500 --minutes-per-row 120

KFTT=$REALDATA/kftt_cicada30k
"$PYTHON" -m sparse_attn_data.parallel --src ja --tgt en --train "$KFTT/train" --valid "$KFTT/dev" \
  --test "$KFTT/tune" --no-tokenize --lowercase --fertility --bpe-merges 8000 \
  --name kftt30k_ja_en
"$PYTHON" -m sparse_attn_experiments.compare --data data-bin/kftt30k_ja_en --model lstm \
  --out "$PUBLISH/kftt30k" --max-updates 6000 --minutes-per-row 1200
