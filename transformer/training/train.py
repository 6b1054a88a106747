"""Train a Transformer on a parallel corpus: ``python -m transformer.train --help``.

Flat and readable, in the spirit of nanoGPT's train.py. The run directory holds the config,
the command line, the log, the metrics and resumable state; run the same command again after
a crash (even ``kill -9``) and training resumes where the last checkpoint left it. Runs on
several processes with ``torchrun`` (DistributedDataParallel; gloo on CPU, nccl on CUDA).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from tqdm import tqdm

from ..checkpoint.files import resolve_device
from ..checkpoint.save import save_checkpoint
from ..checkpoint.tokenizer import Tokenizer
from ..network.model import Transformer, TransformerConfig
from ..network.weights import scale_residual_branches
from .average import average_states, last_step_files, load_averaged, save_step_file, unique_state
from .data import DataError, read_parallel, token_batches
from .step import atomic_torch_save, keep_freed_memory, lr_at, make_batch, training_loss, validate

__all__ = ["TrainingError", "lr_at", "main", "parse_args", "train", "training_loss"]


class TrainingError(Exception):
    """Training cannot go on (non-finite loss, bad data); the message says why."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--data-dir", default="data/multi30k",
                   help="directory with {split}.{lang} files (python -m transformer.data --download data/multi30k)")
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
    try:
        return train(args, argv)
    except (TrainingError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


@dataclass
class Processes:
    """This process's place in a run: the only one, or one of ``world`` under ``torchrun`` (rank 0 the main one, which
    alone writes and logs)."""

    device: torch.device
    rank: int = 0
    world: int = 1

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def start_processes(args: argparse.Namespace) -> Processes:
    """Threads, device and, under ``torchrun`` (``WORLD_SIZE`` > 1), the process group (gloo on CPU, nccl on CUDA)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if device.type == "cpu":
        keep_freed_memory()
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Processes(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    return Processes(device, dist.get_rank(), dist.get_world_size())


@dataclass
class Corpus:
    """The run's tokenizer and its encoded data: training pairs (``[BOS]`` only on targets, ``</s>`` on both) within
    the length limit, and the validation set as ``validate`` takes it."""

    tokenizer: Tokenizer
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    lengths: list[tuple[int, int]]
    val_src: list[str]
    val_tgt: list[str]
    val_pairs: tuple[list[list[int]], list[list[int]]]
    val_batches: list[list[int]]


def prepare_corpus(args: argparse.Namespace, procs: Processes, run_dir: Path) -> Corpus:
    """Read the splits, train the run's sentencepiece model once (the main process) and encode everything."""
    data_dir = Path(args.data_dir)
    train_src, train_tgt = read_parallel(data_dir, args.train_split, args.src, args.tgt)
    val_src, val_tgt = read_parallel(data_dir, args.valid_split, args.src, args.tgt)
    spm_path = run_dir / "tokenizer.model"
    if procs.main and not spm_path.is_file():
        train_files = [data_dir / f"{args.train_split}.{lang}" for lang in (args.src, args.tgt)]
        tok = Tokenizer.train(train_files, vocab_size=args.vocab_size, seed=args.seed)
        tmp = spm_path.with_name("tokenizer.model.tmp")
        tok.save(tmp)
        os.replace(tmp, spm_path)
    procs.barrier()
    tokenizer = Tokenizer(spm_path)

    def encode_all(lines: list[str], bos: bool) -> list[list[int]]:
        return [([tokenizer.bos_id] if bos else []) + ids + [tokenizer.eos_id] for ids in tokenizer.encode_batch(lines)]

    src_ids, tgt_ids = encode_all(train_src, False), encode_all(train_tgt, True)
    keep = [i for i in range(len(src_ids)) if max(len(src_ids[i]), len(tgt_ids[i])) <= args.max_tokens_per_sentence]
    src_ids, tgt_ids = [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]
    if not src_ids:
        raise TrainingError("no training pairs left after the length filter")
    val_pairs = (encode_all(val_src, False), encode_all(val_tgt, True))
    val_batches = token_batches([(len(s), len(t)) for s, t in zip(*val_pairs)], args.batch_tokens, 0, shuffle=False)
    return Corpus(tokenizer, src_ids, tgt_ids, [(len(s), len(t)) for s, t in zip(src_ids, tgt_ids)], val_src,
                  val_tgt, val_pairs, val_batches)


def build_model(args: argparse.Namespace, tokenizer: Tokenizer, device: torch.device
                ) -> tuple[Transformer, torch.optim.Optimizer, torch.amp.GradScaler]:
    """The model of the arguments (seeded), its Adam optimiser (the paper's betas and epsilon) and the loss scaler
    (fp16 on CUDA only)."""
    config = TransformerConfig(
        src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size, d_model=args.d_model,
        n_heads=args.n_heads, n_encoder_layers=args.n_encoder_layers, n_decoder_layers=args.n_decoder_layers,
        d_ff=args.d_ff, dropout=args.dropout, attention_dropout=args.attention_dropout, max_len=args.max_len,
        norm_first=args.norm_first, share_embeddings=not args.no_share_embeddings,
        pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    model = Transformer(config)
    if args.branch_init_scale != 1.0:
        scale_residual_branches(model, args.branch_init_scale)
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr_at(1, args.d_model, args.warmup, args.lr_scale),
                                 betas=(0.9, 0.98), eps=1e-9, weight_decay=args.weight_decay)
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp == "fp16" and device.type == "cuda")
    return model, optimizer, scaler


