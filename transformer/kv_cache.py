"""The decoder's key/value cache for incremental decoding, kept in buffers with spare capacity.

Each decoder layer's cache dict holds ``self_k``/``self_v`` ``(N, H, t, d)``: the self-attention keys and values of
the positions decoded so far. Growing them with ``torch.cat`` copies all ``t`` earlier positions at every step, and
reordering them for beam search allocates a fresh tensor at every step (on CPU the page faults of those fresh
allocations cost more than the copies). Here they are views of one ``(2, N, H, capacity, d)`` buffer: a step writes
its one new position in place, and a beam reorder gathers into a second buffer that the two then swap.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def _owns(cache: dict[str, Any]) -> bool:
    """Whether ``self_k``/``self_v`` are views of this layer's buffer (another code path may have replaced them)."""
    buf = cache.get("kv_buffer")
    return buf is not None and "self_k" in cache and cache["self_k"].data_ptr() == buf[0].data_ptr() \
        and cache["self_k"].size(0) == buf.size(1)


def append_kv(cache: dict[str, Any], k: Tensor, v: Tensor, max_len: int) -> tuple[Tensor, Tensor]:
    """Append one position's keys and values ``(N, H, 1, d)`` to a layer's cache; returns all cached ``(N, H, t+1,
    d)`` (views). The buffer doubles when full, up to ``max_len`` positions."""
    old_k = cache.get("self_k")
    t = 0 if old_k is None else old_k.size(2)
    buf = cache.get("kv_buffer") if _owns(cache) or old_k is None else None
    if buf is None or buf.size(3) <= t or buf.size(1) != k.size(0):
        capacity = min(max(2 * (t + 1), 16), max(max_len, t + 1))
        fresh = k.new_empty(2, k.size(0), k.size(1), capacity, k.size(3))  # (2, N, H, capacity, d)
        if t:
            fresh[0, :, :, :t] = old_k
            fresh[1, :, :, :t] = cache["self_v"]
        buf = cache["kv_buffer"] = fresh
    buf[0, :, :, t] = k[:, :, 0]
    buf[1, :, :, t] = v[:, :, 0]
    cache["self_k"], cache["self_v"] = buf[0, :, :, : t + 1], buf[1, :, :, : t + 1]
    return cache["self_k"], cache["self_v"]


def reorder_cache(cache: list[dict[str, Any]], rows: Tensor) -> None:
    """Keep, in every layer, the cached self-attention keys/values of ``rows`` ``(N',)`` (beam search: each new
    beam's parent; fewer rows once finished sentences leave), in place."""
    for layer in cache:
        if "self_k" not in layer:
            continue
        if not _owns(layer):  # plain tensors (the ``decode`` path): gather them
            layer["self_k"] = layer["self_k"].index_select(0, rows)
            layer["self_v"] = layer["self_v"].index_select(0, rows)
            continue
        buf, t, n = layer["kv_buffer"], layer["self_k"].size(2), rows.numel()
        spare = layer.get("kv_spare")
        if spare is None or spare.size(1) < n or spare.shape[2:] != buf.shape[2:]:
            spare = buf.new_empty(2, n, *buf.shape[2:])
        dst = spare[:, :n]  # (2, N', H, capacity, d)
        torch.index_select(buf[:, :, :, :t], 1, rows, out=dst[:, :, :, :t])
        layer["kv_buffer"], layer["kv_spare"] = dst, buf
        layer["self_k"], layer["self_v"] = dst[0, :, :, :t], dst[1, :, :, :t]
