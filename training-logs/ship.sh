#!/usr/bin/env bash
# usage: ship.sh NAME N ALPHA TEST_JSON
# Make runs/NAME-avgN (chosen on val with choose.sh, α ALPHA) the default checkpoint, once its one test evaluation
# (TEST_JSON, from `python -m transformer.evaluate ... --split test_2016_flickr --beam 5 --alpha ALPHA --json`)
# is at or above the 40.0 floor: the pre-norm default moves to checkpoints/multi30k-en-de-prenorm unchanged (git mv),
# the chosen average is copied in with its metadata (finalize.py), then its head table (heads.json, ~12 min on two
# cores), its latency and its size. The model cards and the README quality table are written by hand afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1; n=$2; alpha=$3; test_json=$4
dest=checkpoints/multi30k-en-de
python - "$test_json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1], encoding="utf-8").read().strip().splitlines()[-1])
if r["split"] != "test_2016_flickr" or r["beam"] != 5:
    sys.exit(f"{sys.argv[1]} is not a beam-5 test_2016_flickr evaluation")
if r["bleu"] < 40.0:
    sys.exit(f"test BLEU {r['bleu']} is below the 40.0 floor: the pre-norm default stays")
print(f"test BLEU {r['bleu']} (lowercased-tokenized {r['bleu_lc_tok']}): at or above the floor")
PY
grep -q '"norm_first": false' "runs/$name-avg$n/config.json" || { echo "error: runs/$name-avg$n is not post-norm" >&2; exit 1; }
if [ ! -d "$dest-prenorm" ]; then
  git mv "$dest" "$dest-prenorm"
fi
python training-logs/finalize.py "runs/$name-avg$n" "$alpha" "$test_json" "$dest" "$name" > /dev/null
/usr/bin/time -f "heads.json: %e s" python -m transformer.heads --checkpoint "$dest" --split test_2016_flickr \
  --beam 5 --threads 2 --out "$dest/heads.json"
python -m bench --sections latency --checkpoint "$dest"
du -sh "$dest"