@dataclass
class Progress:
    """Where a run is (saved in ``state.pt`` with the weights, the optimiser and the random generators)."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    history: list[dict] = field(default_factory=list)
    best_bleu: float = -1.0
    evals_since_best: int = 0


def save_state(path: Path, model: Transformer, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
               progress: Progress) -> None:
    """Everything a run resumes from, written atomically."""
    py_rng = random.getstate()
    atomic_torch_save({
        "config": model.config.to_dict(), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(), "step": progress.step, "epoch": progress.epoch,
        "batch_in_epoch": progress.batch_in_epoch, "history": progress.history, "best_bleu": progress.best_bleu,
        "evals_since_best": progress.evals_since_best, "torch_rng": torch.get_rng_state(),
        "py_rng": (py_rng[0], list(py_rng[1]), py_rng[2]),
    }, path)


def resume(path: Path, model: Transformer, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler
           ) -> Progress:
    """Load what :func:`save_state` wrote (model, optimiser, scaler, position in the data, random generators)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state["config"] != model.config.to_dict():
        raise TrainingError(f"{path} was written by a run with another model config; "
                            f"use another --run-dir or the same arguments")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate((state["py_rng"][0], tuple(state["py_rng"][1]), state["py_rng"][2]))
    return Progress(state["step"], state["epoch"], state["batch_in_epoch"], state["history"], state["best_bleu"],
                    state["evals_since_best"])


