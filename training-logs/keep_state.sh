#!/usr/bin/env bash
# usage: keep_state.sh save NAME | restore NAME
# Carries a training run directory (runs/NAME: optimizer state, averaging checkpoints, snapshots, log) from one
# working session to the next on machines that keep only the repository's working tree (not its ignored
# files): `save` copies it to train-state/NAME (untracked, never committed), `restore` copies it back into
# runs/NAME, after which the same postnorm.sh command resumes bit-exactly from the last finished epoch.
# `save` also collects the epoch checkpoints that pass through runs/NAME/averaging/ (the run keeps only its
# last --average of them) into train-state/NAME-epochs/, the newest KEEP_EPOCHS (default 20), so that averages
# over more epochs than the run's own can be compared on val once it ends. Run it more often than --average
# epochs take, or some pass unseen.
set -euo pipefail
cd "$(dirname "$0")/.."
what=$1; name=$2
case $what in
  save)
    mkdir -p train-state "train-state/$name-epochs"
    rm -rf "train-state/$name.tmp"; cp -a "runs/$name" "train-state/$name.tmp"
    rm -rf "train-state/$name"; mv "train-state/$name.tmp" "train-state/$name"
    cp -n "train-state/$name"/averaging/step*.safetensors "train-state/$name-epochs/" 2>/dev/null || true
    ls "train-state/$name-epochs"/step*.safetensors 2>/dev/null | sort | head -n "-${KEEP_EPOCHS:-20}" | xargs -r rm -f
    echo "saved runs/$name to train-state/$name ($(du -sh "train-state/$name" | cut -f1)), \
$(ls "train-state/$name-epochs" | wc -l) epoch checkpoints in train-state/$name-epochs";;
  restore)
    mkdir -p runs; rm -rf "runs/$name"; cp -a "train-state/$name" "runs/$name"
    echo "restored runs/$name from train-state/$name";;
  *) echo "usage: $0 save|restore NAME" >&2; exit 2;;
esac
