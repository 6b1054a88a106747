#!/usr/bin/env bash
# usage: postnorm3.sh NAME LR_SCALE   (post-norm, residual-branch init x0.5; resumable: run again with the same args)
name=$1; scale=$2
cd /work/main
exec nice -n 10 python -m transformer.train --data-dir ../shared/data/multi30k --src en --tgt de \
  --run-dir /work/runs/$name --out /work/runs/export-$name --vocab-size 10000 \
  --d-model 128 --n-heads 4 --n-encoder-layers 4 --n-decoder-layers 4 --d-ff 256 \
  --dropout 0.3 --attention-dropout 0.1 --branch-init-scale 0.5 --batch-tokens 4096 --epochs 60 --max-steps 8000 \
  --warmup 2000 --lr-scale $scale --bleu-sentences 500 --average 10 --threads 1 --seed 1 --no-progress
