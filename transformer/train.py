"""Train a Transformer on a parallel corpus: ``python -m transformer.train --help``.

Flat and readable, in the spirit of nanoGPT's train.py. The run directory holds the config,
the command line, the log, the metrics and resumable state; run the same command again after
a crash (even ``kill -9``) and training resumes where the last checkpoint left it. Runs on
several processes with ``torchrun`` (DistributedDataParallel; gloo on CPU, nccl on CUDA).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from tqdm import tqdm

from .checkpoint.files import CheckpointError
from .cli import DATA_DIR_HELP, DEFAULT_DATA_DIR
from .evaluation.data import DataError
from .training.setup import TrainingError
from .training.train import train


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help=DATA_DIR_HELP)
    g.add_argument("--src", default="en")
    g.add_argument("--tgt", default="de")
    g.add_argument("--train-split", default="train")
    g.add_argument("--valid-split", default="val")
    g.add_argument("--vocab-size", type=int, default=8000, help="joint sentencepiece vocabulary")
    g.add_argument("--max-tokens-per-sentence", type=int, default=100, help="longer training pairs are skipped")
    g = p.add_argument_group("model")
    g.add_argument("--d-model", type=int, default=256)
    g.add_argument("--n-heads", type=int, default=4)
    g.add_argument("--n-encoder-layers", type=int, default=3)
    g.add_argument("--n-decoder-layers", type=int, default=3)
    g.add_argument("--d-ff", type=int, default=512)
    g.add_argument("--dropout", type=float, default=0.3)
    g.add_argument("--attention-dropout", type=float, default=None)
    g.add_argument("--max-len", type=int, default=256)
    g.add_argument("--norm-first", action="store_true", help="pre-norm instead of the paper's post-norm")
    g.add_argument("--no-share-embeddings", action="store_true")
    g.add_argument("--branch-init-scale", type=float, default=1.0,
                   help="multiply the initial value/output projections and feed-forward weights by this (0.5 keeps "
                        "a small post-norm model's encoder from collapsing early; see scale_residual_branches)")
    g = p.add_argument_group("optimisation")
    g.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per batch (per process)")
    g.add_argument("--epochs", type=int, default=30)
    g.add_argument("--lr-scale", type=float, default=1.0, help="multiplies the paper's schedule")
    g.add_argument("--warmup", type=int, default=1000, help="warm-up steps of the paper's schedule")
    g.add_argument("--cooldown", type=int, default=0,
                   help="over the last N steps of the run (--max-steps or --epochs), scale the schedule's learning "
                        "rate down linearly towards 0 (a warm-up-stable-decay cool-down, Hägele et al. 2024); 0: off. "
                        "Resuming a finished run with a larger --max-steps and --cooldown anneals it")
    g.add_argument("--label-smoothing", type=float, default=0.1)
    g.add_argument("--r-drop", type=float, default=0.0,
                   help="R-Drop (Liang et al. 2021): each batch goes through the model twice and this weight times "
                        "the symmetric KL between the two predictions (per target token) joins the loss; 0: off. "
                        "fairseq's --reg-alpha a is about a/2 here")
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument("--clip-norm", type=float, default=1.0, help="0 disables gradient clipping")
    g.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none",
                   help="bf16 autocast (CPU or CUDA) or fp16 with loss scaling (CUDA)")
    g.add_argument("--seed", type=int, default=1)
    g = p.add_argument_group("evaluation and checkpoints")
    g.add_argument("--eval-every", type=int, default=0, help="steps between validations (0: once an epoch)")
    g.add_argument("--bleu-sentences", type=int, default=0, help="validation sentences decoded for BLEU (0: all)")
    g.add_argument("--patience", type=int, default=0, help="stop after this many validations without a "
                   "better BLEU (0: never)")
    g.add_argument("--average", type=int, default=5, help="average the weights of the last N validations")
    g.add_argument("--snapshots", default="0.01,0.1,0.3", help="fractions of the steps at which to keep "
                   "small fp16 snapshots for the app (empty: none)")
    g.add_argument("--save-every", type=int, default=200, help="steps between resumable checkpoints")
    g.add_argument("--run-dir", default="runs/multi30k-en-de")
    g.add_argument("--out", default=None, help="export the final model here as a checkpoint directory")
    g = p.add_argument_group("machine")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 ...")
    g.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    g.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in total (0: epochs decide)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    words = sys.argv[1:] if argv is None else argv
    command = "python -m transformer.train " + " ".join(shlex.quote(a) for a in words)
    try:
        return train(args, command, tell=tqdm.write)  # tqdm's write: below the progress bar, not through it
    except (TrainingError, DataError, CheckpointError) as err:  # CheckpointError: the device (--device, torchrun)
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
