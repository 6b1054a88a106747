#!/usr/bin/env bash
# usage: choose.sh NAME [N ...]
# After runs/NAME has ended and exported runs/export-NAME: re-export it with the mean of the last N epoch
# checkpoints (N from the arguments, default 10 15 20; the files come from train-state/NAME-epochs, collected by
# keep_state.sh) and score every average with beam 5 at length penalties $ALPHAS (default 0.6 1.0 1.4) on val,
# one JSON line each in training-logs/NAME.val-choice.jsonl (APPEND=1 adds to it: more length penalties or
# averages later, without scoring the old cells again). Val only: test is scored once, for the best line.
# DATA_DIR (default data/multi30k), STEPS_DIR (default train-state/NAME-epochs), GRID (default that .jsonl file)
# and EVAL_ARGS (more evaluate arguments, e.g. "--device cuda") let gpu.sh use it on a lent GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1; shift
counts=${*:-10 15 20}
out=${GRID:-training-logs/$name.val-choice.jsonl}
[ "${APPEND:-0}" = 1 ] || : > "$out"
for n in $counts; do
  "${PYTHON:-python}" -m transformer.average --checkpoint "runs/export-$name" --steps-dir "${STEPS_DIR:-train-state/$name-epochs}" \
    --last "$n" --out "runs/$name-avg$n"
  for a in ${ALPHAS:-0.6 1.0 1.4}; do
    "${PYTHON:-python}" -m transformer.evaluate --checkpoint "runs/$name-avg$n" --split val --beam 5 --alpha "$a" \
      --data-dir "${DATA_DIR:-data/multi30k}" --threads 2 ${EVAL_ARGS:-} --json --no-progress | tail -1 | "${PYTHON:-python}" -c "import json,sys; r=json.load(sys.stdin); r['average']=$n; print(json.dumps(r))" >> "$out"
  done
done
"${PYTHON:-python}" - "$out" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for r in rows:
    print(f"avg {r['average']:>2}  alpha {r['alpha']:.1f}  val BLEU {r['bleu']:.2f}  chrF {r['chrf']:.2f}  "
          f"lc-tok {r['bleu_lc_tok']:.2f}  length ratio {r.get('length_ratio', float('nan')):.3f}")
best = max(rows, key=lambda r: r["bleu"])
print(f"best on val: {best['checkpoint']} alpha {best['alpha']:g} ({best['bleu']:.2f})")
PY
