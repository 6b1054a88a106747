"""Attention (section 3.2): scaled dot-product attention written out so its weights can be returned, and multi-head
attention, one path for the whole sequence and for incremental decoding (a decoding step's keys and values join the
decoder layer's :class:`~.kv_cache.LayerCache`; a self-attention there projects Q, K and V by one matmul of a fused
copy of their weights, up to :data:`FUSE_QKV_MAX_D` wide).

Mask convention: boolean tensors where ``True`` means "may attend" (the convention of
``F.scaled_dot_product_attention``); they broadcast to ``(batch, heads, query_len, key_len)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .dropout import Dropout
from .kv_cache import LayerCache
from .linear import NO_ONEDNN, Linear, activation_dtype, in_float32, linear, onednn_buckets, pack
from .routes import attention_measurement, attention_route, row_bucket


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                                 dropout: nn.Module | None = None) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V, written out so the weights can be returned.

    q ``(B, H, Tq, d)``, k and v ``(B, H, Tk, d)``, mask broadcastable to ``(B, H, Tq, Tk)``.
    Returns the output ``(B, H, Tq, d)`` and the weights ``(B, H, Tq, Tk)``; a masked key gets
    exactly zero weight. A model in bfloat16 (or float16) gets its scores and weights in float32 (the weights are
    returned as they are; the output in the model's dtype).
    """
    low = q.dtype in (torch.bfloat16, torch.float16)
    scores = (q.float() @ k.float().transpose(-2, -1) if low else q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # (B, H, Tq, Tk)
    weights = scores.softmax(dim=-1)
    attn = dropout(weights) if dropout is not None else weights
    if low and in_float32(v):  # no bfloat16 product on this CPU: the weights times float32 values
        return (attn @ v.float()).to(v.dtype), weights
    return attn.to(v.dtype) @ v, weights


def route_calls(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[Callable[[], object], Callable[[], object]]:
    """The two routes' calls of an attention without its weights, for ``routes.attention_route`` to time."""
    return (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            lambda: scaled_dot_product_attention(q, k, v, mask))


def written_out_here(q: Tensor, dropout: bool = False) -> bool:
    """Whether an attention without its weights of queries ``q (B, H, Tq, d)`` runs the written-out arithmetic
    (:func:`scaled_dot_product_attention`) rather than PyTorch's fused kernel: on a CPU, without gradients or
    dropout, where it measured faster for the class (dtype, heads, head width, threads) and the queries' bucket
    (``routes.attention_route``; why, and the figures: docs/benchmarks.md)."""
    if dropout or not q.is_cpu or torch.is_grad_enabled():
        return False
    _, heads, queries, d_head = q.shape
    return attention_route(q.dtype, heads, d_head, queries, route_calls) == "written"


FUSE_QKV_MAX_D = 512  # up to this width a decoding self-attention projects Q, K, V by one matmul of a fused copy;
# wider, the copy (3 d^2 per layer, per search: 300 MB at NLLB-1.3B's 24 x 1024) costs more than the calls it saves


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate Q, K, V and output projections."""

    prepack = False  # whether a search's fused Q|K|V (:meth:`fused_qkv`) is prepacked for oneDNN where its product
    # measured faster (``linear.pack``; set with the projections' own copies by ``weights.decoding_layout``)

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.q_proj = Linear(d_model, d_model)
        self.k_proj = Linear(d_model, d_model)
        self.v_proj = Linear(d_model, d_model)
        self.out_proj = Linear(d_model, d_model)
        self.dropout_p = dropout
        self.dropout = Dropout(dropout)

    def extra_repr(self) -> str:
        """The heads, and where measured on this CPU (``written_out_here``), each query bucket's route without the
        weights."""
        known = attention_measurement(activation_dtype(self.q_proj.weight), self.n_heads, self.d_head)
        return f"heads={self.n_heads}" + ("" if known is None else f", attention={'|'.join(known.chosen)}")

    def split_heads(self, x: Tensor) -> Tensor:
        b, length, _ = x.shape
        return x.view(b, length, self.n_heads, self.d_head).transpose(1, 2)  # (B, L, D) -> (B, H, L, d)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``x`` ``(B, L, D)``, each ``(B, H, L, d)`` (cacheable)."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def fused_qkv(self) -> tuple[Tensor, Tensor]:
        """The Q, K and V projections as one matrix: weight ``(3D, D)`` and bias ``(3D,)``, so a self-attention
        projects all three with one matmul (a cache builds it once per search, for a model up to
        :data:`FUSE_QKV_MAX_D` wide). Laid out as the projections are: the transpose of a contiguous ``(D, 3D)``
        tensor where they are column-major (as ``weights.column_major_weights`` lays out a small model's matrices
        for the fast GEMM path), else row-major."""
        parts = [self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]
        if parts[0].is_contiguous():
            weight = torch.cat(parts, dim=0)  # (3D, D)
        else:
            weight = torch.cat([w.t() for w in parts], dim=1).t()  # (D, 3D) -> (3D, D), column-major
        return weight, torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])

    def _cached_qkv(self, query: Tensor, key_value: Tensor | None, cache: LayerCache) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V ``(N, H, ., d)`` with a cache. Self-attention (``key_value`` None): Q, K and V of the new positions
        by one matmul (:meth:`fused_qkv`), their keys and values appended to the cache's, all of which are
        returned; cross-attention: the keys and values of ``key_value`` (the encoder output), projected once, and
        where ``cache.group`` g rows share them, the g rows' queries together, ``(N/g, H, g*T, d)``."""
        n, new, d_model = query.shape
        if key_value is None and d_model > FUSE_QKV_MAX_D:  # three matmuls: no per-search copy of the weights
            q = linear(query, self.q_proj.weight, self.q_proj.bias, self.q_proj.packed)
            q = q.view(n, new, self.n_heads, self.d_head)  # (N, T, D) -> (N, T, H, d)
            k, v = cache.append(*self.project_kv(query))  # (N, H, t, d) each, written in place
            return q.transpose(1, 2), k, v  # (N, T, H, d) -> (N, H, T, d)
        if key_value is None:
            if cache.qkv_weight is None:
                cache.qkv_weight, cache.qkv_bias = self.fused_qkv()
                cache.qkv_onednn = onednn_buckets(cache.qkv_weight, cache.qkv_bias) if self.prepack else NO_ONEDNN
            if cache.qkv_packed is None and cache.qkv_onednn[row_bucket(n * new)]:
                # oneDNN's copy, made at the first product of a bucket where it measured faster (a beam search's
                # first step runs a row a sentence, the next ones K: one sentence's search may never need it)
                cache.qkv_packed = pack(cache.qkv_weight, cache.qkv_bias)
            qkv = linear(query, cache.qkv_weight, cache.qkv_bias, cache.qkv_packed)  # (N, T, 3D)
            q, k, v = qkv.view(n, new, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)  # each (N, H, T, d)
            k, v = cache.append(k, v)  # (N, H, t, d) each, written in place
            return q, k, v
        if cache.cross_k is None:
            cache.cross_k, cache.cross_v = self.project_kv(key_value)  # (N, H, S, d) each, once
        g = cache.group  # rows a cross_k row serves: their queries together, (N/g, g*T, H, d), row-major as (N, T)
        q = linear(query, self.q_proj.weight, self.q_proj.bias, self.q_proj.packed)
        q = q.view(n // g, g * new, self.n_heads, self.d_head)  # (N, T, D) -> (N/g, g*T, H, d)
        return q.transpose(1, 2), cache.cross_k, cache.cross_v  # (N/g, g*T, H, d) -> (N/g, H, g*T, d)

    def merge_heads(self, out: Tensor, head_gates: Tensor | None = None) -> Tensor:
        """Every head's output ``(B, H, T, d)`` (each times its ``head_gates`` entry, 0 switching it off) through
        the output projection W_O: ``(B, T, D)``."""
        if head_gates is not None:
            out = out * head_gates.to(out.dtype)[None, :, None, None]
        b, _, tq, _ = out.shape
        out = out.transpose(1, 2).reshape(b, tq, self.n_heads * self.d_head)  # (B, H, Tq, d) -> (B, Tq, D)
        return linear(out, self.out_proj.weight, self.out_proj.bias, self.out_proj.packed)

    def forward(self, query: Tensor, key_value: Tensor | None = None, mask: Tensor | None = None,
                need_weights: bool = False, kv: tuple[Tensor, Tensor] | None = None,
                head_gates: Tensor | None = None, cache: LayerCache | None = None) -> tuple[Tensor, Tensor | None]:
        """query ``(B, Tq, D)``; keys/values from ``key_value`` ``(B, Tk, D)`` (None: self-attention, from
        ``query``) or precomputed ``kv``.

        ``head_gates`` ``(H,)`` (one layer's row of the model's ``head_mask``) multiplies each head's output (0
        switches a head off). ``cache`` (incremental decoding, as transformers' ``past_key_value``): a decoder
        layer's :class:`~.kv_cache.LayerCache`;
        self-attention's new keys and values join it and attend over all of it, cross-attention projects
        ``key_value`` once into it (see :meth:`_cached_qkv`); ``mask`` then covers the cached positions too.
        Returns ``(output (B, Tq, D), weights (B, H, Tq, Tk) or None)``.
        """
        group = 1
        if cache is not None:
            q, k, v = self._cached_qkv(query, key_value, cache)
            if key_value is not None and cache.group > 1:  # a sentence's beams attend together to its keys
                group = cache.group
                mask = None if mask is None else mask[::group]  # (N, 1, 1, S) -> (N/g, 1, 1, S): its padding
        else:
            q = self.split_heads(self.q_proj(query))  # (B, H, Tq, d)
            k, v = kv if kv is not None else self.project_kv(query if key_value is None else key_value)  # (B,H,Tk,d)
        weights = None
        if need_weights or (self.training and self.dropout_p > 0 and q.device.type == "cpu"):
            # written out (also when training on a CPU with attention dropout: PyTorch's CPU kernel then falls back
            # to the same arithmetic with a slower dropout mask than this model's Dropout)
            out, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout if self.training else None)
            weights = weights if need_weights else None
        else:
            dtype = q.dtype
            if in_float32(q):  # no bfloat16 product on this CPU: attention in float32, rounded back
                q, k, v = q.float(), k.float(), v.float()
            if written_out_here(q, self.training and self.dropout_p > 0):
                out = scaled_dot_product_attention(q, k, v, mask)[0].to(dtype)  # measured faster here
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                     dropout_p=self.dropout_p if self.training else 0.0).to(dtype)
        if group == 1:
            return self.merge_heads(out, head_gates), weights
        n, tq = query.shape[:2]
        if weights is not None:
            weights = weights.view(n // group, self.n_heads, group, tq, -1).transpose(1, 2).reshape(
                n, self.n_heads, tq, -1)  # (N/g, H, g*Tq, S) -> (N, H, Tq, S)
        return self.merge_heads(out, head_gates).view(n, tq, -1), weights  # (N/g, g*Tq, D) -> (N, Tq, D)
