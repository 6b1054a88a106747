"""The training loop of ``python -m transformer.train`` (the command, its flags and its exit codes:
``transformer/train.py``).

Flat and readable, in the spirit of nanoGPT's train.py. The run directory holds the config,
the command line, the log, the metrics and resumable state; run the same command again after
a crash (even ``kill -9``) and training resumes where the last checkpoint left it. Runs on
several processes with ``torchrun`` (DistributedDataParallel; gloo on CPU, nccl on CUDA).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from tqdm import tqdm

from ..checkpoint.save import save_checkpoint
from ..checkpoint.tokenizer import Tokenizer
from ..network.model import Transformer
from .average import average_states, last_step_files, load_averaged, save_step_file, unique_state
from .setup import Corpus, TrainingError, build_model, prepare_corpus, start_processes
from .step import atomic_torch_save, lr_at, make_batch, token_batches, training_loss, validate


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
    """Everything a run resumes from, written atomically; on a GPU also its random generator (dropout's masks)."""
    py_rng = random.getstate()
    device = next(model.parameters()).device
    cuda_rng = {"cuda_rng": torch.cuda.get_rng_state(device)} if device.type == "cuda" else {}
    atomic_torch_save({
        "config": model.config.to_dict(), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(), "step": progress.step, "epoch": progress.epoch,
        "batch_in_epoch": progress.batch_in_epoch, "history": progress.history, "best_bleu": progress.best_bleu,
        "evals_since_best": progress.evals_since_best, "torch_rng": torch.get_rng_state(),
        "py_rng": (py_rng[0], list(py_rng[1]), py_rng[2]), **cuda_rng,
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
    device = next(model.parameters()).device
    if device.type == "cuda" and "cuda_rng" in state:  # a run saved on a GPU, resumed on one
        torch.cuda.set_rng_state(state["cuda_rng"], device)
    random.setstate((state["py_rng"][0], tuple(state["py_rng"][1]), state["py_rng"][2]))
    return Progress(state["step"], state["epoch"], state["batch_in_epoch"], state["history"], state["best_bleu"],
                    state["evals_since_best"])


def optimizer_step(args: Any, model: Transformer, ddp_model: torch.nn.Module,
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


def validate_and_keep(args: Any, run_dir: Path, model: Transformer, corpus: Corpus,
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


def train(args: Any, command: str, tell: Callable[[str], None]) -> int:
    """A run as ``args`` (``python -m transformer.train``'s parsed flags, one attribute each) say, ``command`` the
    line that started it (appended to the run's ``command.txt``); 0 when it finished or stopped early. The main
    process's log lines go to ``train.log`` and to ``tell``. Bad data or a diverging loss: ``TrainingError`` or
    ``DataError``, nothing saved from that step."""
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
            tell(message)
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


def average_and_export(args: Any, run_dir: Path, model: Transformer, tokenizer: Tokenizer,
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