def optimizer_step(args: argparse.Namespace, model: Transformer, ddp_model: torch.nn.Module,
                   optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, src: torch.Tensor,
                   tgt: torch.Tensor, lr: float, state_path: Path, step: int) -> torch.Tensor:
    """One training step at learning rate ``lr``: the loss (under ``--amp``), its gradients (clipped with
    ``--clip-norm``) and the update; returns the plain cross-entropy. A non-finite loss stops the run before any
    update (``TrainingError``)."""
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    for group in optimizer.param_groups:
        group["lr"] = lr
    with torch.autocast(src.device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
        loss, ce = training_loss(ddp_model, src, tgt, model.config.pad_id, args.label_smoothing, args.r_drop)
    if not torch.isfinite(loss):
        raise TrainingError(f"loss became {loss.item()} at step {step + 1} (lr {lr:.2e}); nothing was "
                            f"saved from this step. Lower --lr-scale, raise --warmup or use --amp none, "
                            f"then run again: training resumes from {state_path}")
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    if args.clip_norm > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
    scaler.step(optimizer)
    scaler.update()
    return ce


def validate_and_keep(args: argparse.Namespace, run_dir: Path, model: Transformer, corpus: Corpus,
                      progress: Progress, device: torch.device, metrics_of_step: dict) -> bool:
    """Validate (the main process), record it in ``progress`` and ``metrics.json``, and keep the weights for
    averaging (the last ``--average`` of them); returns whether validation BLEU improved."""
    metrics = validate(model, corpus.tokenizer, corpus.val_pairs, corpus.val_src, corpus.val_tgt, corpus.val_batches,
                       args.bleu_sentences, device)
    metrics.update(metrics_of_step)
    progress.history.append(metrics)
    improved = metrics["val_bleu"] > progress.best_bleu
    progress.best_bleu = max(progress.best_bleu, metrics["val_bleu"])
    progress.evals_since_best = 0 if improved else progress.evals_since_best + 1
    save_step_file(unique_state(model), run_dir / "averaging" / f"step{progress.step:07d}.safetensors")
    kept = set(last_step_files(run_dir / "averaging", args.average))
    for old in set((run_dir / "averaging").glob("step*.safetensors")) - kept:
        old.unlink()
    (run_dir / "metrics.json").write_text(json.dumps(progress.history, indent=2) + "\n")
    return improved


def train(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    procs = start_processes(args)
    device, rank, world = procs.device, procs.rank, procs.world
    run_dir = Path(args.run_dir)
    state_path = run_dir / "state.pt"
    if procs.main:
        (run_dir / "averaging").mkdir(parents=True, exist_ok=True)
        (run_dir / "snapshots").mkdir(parents=True, exist_ok=True)
    procs.barrier()

    def log(message: str) -> None:
        if procs.main:
            tqdm.write(message)
            with open(run_dir / "train.log", "a", encoding="utf-8") as f:
                f.write(message + "\n")

    # ---------------------------------------------------------------- data, model, where the run is
    corpus = prepare_corpus(args, procs, run_dir)
    batches_per_epoch = len(token_batches(corpus.lengths, args.batch_tokens, args.seed)) // world
    total_steps = args.epochs * batches_per_epoch
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)
    eval_every = args.eval_every or batches_per_epoch
    model, optimizer, scaler = build_model(args, corpus.tokenizer, device)
    config = model.config
    progress = Progress()
    if state_path.is_file():
        progress = resume(state_path, model, optimizer, scaler)
        log(f"resumed from {state_path} at step {progress.step} (epoch {progress.epoch + 1}, batch "
            f"{progress.batch_in_epoch})")
    elif procs.main:
        config.save(run_dir / "config.json")
        (run_dir / "args.json").write_text(json.dumps(vars(args), indent=2) + "\n")
        log(f"model: {model.num_parameters():,} parameters, vocabulary {corpus.tokenizer.vocab_size}, "
            f"{len(corpus.src_ids):,} training pairs, {batches_per_epoch} batches an epoch, {total_steps} steps")
    if procs.main:
        command = "python -m transformer.train " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                     else sys.argv[1:]))
        with open(run_dir / "command.txt", "a", encoding="utf-8") as f:
            f.write(command + "\n")
    ddp_model = torch.nn.parallel.DistributedDataParallel(model) if procs.distributed else model
    snapshot_steps = {max(1, round(float(f) * total_steps)) for f in args.snapshots.split(",") if f.strip()}

    # ---------------------------------------------------------------- the loop
    model.train()
    stop = progress.step >= total_steps
    bar = tqdm(total=total_steps, initial=progress.step, disable=not procs.main or args.no_progress, unit="step",
               dynamic_ncols=True)
    tokens_seen, t_last = 0, time.time()
    while not stop:
        batches = token_batches(corpus.lengths, args.batch_tokens, args.seed * 1000 + progress.epoch)
        my_batches = batches[rank::world][:batches_per_epoch]
        for rows in my_batches[progress.batch_in_epoch:]:
            src = make_batch(corpus.src_ids, rows, config.pad_id).to(device)
            tgt = make_batch(corpus.tgt_ids, rows, config.pad_id).to(device)
            lr = lr_at(progress.step + 1, args.d_model, args.warmup, args.lr_scale, total_steps, args.cooldown)
            ce = optimizer_step(args, model, ddp_model, optimizer, scaler, src, tgt, lr, state_path, progress.step)
            progress.step += 1
            progress.batch_in_epoch += 1
            step = progress.step
            tokens_seen += int((tgt[:, 1:] != config.pad_id).sum()) * world
            bar.update(1)
            bar.set_postfix(loss=f"{ce.item():.3f}", tok_s=f"{tokens_seen / max(time.time() - t_last, 1e-9):.0f}",
                            lr=f"{lr:.2e}", epoch=progress.epoch + 1)
            if procs.main and step in snapshot_steps:
                half = {k: v.half() for k, v in unique_state(model).items()}
                save_step_file(half, run_dir / "snapshots" / f"step{step:07d}.safetensors")
            if step % eval_every == 0 or step >= total_steps:
                if procs.main:
                    improved = validate_and_keep(args, run_dir, model, corpus, progress, device,
                                                 dict(step=step, epoch=progress.epoch + 1, train_loss=ce.item(), lr=lr))
                    m = progress.history[-1]
                    log(f"step {step} epoch {progress.epoch + 1}: train loss {m['train_loss']:.3f}, "
                        f"val loss {m['val_loss']:.3f}, val ppl {m['val_ppl']:.2f}, "
                        f"val BLEU {m['val_bleu']:.2f}{' (best)' if improved else ''}, lr {lr:.2e}, "
                        f"{tokens_seen / max(time.time() - t_last, 1e-9):.0f} tok/s")
                    tokens_seen, t_last = 0, time.time()
                if args.patience:
                    flag = torch.tensor([int(progress.evals_since_best >= args.patience)])
                    if procs.distributed:
                        dist.broadcast(flag, 0)
                    if flag.item():
                        log(f"early stop: no better validation BLEU in {args.patience} validations")
                        stop = True
            if (step % args.save_every == 0 or step >= total_steps or stop) and procs.main:
                save_state(state_path, model, optimizer, scaler, progress)
            if step >= total_steps or stop:
                stop = True
                break
        else:
            progress.epoch += 1
            progress.batch_in_epoch = 0
            if procs.main:
                save_state(state_path, model, optimizer, scaler, progress)
    bar.close()

    # ---------------------------------------------------------------- average, export
    if procs.distributed:
        save_file(unique_state(model), str(run_dir / f"replica{rank}.safetensors"))
        dist.barrier()
        dist.destroy_process_group()
    if not procs.main:
        return 0

    def check(m: Transformer) -> dict[str, float]:
        return validate(m, corpus.tokenizer, corpus.val_pairs, corpus.val_src, corpus.val_tgt, corpus.val_batches,
                        args.bleu_sentences, device)

    average_and_export(args, run_dir, model, corpus.tokenizer, check, log,
                       {"steps": progress.step, "history": progress.history, "device": str(device),
                        "world_size": world})
    return 0


