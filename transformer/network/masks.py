"""Padded batches (``pad_sequences``) and the attention masks: boolean tensors where ``True`` means "may attend"
(the convention of ``F.scaled_dot_product_attention``); they broadcast to ``(batch, heads, query_len, key_len)``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """``(B, L)`` token ids -> ``(B, 1, 1, L)`` bool, True where the key is a real token."""
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(length: int, device: torch.device | str | None = None) -> Tensor:
    """``(1, 1, L, L)`` bool, True on and below the diagonal: query i may see keys 0..i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]


def decoder_self_mask(tgt: Tensor, pad_id: int) -> Tensor:
    """Padding and causal mask combined, ``(B, 1, T, T)``. Position 0 holds the start token and is never hidden,
    even when the start token is the padding id (Marian starts decoding with ``<pad>``)."""
    keys = padding_mask(tgt, pad_id).clone()  # (B, 1, 1, T)
    keys[..., 0] = True
    return keys & causal_mask(tgt.size(1), tgt.device)


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Id sequences of different lengths as one ``(len(seqs), longest)`` long tensor, padded with ``pad_id``."""
    out = torch.full((len(seqs), max((len(s) for s in seqs), default=0)), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out
