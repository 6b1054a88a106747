#!/usr/bin/env bash
# usage, on a lent GPU machine (the device tool's `run`, carry ["data/multi30k"]), from the repository root:
#   training-logs/gpu.sh start NAME [MORE TRAIN ARGUMENTS...]   # starts the run in its own process session
#   training-logs/gpu.sh wait NAME SECONDS                       # waits for it (at most SECONDS), prints progress
#   training-logs/gpu.sh finish NAME                             # val choice of the average, one test look -> $OUT
# Once, here, before the first call: python -m transformer.data --download data/multi30k (or copy a local
# Multi30k there); data/ is ignored, so nothing of it is committed, and `carry` takes it to the device.
# The recipe: post-norm Transformer-Tiny (postnorm.sh) with 8,192 tokens an update, 16,000 steps, the last 40
# epoch checkpoints kept in runs/NAME/averaging, so that `finish` needs no keep_state.sh. A started run outlives
# its `run` call while the machine stays warm: call `wait` again at once.
# The selection rule, fixed before the run: the length penalty is 1.0 (fairseq's default, as in Wu et al.), not
# tuned; only the number of averaged epochs (AVERAGES, default 5 10 15 20 30 40) is chosen, by the best val `bleu`
# (beam 5). That one average is scored once on test_2016_flickr. $OUT gets the val grid, the test JSON, the run's
# metrics and log, and the chosen checkpoint as a tar split into 15 MB parts (the device returns files of at most
# 16 MiB): cat NAME-avg*.tar.part* | tar -x -C runs/, then training-logs/finalize.py (training-logs/README.md).
# DEVICE=cpu and MAX_STEPS=N run the same steps on a CPU (a dry run of this script).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-}; name=${2:-}
[ -n "$name" ] || { echo "usage: $0 start|wait|finish NAME ..." >&2; exit 2; }
shift 2
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
device=${DEVICE:-cuda}
data=${DATA_DIR:-data/multi30k}
out=${OUT:-runs/out-$name}
alpha=1.0  # fixed in advance (fairseq's default, Wu et al.); deliberately not a setting
case $what in
  start)
    [ -f "$data/train.en" ] || { echo "$data/train.en missing: python -m transformer.data --download $data" >&2; exit 1; }
    mkdir -p runs
    DATA_DIR=$data PYTHON=$py setsid nohup training-logs/postnorm.sh "$name" 2.53 "${MAX_STEPS:-16000}" 0 240 \
      --batch-tokens 8192 --average 40 --bleu-sentences 500 --device "$device" "$@" > "runs/$name.log" 2>&1 < /dev/null &
    echo "started $name (pid $!) on $device; log: runs/$name.log"
    sleep 20; tail -n 5 "runs/$name.log";;
  wait)
    end=$(( $(date +%s) + ${1:-540} ))
    while pgrep -f "run-dir runs/$name " > /dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 15; done
    tail -n 3 "runs/$name.log"
    if pgrep -f "run-dir runs/$name " > /dev/null; then echo "$name: still running"; else echo "$name: ended"; fi;;
  finish)
    mkdir -p "$out"
    read -r _ _ _ ckpt _ a _ < <(GRID=$out/$name.val-choice.jsonl STEPS_DIR=runs/$name/averaging PYTHON=$py \
      DATA_DIR=$data ALPHAS=$alpha EVAL_ARGS="--device $device" \
      training-logs/choose.sh "$name" ${AVERAGES:-5 10 15 20 30 40} | tail -1)
    n=${ckpt##*-avg}
    echo "best on val: last $n epochs (alpha $a, fixed in advance)"
    "$py" -m transformer.evaluate --checkpoint "runs/$name-avg$n" --data-dir "$data" --split test_2016_flickr \
      --beam 5 --alpha "$alpha" --device "$device" --json --no-progress | tail -1 > "$out/$name-avg$n.test.json"
    cat "$out/$name-avg$n.test.json"
    cp "runs/$name/metrics.json" "$out/$name.metrics.json"
    cp "runs/$name/train.log" "$out/$name.train.log"
    tar -C runs -cf - "$name-avg$n" | split -b 15m - "$out/$name-avg$n.tar.part"
    ls -la "$out";;
  *) echo "usage: $0 start|wait|finish NAME ..." >&2; exit 2;;
esac
