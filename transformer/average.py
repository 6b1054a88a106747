"""Checkpoint averaging: ``python -m transformer.average --help``.

Training writes the weights of each validation to ``RUN_DIR/averaging/stepNNNNNNN.safetensors`` (tied
embeddings stored once), keeps the last ``--average`` of them and exports their mean. This command re-exports
an exported checkpoint directory with the mean of the last N step files of any directory, so the number of
checkpoints averaged can be chosen on val after the run (Vaswani et al. average the last 5 or 20; Wu et al.
the last 10):

    python -m transformer.average --checkpoint runs/export-pn --steps-dir train-state/pn-epochs --last 20 \
        --out runs/export-pn-avg20
    python -m transformer.evaluate --checkpoint runs/export-pn-avg20 --split val --beam 5 --json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from .checkpoint.files import METADATA_FILE, CheckpointError
from .training.average import average_into


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, required=True, help="an exported checkpoint directory of the run")
    p.add_argument("--steps-dir", type=Path, required=True, help="directory of stepNNNNNNN.safetensors files")
    p.add_argument("--last", type=int, required=True, help="average the newest N step files")
    p.add_argument("--out", type=Path, required=True, help="checkpoint directory to write")
    args = p.parse_args(argv)
    if args.last < 1:
        p.error("--last must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    words = sys.argv[1:] if argv is None else list(argv)
    command = "python -m transformer.average " + " ".join(shlex.quote(w) for w in words)
    try:
        out = average_into(args.checkpoint, args.steps_dir, args.last, args.out, command)
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    names = json.loads((out / METADATA_FILE).read_text(encoding="utf-8"))["final_validation"]["averaged_checkpoints"]
    print(f"wrote {out}: mean of {len(names)} step files, {names[0]} .. {names[-1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
