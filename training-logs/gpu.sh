#!/usr/bin/env bash
# usage, on a lent GPU machine (the device tool's `run`, carry ["runs/data"]), from the repository root:
#   training-logs/gpu.sh start NAME [MORE TRAIN ARGUMENTS...]   # starts the run in its own process session
#   training-logs/gpu.sh wait NAME SECONDS                       # waits for it (at most SECONDS), prints progress
#   training-logs/gpu.sh finish NAME                             # val grid, the chosen cell, its one test look -> $OUT
# Once, here, before the first call: mkdir -p runs/data && cp ../shared/data/multi30k/*.{en,de} runs/data/
# (runs/ is ignored, so nothing of the data is committed; `carry` takes it to the device, which cannot see ../shared).
# The recipe is `pnbfc`'s (postnorm.sh with --batch-tokens 8192, 16,000 steps; the grid is choose.sh's) with the last 40 epoch checkpoints
# kept in runs/NAME/averaging, so that `finish` needs no keep_state.sh. A started run outlives its `run` call
# while the machine stays warm (30 s between calls, 30 minutes held at most): call `wait` again at once.
# finish scores every cell of AVERAGES x ALPHAS on val (beam 5), takes the best val `bleu` (the issue's rule; set
# AVERAGES/ALPHAS before the run, never after a test look), scores that one cell on test_2016_flickr, and leaves in
# $OUT: the val grid, the test JSON, the run's metrics and log, and the chosen checkpoint as a tar split into
# 15 MB parts (the device returns files of at most 16 MiB): cat NAME-avg*.tar.part* | tar -x -C runs/
# Then, here: python training-logs/finalize.py / training-logs/ship.sh as in training-logs/README.md.
# DEVICE=cpu and MAX_STEPS=N run the same steps on a CPU (a dry run of this script).
set -euo pipefail
cd "$(dirname "$0")/.."
what=$1; name=$2; shift 2
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
device=${DEVICE:-cuda}
out=${OUT:-runs/out-$name}
case $what in
  start)
    [ -f runs/data/train.en ] || { echo "runs/data/train.en missing: copy ../shared/data/multi30k here first" >&2; exit 1; }
    mkdir -p runs
    PYTHON=$py setsid nohup training-logs/postnorm.sh "$name" 2.53 "${MAX_STEPS:-16000}" 0 240 --data-dir runs/data \
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
      ALPHAS=${ALPHAS:-1.0 1.4 1.8 2.2 2.6 3.0 3.5 4.0} EVAL_ARGS="--data-dir runs/data --device $device" \
      training-logs/choose.sh "$name" ${AVERAGES:-5 10 15 20 30 40} | tail -1)
    n=${ckpt##*-avg}
    echo "best on val: last $n epochs, alpha $a"
    "$py" -m transformer.evaluate --checkpoint "runs/$name-avg$n" --data-dir runs/data --split test_2016_flickr \
      --beam 5 --alpha "$a" --device "$device" --json --no-progress | tail -1 > "$out/$name-avg$n.test.json"
    cat "$out/$name-avg$n.test.json"
    cp "runs/$name/metrics.json" "$out/$name.metrics.json"
    cp "runs/$name/train.log" "$out/$name.train.log"
    tar -C runs -cf - "$name-avg$n" | split -b 15m - "$out/$name-avg$n.tar.part"
    ls -la "$out";;
  *) echo "usage: $0 start|wait|finish NAME ..." >&2; exit 2;;
esac
