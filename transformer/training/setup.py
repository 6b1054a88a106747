"""What a training run starts from: its processes (one, or several under ``torchrun``), its corpus (the run's
sentencepiece model, trained once, and the encoded splits) and its model with the optimiser and the loss scaler,
each from the command's parsed flags (``python -m transformer.train``, ``transformer/train.py``)."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..checkpoint.files import join_processes, resolve_device
from ..checkpoint.tokenizer import Tokenizer
from ..evaluation.data import read_parallel
from ..network.model import Transformer, TransformerConfig
from ..network.weights import scale_residual_branches
from .step import keep_freed_memory, lr_at, token_batches


class TrainingError(Exception):
    """Training cannot go on (non-finite loss, bad data); the message says why."""


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


def start_processes(args: Any) -> Processes:
    """Threads, device and, under ``torchrun`` (``WORLD_SIZE`` > 1), the process group (gloo on CPU, nccl on CUDA)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if device.type == "cpu":
        keep_freed_memory()
    rank, world, device = join_processes(device)
    return Processes(device, rank, world)


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


def prepare_corpus(args: Any, procs: Processes, run_dir: Path) -> Corpus:
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


def build_model(args: Any, tokenizer: Tokenizer, device: torch.device
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
