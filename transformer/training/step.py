"""The pieces of one training step and one validation, used by ``python -m transformer.train``: the paper's
learning-rate schedule (with an optional cool-down), the training loss (label smoothing, R-Drop), token-count
batching and padded batches, validation loss and greedy BLEU, and an atomic ``torch.save`` for resumable state."""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from ..checkpoint.tokenizer import Tokenizer
from ..decoding.settings import DEFAULTS
from ..evaluation.scores import translate_all
from ..network.masks import pad_sequences
from ..network.model import Transformer
from ..translator import Translator


def lr_at(step: int, d_model: int, warmup: int, scale: float, total_steps: int = 0, cooldown: int = 0) -> float:
    """The paper's schedule: scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    With ``cooldown`` > 0, step ``total_steps - cooldown + k`` (k = 1 .. cooldown) gets that rate times
    ``(cooldown - k + 1) / cooldown``: a linear fall from the schedule's value to 1/cooldown of it at the last step.
    """
    step = max(step, 1)
    lr = scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    if cooldown > 0 and step > total_steps - cooldown:
        lr *= max(total_steps - step + 1, 0) / cooldown
    return lr


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to serve every allocation from its heap and keep what is freed (no ``mmap``, no trim).

    A training step on a CPU allocates and frees tensors of ``tokens x vocabulary`` floats (160 MB at 4,096 tokens
    and 10k words); by default each is a fresh ``mmap`` whose pages fault in again on every step, ~15% of a small
    model's step. Returns False where the C library is not glibc (nothing changed).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # from <malloc.h>
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2 ** 31 - 1))


def atomic_torch_save(obj: dict, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-row label-smoothed cross-entropy of ``logits (N, V)`` with its gradient written out by hand.

    The same numbers as ``F.cross_entropy(..., label_smoothing=eps, reduction="none")`` with half the passes over
    the ``N x V`` tensors and no ``N x V`` tensor kept but the logits: forward reads them for the log-sum-exp, the
    gold logit and the mean; backward writes ``softmax - (1 - eps) onehot - eps / V`` into one new tensor.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, gold: torch.Tensor, eps: float) -> torch.Tensor:  # noqa: ANN001
        lse = torch.logsumexp(logits, -1)  # (N,)
        nll = lse - logits.gather(1, gold[:, None]).squeeze(1)  # (N, 1) -> (N,)
        smooth = lse - logits.mean(-1)  # (N,): -mean over the vocabulary of log p
        ctx.save_for_backward(logits, lse, gold)
        ctx.eps = eps
        return (1 - eps) * nll + eps * smooth

    @staticmethod
    def backward(ctx, grad_rows: torch.Tensor):  # noqa: ANN001, ANN205
        logits, lse, gold = ctx.saved_tensors
        eps, vocab = ctx.eps, logits.size(-1)
        grad = torch.sub(logits, lse[:, None]).exp_()  # (N, V): softmax
        if eps:
            grad.sub_(eps / vocab)
        grad.scatter_add_(1, gold[:, None], torch.full_like(lse[:, None], eps - 1))  # (N, 1): - (1 - eps) at gold
        grad.mul_(grad_rows[:, None])
        return grad, None, None


