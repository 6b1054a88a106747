"""``python -m transformer.corpus``: one table row of signals per sentence of a whole test set, on one process or
many (``torchrun``, one or several machines), resumable.

    python -m transformer.corpus --checkpoint checkpoints/multi30k-en-de --data-dir data/multi30k \\
        --split test_2016_flickr --out test.parquet
    torchrun --nproc-per-node 4 -m transformer.corpus ... (same flags)
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m transformer.corpus ...

The columns are ``transformer.interpret.table.COLUMNS``. Beside ``--out X.parquet`` (or ``X.jsonl``) goes
``X.manifest.json`` (the run's fingerprint; model and the sha256 of its files, settings, input and the sha256 of its
files, package versions, columns, rows, the table's own sha256), written after the table. While it runs, each
process appends the rows of each batch it finishes to its own part file, ``X.parquet.parts/rank<R>.jsonl``, whose
first line is the run's fingerprint; started again with the same ``--out`` a run keeps every batch its own parts
hold and computes the rest; parts of another run stop it (``--overwrite`` deletes them): see
``transformer.interpret.corpus_files``. Under ``torchrun`` the batches are shared out by rank (each rank on
``cuda:LOCAL_RANK`` when there is a GPU, else on the CPU, gloo); after a barrier rank 0 gathers every rank's rows
(through the process group: the machines need no shared disk), merges them by line and writes the table, which
equals the one-process table row for row.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from .checkpoint.files import CheckpointError
from .cli import DEFAULT_DATA_DIR, add_checkpoint, add_decoding, add_threads, error, use_threads
from .interpret.corpus import SUFFIXES, run, stop_processes
from .interpret.corpus_files import CorpusError
from .interpret.table import DEFAULT_BATCH_SIZE


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m transformer.corpus", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint(p)
    p.add_argument("--source", help="source file, one sentence a line")
    p.add_argument("--reference", help="reference file, one translation a line (optional, with --source)")
    p.add_argument("--data-dir", help="directory with {split}.{lang} files (default, without --source: "
                                      f"{DEFAULT_DATA_DIR})")
    p.add_argument("--split", default="test_2016_flickr", help="with --data-dir (default: test_2016_flickr)")
    p.add_argument("--src", help="with --data-dir: the source files' language suffix (default: the checkpoint's "
                                 "language pair, else en)")
    p.add_argument("--tgt", help="with --data-dir: the reference files' suffix (default: the pair's, else de)")
    add_decoding(p, languages=True)
    p.add_argument("--limit", type=int, help="only the first N lines")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences per batch (default 64)")
    p.add_argument("--out", required=True, help="the table: FILE.parquet or FILE.jsonl")
    p.add_argument("--no-inputs", action="store_true",
                   help="leave source and reference null in the written table (for a table committed without the "
                        "corpus' lines; they join back by id)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing table of another run")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="the weights' dtype (bfloat16: half the memory; attention weights still float32)")
    p.add_argument("--device", default="auto", help="auto (cuda:LOCAL_RANK when there is a GPU), cpu or cuda")
    add_threads(p)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.source and args.data_dir:
        p.error("give either --source FILE (with an optional --reference FILE) or --data-dir DIR --split NAME")
    if not args.source:
        args.data_dir = args.data_dir or DEFAULT_DATA_DIR
    if args.reference and not args.source:
        p.error("--reference goes with --source")
    for name in ("limit", "beam", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "limit" else 1):
            p.error(f"--{name.replace('_', '-')} must be at least {0 if name == 'limit' else 1}, not {value}")
    if Path(args.out).suffix not in SUFFIXES:
        p.error(f"--out must end in {' or '.join(SUFFIXES)}, not {args.out!r}")
    return args


def check_args(args: argparse.Namespace) -> None:
    """What argparse lets through but no run can use: a ``CorpusError`` (one line, exit status 1)."""
    if args.alpha is not None and not math.isfinite(args.alpha):
        raise CorpusError(f"--alpha must be a finite number, not {args.alpha}")
    if args.limit == 0:
        raise CorpusError("--limit 0 leaves no line to translate; give at least 1")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    use_threads(args)
    try:
        check_args(args)
        run(args, tell=lambda message: print(message, file=sys.stderr))
        return 0
    except (CorpusError, CheckpointError) as err:
        return error(err)
    finally:
        stop_processes()


if __name__ == "__main__":
    raise SystemExit(main())
