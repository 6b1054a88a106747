#!/usr/bin/env bash
# usage: postnorm.sh NAME LR_SCALE MAX_STEPS THREADS [EPOCHS [MORE TRAIN ARGUMENTS...]]
# Post-norm, Wu et al.'s Transformer-Tiny recipe, residual-branch init x0.5. Resumable: run it again with the
# same arguments and it continues bit-exactly from the last finished epoch in runs/NAME. A larger MAX_STEPS (with
# EPOCHS large enough, default 80 = 10,720 steps) continues a finished run: the schedule depends on neither.
# The data: DATA_DIR (default data/multi30k, where `python -m transformer.data --download data/multi30k` puts it).
# The shipped checkpoints/multi30k-en-de is run `pn`: `postnorm.sh pn 2.53 14340 2 200`, then `choose.sh pn`.
set -e
name=$1; scale=$2; steps=${3:-8000}; threads=${4:-1}; epochs=${5:-80}
cd "$(dirname "$0")/.."
exec nice -n 10 "${PYTHON:-python}" -m transformer.train --data-dir "${DATA_DIR:-data/multi30k}" --src en --tgt de \
  --run-dir runs/$name --out runs/export-$name --vocab-size 10000 \
  --d-model 128 --n-heads 4 --n-encoder-layers 4 --n-decoder-layers 4 --d-ff 256 \
  --dropout 0.3 --attention-dropout 0.1 --branch-init-scale 0.5 --batch-tokens 4096 --epochs $epochs \
  --max-steps $steps --warmup 2000 --lr-scale $scale --bleu-sentences 500 --average 10 --threads $threads \
  --seed 1 --no-progress "${@:6}"