def average_and_export(args: argparse.Namespace, run_dir: Path, model: Transformer, tokenizer: Tokenizer,
                       check: Callable[[Transformer], dict[str, float]], log: Callable[[str], None],
                       run_facts: dict) -> None:
    """The end of a run: average the last ``--average`` validation checkpoints (or keep the last weights when
    they validate better), write ``final_metrics.json`` and, with ``--out``, export a checkpoint directory with
    the run's metadata and training snapshots."""
    kept = last_step_files(run_dir / "averaging", args.average)
    final = Transformer(model.config)
    if kept:
        load_averaged(final, average_states(kept))
    else:
        final.load_state_dict(model.state_dict())
    final.to(next(model.parameters()).device)
    final_metrics = check(final)
    final_metrics["averaged_checkpoints"] = [p.name for p in kept]
    log(f"average of {len(kept)}: val loss {final_metrics['val_loss']:.3f}, val BLEU {final_metrics['val_bleu']:.2f}")
    if len(kept) > 1:  # averaging early, far-apart checkpoints can hurt: keep the last one if it is better
        last_metrics = check(model)
        log(f"last checkpoint: val loss {last_metrics['val_loss']:.3f}, val BLEU {last_metrics['val_bleu']:.2f}")
        if last_metrics["val_bleu"] > final_metrics["val_bleu"]:
            final.load_state_dict(model.state_dict())
            final_metrics = {**last_metrics, "averaged_checkpoints": [], "average_val_bleu": final_metrics["val_bleu"]}
    (run_dir / "final_metrics.json").write_text(json.dumps(final_metrics, indent=2) + "\n")
    if args.out:
        out = Path(args.out)
        commands = (run_dir / "command.txt").read_text().strip().splitlines()
        meta = {
            "training_command": commands[0], "commands_run": commands,
            "language_pair": f"{args.src}-{args.tgt}", "data_dir": str(args.data_dir), "steps": run_facts["steps"],
            "parameters": final.num_parameters(), "final_validation": final_metrics, "history": run_facts["history"],
            "device": run_facts["device"], "world_size": run_facts["world_size"], "torch": torch.__version__,
        }
        save_checkpoint(out, final.cpu(), tokenizer, meta)
        snaps = sorted((run_dir / "snapshots").glob("step*.safetensors"))
        for stale in (out / "snapshots").glob("step*.safetensors"):  # from an earlier export into the same directory
            stale.unlink()
        if snaps:
            (out / "snapshots").mkdir(exist_ok=True)
            for s in snaps:
                shutil.copy2(s, out / "snapshots" / s.name)
        log(f"exported {out}")


if __name__ == "__main__":
    raise SystemExit(main())
