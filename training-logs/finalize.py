"""Copy the average chosen on val into a checkpoint directory and write into its metadata.json what its model card
and the app's picker read: the whole validation curve, every command run, the val grid, the val and test scores
(beam 5) and the length penalty (chosen on val, or fixed in advance when the grid has one).

usage (from the repository root, after ``choose.sh NAME`` and one test evaluation saved as JSON):
    python training-logs/finalize.py runs/NAME-avgN ALPHA TEST_JSON checkpoints/DEST NAME
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

KEEP = ("bleu", "chrf", "bleu_lc_tok", "length_ratio", "beam", "alpha", "sentences", "seconds", "signature")


def main(src: Path, alpha: float, test_json: Path, dest: Path, run: str) -> dict:
    lines = Path(f"training-logs/{run}.val-choice.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    test = json.loads(test_json.read_text(encoding="utf-8").strip().splitlines()[-1])
    n = int(src.name.rsplit("avg", 1)[1])
    chosen = next(r for r in rows if r["average"] == n and abs(r["alpha"] - alpha) < 1e-9)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    meta_path = dest / "metadata.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    history = json.loads(Path(f"runs/{run}/metrics.json").read_text(encoding="utf-8"))
    meta["history"], meta["steps"] = history, history[-1]["step"]
    meta["commands_run"] = Path(f"runs/{run}/command.txt").read_text(encoding="utf-8").strip().splitlines()
    meta["val_beam5"] = {k: chosen[k] for k in KEEP if k in chosen}
    meta["test_2016_flickr"] = {k: test[k] for k in KEEP if k in test}
    # "chosen on val" only when the grid had several length penalties; one (gpu.sh's 1.0) was fixed in advance
    fixed = len({r["alpha"] for r in rows}) == 1
    meta["decoding"] = {"beam": 5, "alpha": alpha, **({"fixed_in_advance": True} if fixed else {"chosen_on": "val"})}
    meta["val_choice"] = [{k: r[k] for k in ("average", "alpha", "bleu", "chrf", "bleu_lc_tok")} for r in rows]
    meta["domain"] = "image captions (Multi30k: short descriptions of photos)"
    meta_path.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return meta


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    meta = main(Path(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5])
    skip = ("history", "commands_run", "training_command", "val_choice")
    print(json.dumps({k: v for k, v in meta.items() if k not in skip}, indent=1)[:3000])
