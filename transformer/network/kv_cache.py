"""The decoder's key/value cache for incremental decoding (``Transformer.decode_step``; each decoder layer's
attention reads and extends its :class:`LayerCache`, as transformers' ``past_key_value``).

One :class:`LayerCache` per decoder layer holds the self-attention keys and values of the positions decoded so far,
the cross-attention keys and values of the encoder output (computed once), and the layer's fused Q|K|V projection.
Growing the self-attention keys with ``torch.cat`` would copy every earlier position at every step, and reordering
them for beam search would allocate a fresh tensor at every step (on CPU the page faults of those fresh allocations
cost more than the copies). Here they are views of one ``(2, N, capacity, H, d)`` buffer with spare capacity: a
step writes its new positions in place, and a beam reorder gathers into a second buffer that the two then swap.
Positions before heads: a step's keys and values are written as the fused projection gives them (one contiguous run
a row), and a row's cached positions are one contiguous run (faster to reorder, and to attend to, than head-major).

Beam search's rows come ``group`` at a time per sentence (its beams), and they share the sentence's cross-attention
keys and values: those are kept once per sentence, ``(N / group, H, S, d)``, and the group's queries attend to them
together (``MultiHeadAttention.forward``), reading them once a step instead of once a beam.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .linear import Packed


class LayerCache:
    """One decoder layer's cache.

    ``self_k``/``self_v`` ``(N, H, t, d)``: views of ``buffer`` ``(2, N, capacity, H, d)``, ``t = length``;
    ``cross_k``/``cross_v`` ``(N / group, H, S, d)``: the encoder output's keys and values, one row for each
    ``group`` consecutive rows (a sentence's beams; 1: a row each); ``qkv_weight`` ``(3D, D)`` and ``qkv_bias``
    ``(3D,)``: the self-attention's Q, K and V projections as one matrix (built by the first step), ``qkv_onednn``
    the row buckets where its product measured faster through oneDNN (``linear.onednn_buckets``), ``qkv_packed``
    oneDNN's copy, made by the first product of such a bucket (``linear.pack``).
    """

    __slots__ = ("buffer", "spare", "length", "self_k", "self_v", "cross_k", "cross_v", "group", "qkv_weight",
                 "qkv_bias", "qkv_onednn", "qkv_packed", "max_len")

    def __init__(self, max_len: int | None = None) -> None:
        self.max_len = max_len  # the most positions it will hold (the model's max_len): the buffer grows no further
        self.buffer: Tensor | None = None
        self.spare: Tensor | None = None
        self.length = 0
        self.self_k: Tensor | None = None
        self.self_v: Tensor | None = None
        self.cross_k: Tensor | None = None
        self.cross_v: Tensor | None = None
        self.group = 1
        self.qkv_weight: Tensor | None = None
        self.qkv_bias: Tensor | None = None
        self.qkv_onednn: tuple[bool, ...] = ()
        self.qkv_packed: Packed | None = None

    def append(self, k: Tensor, v: Tensor, max_len: int | None = None) -> tuple[Tensor, Tensor]:
        """Append new positions' keys and values ``(N, H, T, d)``; returns all cached ``(N, H, t + T, d)`` (views).
        The buffer doubles when full, up to ``max_len`` positions (None: the cache's own)."""
        if max_len is None:
            max_len = self.max_len if self.max_len is not None else 2 ** 31
        t, new = self.length, k.size(2)
        buf = self.buffer
        if t and buf.size(1) != k.size(0):
            raise ValueError(f"{k.size(0)} rows appended to a cache of {buf.size(1)} (reorder it first)")
        if buf is None or buf.size(2) < t + new or buf.size(1) != k.size(0):
            capacity = min(max(2 * (t + new), 16), max(max_len, t + new))
            fresh = k.new_empty(2, k.size(0), capacity, k.size(1), k.size(3))  # (2, N, capacity, H, d)
            if t:
                fresh[:, :, :t] = buf[:, :, :t]
            buf = self.buffer = fresh
        if new == 1:
            buf[0, :, t] = k[:, :, 0]  # (N, H, d)
            buf[1, :, t] = v[:, :, 0]
        else:
            buf[0, :, t:t + new] = k.transpose(1, 2)  # (N, H, T, d) -> (N, T, H, d)
            buf[1, :, t:t + new] = v.transpose(1, 2)
        self.length = t = t + new
        self.self_k, self.self_v = buf[0, :, :t].transpose(1, 2), buf[1, :, :t].transpose(1, 2)  # (N, H, t, d)
        return self.self_k, self.self_v

    def reorder(self, rows: Tensor) -> None:
        """Row i takes the cached self-attention keys/values of row ``rows[i]`` (``rows (N',)``), in place."""
        if not self.length:
            return
        buf, t, n = self.buffer, self.length, rows.numel()
        spare = self.spare
        if spare is None or spare.size(1) < n or spare.shape[2:] != buf.shape[2:]:
            spare = buf.new_empty(2, n, *buf.shape[2:])
        dst = spare[:, :n]  # (2, N', capacity, H, d)
        torch.index_select(buf[:, :, :t], 1, rows, out=dst[:, :, :t])
        self.buffer, self.spare = dst, buf
        self.self_k, self.self_v = dst[0, :, :t].transpose(1, 2), dst[1, :, :t].transpose(1, 2)  # (N', H, t, d)

    def select_cross(self, rows: Tensor) -> None:
        """Keep the cross-attention keys/values of ``rows (N',)`` only. Rows that are whole groups, in order (whole
        sentences leaving a beam search), keep their groups' shared keys; any other choice gives every row its own
        copy (``group`` 1)."""
        if self.cross_k is None:
            return
        g = self.group
        if g > 1:
            firsts = rows[::g]  # (N' / g,) the first row of each group
            whole = rows.numel() % g == 0 and bool((firsts % g == 0).all()) and torch.equal(
                rows.view(-1, g), firsts[:, None] + torch.arange(g, device=rows.device))  # (N'/g, g)
            if whole:
                rows = firsts // g
            else:
                self.cross_k, self.cross_v = (t.repeat_interleave(g, dim=0) for t in (self.cross_k, self.cross_v))
                self.group = 1
        self.cross_k, self.cross_v = self.cross_k.index_select(0, rows), self.cross_v.index_select(0, rows)


class KVCache:
    """The whole decoder's cache: one :class:`LayerCache` per decoder layer (``Transformer.new_cache``)."""

    def __init__(self, n_layers: int, max_len: int | None = None) -> None:
        self.layers = [LayerCache(max_len) for _ in range(n_layers)]

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, i: int) -> LayerCache:
        return self.layers[i]

    @property
    def length(self) -> int:
        """Positions cached so far."""
        return self.layers[0].length if self.layers else 0

    def reorder(self, rows: Tensor, cross_rows: Tensor | None = None) -> None:
        """Beam search: row i continues row ``rows[i]`` (its parent beam; ``rows (N',)``, fewer rows once finished
        sentences leave). The cross-attention keys/values depend on the sentence only; when sentences leave,
        ``cross_rows (N',)`` names the rows of theirs to keep (None: they stay as they are)."""
        for layer in self.layers:
            layer.reorder(rows)
            if cross_rows is not None:
                layer.select_cross(cross_rows)

    def branch(self, k: int) -> None:
        """Each row becomes ``k`` consecutive rows (beam search's beams, after its first step ran one row a sentence,
        or before any): the self-attention keys and values repeated, the cross-attention's shared by the ``k``
        (``LayerCache.group``: they attend to them together, and the ``src_mask`` ``decode_step`` gets is read at
        each group's first row)."""
        for layer in self.layers:
            if layer.length:
                n = layer.buffer.size(1)
                layer.reorder(torch.arange(n, device=layer.buffer.device).repeat_interleave(k))  # (N*k,)
            layer.group *= k

    def select(self, rows: Tensor) -> None:
        """Keep only ``rows (N',)``, in that order, of everything cached (sentences leaving a batch)."""
        self.reorder(rows, rows)