def smoothed_cross_entropy(logits: torch.Tensor, gold: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Label-smoothed cross-entropy per row: ``logits (N, V)`` float, ``gold (N,)`` -> ``(N,)``; no padding rows.

    Equal to ``F.cross_entropy(logits, gold, label_smoothing=label_smoothing, reduction="none")`` in value and
    gradient, about twice as fast on a CPU for a 10k vocabulary (see ``_SmoothedCrossEntropy``).
    """
    return _SmoothedCrossEntropy.apply(logits, gold, float(label_smoothing))


def training_loss(model: torch.nn.Module, src: torch.Tensor, tgt: torch.Tensor, pad_id: int,
                  label_smoothing: float = 0.0, r_drop: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, cross_entropy)`` of one batch: ``src (B, S)``, ``tgt (B, T+1)`` with BOS first.

    The cross-entropy is label-smoothed, per target token. With ``r_drop > 0`` (R-Drop) the batch goes through
    the model twice in one pass (two dropout masks), the cross-entropy is the mean over both, and the loss adds
    ``r_drop`` times the symmetric KL ``(KL(p||q) + KL(q||p)) / 2`` between the two predictions, per target token.
    """
    dec_in, gold = tgt[:, :-1], tgt[:, 1:]  # (B, T), (B, T)
    if r_drop <= 0:
        real = gold != pad_id  # (B, T): the logits of padding positions are never computed
        logits = model(src, dec_in, logits_mask=real).logits.float()  # (n, V), n real target tokens
        ce = smoothed_cross_entropy(logits, gold[real], label_smoothing).mean()
        return ce, ce
    # R-Drop: one forward over the doubled batch; on the CPU the vocabulary-wide operations (log-softmax, exp)
    # cost as much as the model, so the log-probabilities are computed once and shared by both terms.
    real = (gold != pad_id).float()  # (B, T)
    n = real.sum()
    logits = model(src.repeat(2, 1), dec_in.repeat(2, 1)).logits.float()  # (B, .) -> (2B, T, V)
    logp, logq = logits.log_softmax(-1).chunk(2)  # (B, T, V) each: the two passes
    g = gold.unsqueeze(-1)  # (B, T, 1)
    nll = -(logp.gather(-1, g) + logq.gather(-1, g)).squeeze(-1) / 2  # (B, T): mean over the two passes
    smooth = -(logp.mean(-1) + logq.mean(-1)) / 2  # (B, T)
    ce = (((1 - label_smoothing) * nll + label_smoothing * smooth) * real).sum() / n  # as F.cross_entropy smooths
    kl = 0.5 * ((logp.exp() - logq.exp()) * (logp - logq)).sum(-1)  # (B, T): (KL(p||q) + KL(q||p)) / 2
    return ce + r_drop * (kl * real).sum() / n, ce


def token_batches(lengths: Sequence[tuple[int, int]], max_tokens: int, seed: int, shuffle: bool = True,
                  ) -> list[list[int]]:
    """Group example indices into batches of at most ``max_tokens`` (padded) tokens on either side.

    Examples are sorted by length (with random tie-breaking) so a batch holds similar lengths,
    then the batches are shuffled; the same ``seed`` gives the same batches.
    """
    rng = random.Random(seed)
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i][1], lengths[i][0], rng.random() if shuffle else i))
    batches: list[list[int]] = []
    batch: list[int] = []
    longest = 0
    for i in order:
        longest_if_added = max(longest, *lengths[i])
        if batch and longest_if_added * (len(batch) + 1) > max_tokens:
            batches.append(batch)
            batch, longest_if_added = [], max(lengths[i])
        batch.append(i)
        longest = longest_if_added
    if batch:
        batches.append(batch)
    if shuffle:
        rng.shuffle(batches)
    return batches


def make_batch(ids: list[list[int]], rows: list[int], pad_id: int) -> torch.Tensor:
    """The sequences ``ids[i]`` for ``i`` in ``rows`` as one padded ``(len(rows), width)`` batch."""
    return pad_sequences([ids[i] for i in rows], pad_id)


def corpus_bleu(hyps: list[str], refs: list[str]) -> float:
    import sacrebleu

    return sacrebleu.corpus_bleu(hyps, [refs]).score


@torch.no_grad()
def validate(model: Transformer, tokenizer: Tokenizer, val_pairs: tuple[list[list[int]], list[list[int]]],
             val_sources: list[str], val_refs: list[str], val_batches: list[list[int]], bleu_sentences: int,
             device: torch.device) -> dict[str, float]:
    """Validation loss (per target token, no smoothing) and greedy BLEU on the first ``bleu_sentences``."""
    model.eval()
    cfg = model.config
    src_ids, tgt_ids = val_pairs
    total_loss, total_tokens = 0.0, 0
    for rows in val_batches:
        src = make_batch(src_ids, rows, cfg.pad_id).to(device)
        tgt = make_batch(tgt_ids, rows, cfg.pad_id).to(device)
        logits = model(src, tgt[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1),
                               ignore_index=cfg.pad_id, reduction="sum")
        total_loss += loss.item()
        total_tokens += int((tgt[:, 1:] != cfg.pad_id).sum())
    n = len(val_refs) if bleu_sentences <= 0 else min(bleu_sentences, len(val_refs))
    hyps = translate_all(Translator(model, tokenizer), val_sources[:n], DEFAULTS.but(beam_size=1), batch_size=128,
                         progress=False)
    model.train()
    val_loss = total_loss / max(total_tokens, 1)
    return {"val_loss": val_loss, "val_ppl": math.exp(min(val_loss, 50)), "val_bleu": corpus_bleu(hyps, val_refs[:n])}
