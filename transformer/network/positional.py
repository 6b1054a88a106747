"""The sinusoidal positional encodings of "Attention Is All You Need", and the layouts of the families it opens."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .config import TransformerConfig


def positional_encoding(max_len: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """The sinusoidal table, ``(max_len, d_model)``.

    PE[pos, 2i] = sin(pos / 10000^(2i/d_model)),  PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model)); with
    ``layout="halves"`` (Marian) the same waves as all sines first, then all cosines; ``layout="fairseq"``
    (M2M100 / NLLB) sines then cosines of ``pos * exp(-log(10000) * i / (d_model/2 - 1))``, in float32 as fairseq
    computes them.
    """
    if layout == "fairseq":
        half = d_model // 2
        freq = torch.exp(torch.arange(half).float() * -(math.log(10000) / (half - 1)))  # (half,)
        angles = torch.arange(max_len).float()[:, None] * freq[None]  # (max_len, half)
        table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # (max_len, 2 * half)
        return torch.cat([table, torch.zeros(max_len, d_model % 2)], dim=1)  # odd d_model: a zero column
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    div = torch.pow(10000.0, torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (ceil(d/2),)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    if layout == "halves":
        half = (d_model + 1) // 2
        table[:, :half] = torch.sin(position / div)
        table[:, half:] = torch.cos(position / div[: d_model // 2])
        return table.float()
    table[:, 0::2] = torch.sin(position / div)
    table[:, 1::2] = torch.cos(position / div[: d_model // 2])
    return table.float()


def positional_table(cfg: TransformerConfig) -> Tensor:
    """The positional table ``(max_len, d_model)``, rows from ``position_offset`` (the first token's position: 0 in
    the paper, past the padding id in fairseq) on: a view of the full table's storage."""
    table = positional_encoding(cfg.max_len + cfg.position_offset, cfg.d_model, cfg.positional_layout)
    return table[cfg.position_offset:]
