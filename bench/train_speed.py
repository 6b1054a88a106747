"""Training throughput: our ``Transformer`` against ``torch.nn.Transformer`` of the same sizes.

Both models see the same random batches (padded, variable lengths), the same loss (label-smoothed
cross-entropy over the non-pad targets) and the same optimizer step (Adam), in fp32. The
``nn.Transformer`` model is what a user would otherwise write: ``nn.Embedding`` * sqrt(d_model) +
the sinusoidal table + ``nn.Transformer(batch_first=True)`` + a ``Linear`` generator tied to the
embedding, scored with ``F.cross_entropy(..., ignore_index=pad)``. Ours is scored as
``python -m transformer.train`` scores it (``training_loss``: logits of the non-pad positions only,
the hand-written label-smoothed loss). The process keeps freed memory as the training script does
(``keep_freed_memory``), for both.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.network.model import Transformer, TransformerConfig, positional_encoding
from transformer.training.step import keep_freed_memory, training_loss

from .common import median, percentile, sync, time_interleaved


class NNTransformerSeq2Seq(nn.Module):
    """The peer: ``torch.nn.Transformer`` wrapped with tied embeddings, PE and a generator."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.register_buffer("pe", positional_encoding(cfg.max_len, cfg.d_model), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.transformer = nn.Transformer(
            d_model=cfg.d_model, nhead=cfg.n_heads, num_encoder_layers=cfg.n_encoder_layers,
            num_decoder_layers=cfg.n_decoder_layers, dim_feedforward=cfg.d_ff, dropout=cfg.dropout,
            batch_first=True, norm_first=cfg.norm_first, layer_norm_eps=cfg.layer_norm_eps)
        if not cfg.norm_first:  # post-norm has no final LayerNorm (nn.Transformer adds one anyway)
            self.transformer.encoder.norm = None
            self.transformer.decoder.norm = None
        self.generator = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        nn.init.normal_(self.embed.weight, std=cfg.d_model ** -0.5)
        self.generator.weight = self.embed.weight

    def _embed(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model)
        return self.dropout(x + self.pe[: tokens.size(1)])

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        pad = self.cfg.pad_id
        t = tgt.size(1)  # True = may not attend (nn.Transformer's convention)
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).triu(1)
        src_pad, tgt_pad = src == pad, tgt == pad
        out = self.transformer(self._embed(src), self._embed(tgt), tgt_mask=causal, src_key_padding_mask=src_pad,
                               tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad, tgt_is_causal=True)
        return self.generator(out)


class OursSeq2Seq(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.model = Transformer(cfg)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        return self.model(src, tgt).logits

    def loss(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, label_smoothing: float) -> Tensor:
        """The training script's loss: ``tgt_in`` (BOS first) and ``tgt_out`` joined back into ``(B, T + 1)``."""
        tgt = torch.cat([tgt_in, tgt_out[:, -1:]], dim=1)  # (B, T) + (B, 1) -> (B, T + 1)
        return training_loss(self.model, src, tgt, self.model.config.pad_id, label_smoothing)[0]


def random_batches(cfg: TransformerConfig, n_batches: int, batch_size: int, max_src: int, seed: int = 0,
                   device: torch.device | str = "cpu") -> list[tuple[Tensor, Tensor, Tensor]]:
    """``(src, tgt_in, tgt_out)`` batches of random ids with random lengths, padded with ``pad_id``."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        src_len = torch.randint(max(2, max_src // 3), max_src + 1, (batch_size,), generator=g)
        tgt_len = (src_len.float() * (0.8 + 0.4 * torch.rand(batch_size, generator=g))).long().clamp(min=2)
        s_w, t_w = int(src_len.max()), int(tgt_len.max()) + 1
        src = torch.randint(4, cfg.src_vocab_size, (batch_size, s_w), generator=g)
        tgt = torch.randint(4, cfg.tgt_vocab_size, (batch_size, t_w), generator=g)
        src[torch.arange(s_w)[None, :] >= src_len[:, None]] = cfg.pad_id
        src[torch.arange(batch_size), src_len - 1] = cfg.eos_id
        tgt[:, 0] = cfg.bos_id
        tgt[torch.arange(t_w)[None, :] > tgt_len[:, None]] = cfg.pad_id
        tgt[torch.arange(batch_size), tgt_len] = cfg.eos_id
        batches.append((src.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device)))
    return batches


def _train_step_fn(model: nn.Module, batches: list, cfg: TransformerConfig, label_smoothing: float = 0.1):
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    state = {"i": 0}

    def step() -> None:
        src, tgt_in, tgt_out = batches[state["i"] % len(batches)]
        state["i"] += 1
        if isinstance(model, OursSeq2Seq):
            loss = model.loss(src, tgt_in, tgt_out, label_smoothing)
        else:
            logits = model(src, tgt_in)  # (B, T, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                                   ignore_index=cfg.pad_id, label_smoothing=label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def bench_training(cfg: TransformerConfig, device: torch.device | str = "cpu", batch_size: int = 128,
                   max_src: int = 32, n_batches: int = 4, repeat: int = 6, warmup: int = 2) -> dict[str, Any]:
    """Target tokens per second of one optimizer step, ours and ``nn.Transformer``'s, taken in turns."""
    if torch.device(device).type == "cpu":
        keep_freed_memory()
    torch.manual_seed(0)
    ours = OursSeq2Seq(cfg).to(device).train()
    theirs = NNTransformerSeq2Seq(cfg).to(device).train()
    batches = random_batches(cfg, n_batches, batch_size, max_src, device=device)
    steps = {"ours": _train_step_fn(ours, batches, cfg), "nn_transformer": _train_step_fn(theirs, batches, cfg)}
    # every timed round runs each model over all the batches once
    rounds = {name: (lambda f=f: [f() for _ in batches]) for name, f in steps.items()}
    times = time_interleaved(rounds, repeat=repeat, warmup=warmup, device=device)
    sync(device)
    tokens = sum(int((b[2] != cfg.pad_id).sum()) for b in batches)
    ours_s, theirs_s = median(times["ours"]), median(times["nn_transformer"])
    return {
        "train_tok_s": tokens / ours_s,
        "train_tok_s_nn_transformer": tokens / theirs_s,
        "train_speed_ratio": theirs_s / ours_s,
        "train_step_ms_p50": 1000 * ours_s / len(batches),
        "train_step_ms_p95": 1000 * percentile(times["ours"], 95) / len(batches),
        "train_batch": f"{batch_size} sentences, up to {max_src} tokens, {tokens // len(batches)} target tokens",
        "params": sum(p.numel() for p in ours.parameters()),
        "params_nn_transformer": sum(p.numel() for p in theirs.parameters()),
    }
