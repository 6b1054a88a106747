"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Plain PyTorch (the output projection is in ``projection.py``, the positional table in ``positional.py``, the masks
in ``masks.py``, the returned dataclasses in
``outputs.py``). Every attention weight (encoder self-attention, decoder self-attention,
cross-attention; per layer and per head) is a *returned value*: ask for it with
``return_attention=True``. Without it, attention runs through ``F.scaled_dot_product_attention``.

Mask convention: boolean tensors where ``True`` means "may attend" (the convention of
``F.scaled_dot_product_attention``); they broadcast to ``(batch, heads, query_len, key_len)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import TransformerConfig
from .dropout import Dropout
from .kv_cache import KVCache, LayerCache
from .masks import causal_mask, decoder_self_mask, padding_mask  # noqa: F401  (re-exported)
from .outputs import AttentionInputs, DecoderOutput, EncoderOutput, Seq2SeqOutput
from .positional import positional_encoding  # noqa: F401  (re-exported)
from .projection import OutputProjection

ACTIVATION_FUNCTIONS = {"relu": F.relu, "swish": F.silu, "silu": F.silu, "gelu": F.gelu}  # by config name



# ----------------------------------------------------------------------------------------------
# Layers


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                                 dropout: nn.Module | None = None) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V, written out so the weights can be returned.

    q ``(B, H, Tq, d)``, k and v ``(B, H, Tk, d)``, mask broadcastable to ``(B, H, Tq, Tk)``.
    Returns the output ``(B, H, Tq, d)`` and the weights ``(B, H, Tq, Tk)``; a masked key gets
    exactly zero weight.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    attn = dropout(weights) if dropout is not None else weights
    return attn @ v, weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate Q, K, V and output projections."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout_p = dropout
        self.dropout = Dropout(dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        b, length, _ = x.shape
        return x.view(b, length, self.n_heads, self.d_head).transpose(1, 2)  # (B, L, D) -> (B, H, L, d)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``x`` ``(B, L, D)``, each ``(B, H, L, d)`` (cacheable)."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def forward(self, query: Tensor, key_value: Tensor | None = None, mask: Tensor | None = None,
                need_weights: bool = False, kv: tuple[Tensor, Tensor] | None = None,
                head_mask: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """query ``(B, Tq, D)``; keys/values from ``key_value`` ``(B, Tk, D)`` or precomputed ``kv``.

        ``head_mask`` ``(H,)`` multiplies each head's output (0 switches a head off).
        Returns ``(output (B, Tq, D), weights (B, H, Tq, Tk) or None)``.
        """
        q = self.split_heads(self.q_proj(query))  # (B, H, Tq, d)
        k, v = kv if kv is not None else self.project_kv(key_value)  # (B, H, Tk, d)
        if need_weights or (self.training and self.dropout_p > 0 and q.device.type == "cpu"):
            # written out (also when training on a CPU with attention dropout: PyTorch's CPU kernel then falls back
            # to the same arithmetic with a slower dropout mask than this model's Dropout)
            out, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout if self.training else None)
            weights = weights if need_weights else None
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                 dropout_p=self.dropout_p if self.training else 0.0)
            weights = None
        if head_mask is not None:
            out = out * head_mask.to(out.dtype)[None, :, None, None]
        b, _, tq, _ = out.shape
        out = out.transpose(1, 2).reshape(b, tq, self.n_heads * self.d_head)  # (B, H, Tq, d) -> (B, Tq, D)
        return self.out_proj(out), weights


class FeedForward(nn.Module):
    """Position-wise feed-forward: Linear(d_model, d_ff) -> activation (ReLU in the paper) -> dropout ->
    Linear(d_ff, d_model)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)
        self.activation = ACTIVATION_FUNCTIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def step(self, x: Tensor) -> Tensor:
        """``forward`` at inference as plain functional calls (no dropout)."""
        return F.linear(self.activation(F.linear(x, self.linear1.weight, self.linear1.bias)), self.linear2.weight,
                        self.linear2.bias)


def layer_norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    """``norm(x)`` as a plain function call (the one-step decoder avoids module calls)."""
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


class SublayerStack(nn.Module):
    """Base of the encoder and decoder layers: the residual connection and LayerNorm around every sub-layer."""

    norm_first: bool
    dropout: nn.Dropout

    def residual(self, x: Tensor, norm: nn.LayerNorm, sublayer: Callable[[Tensor], tuple[Tensor, Tensor | None]]
                 ) -> tuple[Tensor, Tensor | None, Tensor]:
        """Post-norm (the paper): ``norm(x + dropout(f(x)))``; pre-norm: ``x + dropout(f(norm(x)))``.

        ``sublayer`` returns its output and, for attention, its weights (passed through); the sub-layer's input
        (``x`` or ``norm(x)``) is returned third."""
        inp = norm(x) if self.norm_first else x
        h, weights = sublayer(inp)
        x = x + self.dropout(h)
        return (x if self.norm_first else norm(x)), weights, inp


class EncoderLayer(SublayerStack):
    """Self-attention then feed-forward, each wrapped by :meth:`SublayerStack.residual`."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        attn_dropout = cfg.dropout if cfg.attention_dropout is None else cfg.attention_dropout
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, attn_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def forward(self, x: Tensor, mask: Tensor | None, need_weights: bool = False, head_mask: Tensor | None = None,
                return_inputs: bool = False) -> tuple[Tensor, Tensor | None] | tuple[Tensor, Tensor | None,
                                                                                     AttentionInputs]:
        """``x (B, S, D)`` -> ``(output (B, S, D), weights or None)``; with ``return_inputs`` also the
        self-attention's :class:`AttentionInputs`."""
        stream = x
        x, w, h = self.residual(x, self.norm1, lambda h: self.self_attn(h, h, mask, need_weights, head_mask=head_mask))
        x, _, _ = self.residual(x, self.norm2, lambda h: (self.ffn(h), None))
        return (x, w, AttentionInputs(h, h, mask, stream)) if return_inputs else (x, w)


class DecoderLayer(SublayerStack):
    """Masked self-attention, cross-attention over the encoder output, feed-forward."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        attn_dropout = cfg.dropout if cfg.attention_dropout is None else cfg.attention_dropout
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, attn_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, attn_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.norm3 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first
        self.max_len = cfg.max_len

    def forward(self, x: Tensor, memory: Tensor, self_mask: Tensor | None, cross_mask: Tensor | None,
                need_weights: bool = False, self_head_mask: Tensor | None = None,
                cross_head_mask: Tensor | None = None, return_inputs: bool = False,
                ) -> tuple[Tensor, Tensor | None, Tensor | None] | tuple[Tensor, Tensor | None, Tensor | None,
                                                                         AttentionInputs, AttentionInputs]:
        """The whole target ``x (B, T, D)`` at once (teacher forcing; :meth:`step` decodes incrementally) ->
        ``(output, self-attention weights, cross-attention weights)``; with ``return_inputs`` also both
        sub-layers' :class:`AttentionInputs`."""
        stream_self = x
        x, self_w, h_self = self.residual(
            x, self.norm1, lambda h: self.self_attn(h, h, self_mask, need_weights, head_mask=self_head_mask))
        stream_cross = x
        x, cross_w, h_cross = self.residual(
            x, self.norm2, lambda h: self.cross_attn(h, memory, cross_mask, need_weights, head_mask=cross_head_mask))
        x, _, _ = self.residual(x, self.norm3, lambda h: (self.ffn(h), None))
        if return_inputs:
            return (x, self_w, cross_w, AttentionInputs(h_self, h_self, self_mask, stream_self),
                    AttentionInputs(h_cross, memory, cross_mask, stream_cross))
        return x, self_w, cross_w

    def step(self, x: Tensor, memory: Tensor, src_mask: Tensor | None, cache: LayerCache,
             self_head_mask: Tensor | None = None, cross_head_mask: Tensor | None = None) -> Tensor:
        """Incremental decoding, the one path of every search: ``x (N, T, D)``, the next ``T`` positions (one, in a
        search) after the ``cache.length`` ones in ``cache`` -> this layer's output ``(N, T, D)``; their keys and
        values join the cache. The numbers of :meth:`forward` at those positions (tested), at inference (no
        dropout, no weights returned), as plain functional calls on this layer's own weights; self-attention
        projects Q, K and V with one matmul (the fused matrix is built once per cache). ``self_head_mask`` /
        ``cross_head_mask`` ``(H,)``: 0 switches a head off, as in :meth:`forward`."""
        sa, ca = self.self_attn, self.cross_attn
        n, new, d_model = x.shape
        if cache.qkv_weight is None:  # (D, 3D) contiguous, used as its (3D, D) transpose: column-major, as
            # ``column_major_weights`` lays out every matrix for the fast GEMM path
            cache.qkv_weight = torch.cat([sa.q_proj.weight.t(), sa.k_proj.weight.t(), sa.v_proj.weight.t()],
                                         dim=1).t()
            cache.qkv_bias = torch.cat([sa.q_proj.bias, sa.k_proj.bias, sa.v_proj.bias])  # (3D,)
        if cache.cross_k is None:
            cache.cross_k, cache.cross_v = ca.project_kv(memory)  # (N, H, S, d) each, once

        def residual(x: Tensor, norm: nn.LayerNorm, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
            h = sublayer(layer_norm(norm, x) if self.norm_first else x)
            return x + h if self.norm_first else layer_norm(norm, x + h)

        def heads_out(attn: MultiHeadAttention, out: Tensor, head_mask: Tensor | None) -> Tensor:
            if head_mask is not None:
                out = out * head_mask.to(out.dtype)[None, :, None, None]
            out = out.transpose(1, 2).reshape(n, new, d_model)  # (N, H, T, d) -> (N, T, D)
            return F.linear(out, attn.out_proj.weight, attn.out_proj.bias)

        def self_attention(h: Tensor) -> Tensor:
            qkv = F.linear(h, cache.qkv_weight, cache.qkv_bias)  # (N, T, 3D)
            q, k, v = qkv.view(n, new, 3, sa.n_heads, sa.d_head).permute(2, 0, 3, 1, 4)  # each (N, H, T, d)
            offset = cache.length
            k, v = cache.append(k, v, self.max_len)  # (N, H, t, d) each, written in place
            # one new position sees every cached one: no mask; several: causal among themselves
            mask = None if new == 1 else torch.ones(new, offset + new, dtype=torch.bool, device=x.device).tril(offset)
            return heads_out(sa, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), self_head_mask)

        def cross_attention(h: Tensor) -> Tensor:
            q = F.linear(h, ca.q_proj.weight, ca.q_proj.bias).view(n, new, ca.n_heads, ca.d_head)  # (N, T, H, d)
            out = F.scaled_dot_product_attention(q.transpose(1, 2), cache.cross_k, cache.cross_v,
                                                 attn_mask=src_mask)  # (N, H, T, d)
            return heads_out(ca, out, cross_head_mask)

        x = residual(x, self.norm1, self_attention)
        x = residual(x, self.norm2, cross_attention)
        return residual(x, self.norm3, self.ffn.step)


# ----------------------------------------------------------------------------------------------
# The model


class Transformer(nn.Module):
    """Encoder-decoder Transformer returning every attention weight on request."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = cfg = config
        self.src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.tgt_embed = nn.Embedding(cfg.tgt_vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        # rows from ``position_offset`` on: the first token's position (0 in the paper; past the padding id in fairseq)
        self.register_buffer("pe", positional_encoding(cfg.max_len + cfg.position_offset, cfg.d_model,
                                                       cfg.positional_layout)[cfg.position_offset:], persistent=False)
        self.dropout = Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        self.encoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None
        self.decoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None
        self.generator = OutputProjection(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.final_logits_bias)
        self.reset_parameters()
        if cfg.share_embeddings:
            self.tgt_embed.weight = self.src_embed.weight
            self.generator.weight = self.src_embed.weight

    def reset_parameters(self) -> None:
        """Xavier-uniform for every matrix, zero biases; embeddings N(0, d_model^-0.5) when tied."""
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        if self.config.share_embeddings:
            nn.init.normal_(self.src_embed.weight, mean=0.0, std=self.config.d_model ** -0.5)
        with torch.no_grad():
            for emb in (self.src_embed, self.tgt_embed):
                emb.weight[self.config.pad_id].zero_()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def embed(self, tokens: Tensor, embedding: nn.Embedding, offset: int = 0) -> Tensor:
        """Token embedding * sqrt(d_model) + positional encoding, then dropout. ``(B, L)`` -> ``(B, L, D)``."""
        length = tokens.size(1)
        if offset + length > self.config.max_len:
            raise ValueError(f"sequence of {offset + length} tokens is longer than max_len={self.config.max_len}")
        x = embedding(tokens) * (math.sqrt(self.config.d_model) if self.config.scale_embedding else 1.0)
        return self.dropout(x + self.pe[offset:offset + length].to(x.dtype))

    def encode(self, src: Tensor, src_mask: Tensor | None = None, return_attention: bool = False,
               head_mask: Tensor | None = None, return_internals: bool = False) -> EncoderOutput:
        """``src (B, S)`` -> encoder output. ``src_mask`` defaults to the padding mask ``(B, 1, 1, S)``.
        ``head_mask`` ``(n_encoder_layers, H)``: 0 switches a head off. ``return_internals``: also every
        self-attention's inputs and every layer's output."""
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        x = self.embed(src, self.src_embed)
        attentions, inputs, outputs = [], [], []
        for i, layer in enumerate(self.encoder_layers):
            x, w, *seen = layer(x, src_mask, return_attention, None if head_mask is None else head_mask[i],
                                return_inputs=return_internals)
            if return_attention:
                attentions.append(w)
            if return_internals:
                inputs.append(seen[0])
                outputs.append(x)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return EncoderOutput(x, tuple(attentions), tuple(inputs), tuple(outputs))

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None,
               return_attention: bool = False, self_head_mask: Tensor | None = None,
               cross_head_mask: Tensor | None = None, logits_mask: Tensor | None = None,
               return_internals: bool = False) -> DecoderOutput:
        """``tgt (B, T)`` decoder input (BOS first), ``memory (B, S, D)`` -> logits ``(B, T, V)``: the whole target
        at once (teacher forcing, and the oracle :meth:`decode_step` is tested against).

        ``src_mask`` ``(B, 1, 1, S)``; ``tgt_mask`` defaults to padding & causal ``(B, 1, T, T)``.
        ``logits_mask`` ``(B, T)`` bool: logits only where it is True, as ``(n, V)`` rows in row-major order
        (training skips the padding positions: the vocabulary-wide work is most of a small model's step).
        ``return_internals``: also both attention sub-layers' inputs and every layer's output, per layer.
        """
        if tgt_mask is None:
            tgt_mask = decoder_self_mask(tgt, self.config.pad_id)
        x = self.embed(tgt, self.tgt_embed)
        self_attns, cross_attns, self_inputs, cross_inputs, outputs = [], [], [], [], []
        for i, layer in enumerate(self.decoder_layers):
            x, sw, cw, *seen = layer(x, memory, tgt_mask, src_mask, return_attention,
                                     None if self_head_mask is None else self_head_mask[i],
                                     None if cross_head_mask is None else cross_head_mask[i],
                                     return_inputs=return_internals)
            if return_attention:
                self_attns.append(sw)
                cross_attns.append(cw)
            if return_internals:
                self_inputs.append(seen[0])
                cross_inputs.append(seen[1])
                outputs.append(x)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        h = x if logits_mask is None else x[logits_mask]  # (B, T, D) or (n, D): the positions to score
        return DecoderOutput(self.generator(h), x, tuple(self_attns), tuple(cross_attns), tuple(self_inputs),
                             tuple(cross_inputs), tuple(outputs))

    def new_cache(self) -> KVCache:
        """An empty key/value cache for :meth:`decode_step`, one :class:`~transformer.kv_cache.LayerCache` per
        decoder layer (a search's own object: nothing is kept on the model)."""
        return KVCache(len(self.decoder_layers))

    def decode_step(self, tokens: Tensor, memory: Tensor, src_mask: Tensor | None, cache: KVCache,
                    out: Tensor | None = None, head_mask: dict[str, Tensor] | None = None) -> Tensor:
        """Incremental decoding, the one path of greedy search, beam search and its tree, ablation and Marian's
        scoring: logits ``(N, V)`` of the next token after the new positions ``tokens (N, T)`` (one per step in a
        search; several, e.g. a forced prefix, are causal among themselves), given the ``cache.length`` earlier
        ones in ``cache`` (which they join).

        The numbers of :meth:`decode` on the whole prefix at its last position (up to float rounding; tested), at
        inference (no dropout), with a fraction of its Python-level work per step (see :meth:`DecoderLayer.step`).
        ``head_mask``: ``forward``'s dict; its ``"decoder"`` and ``"cross"`` ``(layers, H)`` apply here (the
        encoder's applies where ``memory`` was computed). ``out``: an ``(N, V)`` tensor of the model's dtype to
        write the logits into (a search reuses one across steps: a fresh N x V tensor each step costs more in page
        faults than the softmax over it).
        """
        offset, new = cache.length, tokens.size(1)
        if offset + new > self.config.max_len:
            raise ValueError(f"sequence of {offset + new} tokens is longer than max_len={self.config.max_len}")
        x = F.embedding(tokens, self.tgt_embed.weight)  # as ``embed``, no dropout
        if self.config.scale_embedding:
            x = x * math.sqrt(self.config.d_model)
        x = x + self.pe[offset:offset + new].to(x.dtype)
        self_masks = cross_masks = None
        if head_mask is not None:
            self_masks, cross_masks = head_mask.get("decoder"), head_mask.get("cross")
        if self_masks is None and cross_masks is None:
            for layer, c in zip(self.decoder_layers, cache.layers):
                x = layer.step(x, memory, src_mask, c)
        else:
            for i, (layer, c) in enumerate(zip(self.decoder_layers, cache.layers)):
                x = layer.step(x, memory, src_mask, c, None if self_masks is None else self_masks[i],
                               None if cross_masks is None else cross_masks[i])
        if self.decoder_norm is not None:
            x = layer_norm(self.decoder_norm, x)
        last = x[:, -1]  # (N, D)
        if out is None or (self.generator.packed is not None and x.size(0) > 1):  # prepacked: its own output
            return self.generator(last)
        weight, bias = self.generator.weight, self.generator.bias  # (V, D), (V,) or None
        if bias is None:
            return torch.mm(last, weight.t(), out=out)  # (N, D) @ (D, V)
        return torch.addmm(bias, last, weight.t(), out=out)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None,
                return_attention: bool = False, head_mask: dict[str, Tensor] | None = None,
                logits_mask: Tensor | None = None, return_internals: bool = False) -> Seq2SeqOutput:
        """Teacher-forced pass. ``src (B, S)``, ``tgt (B, T)`` -> ``Seq2SeqOutput`` with logits ``(B, T, V)``.

        ``head_mask`` may hold ``"encoder"``, ``"decoder"``, ``"cross"`` tensors ``(layers, H)``.
        ``logits_mask`` ``(B, T)`` bool: logits ``(n, V)`` of the True positions only (see :meth:`decode`).
        ``return_internals``: also what interpretation needs, as returned values: every attention sub-layer's
        inputs (``attention_inputs``) and every layer's output stream (see ``Seq2SeqOutput``).
        """
        head_mask = head_mask or {}
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        enc = self.encode(src, src_mask, return_attention, head_mask.get("encoder"), return_internals)
        dec = self.decode(tgt, enc.last_hidden_state, src_mask, tgt_mask, return_attention,
                          self_head_mask=head_mask.get("decoder"), cross_head_mask=head_mask.get("cross"),
                          logits_mask=logits_mask, return_internals=return_internals)
        internals = {}
        if return_internals:
            internals = dict(attention_inputs={"encoder": enc.attention_inputs, "decoder": dec.self_attention_inputs,
                                               "cross": dec.cross_attention_inputs},
                             encoder_layer_outputs=enc.layer_outputs, decoder_layer_outputs=dec.layer_outputs)
        return Seq2SeqOutput(dec.logits, enc.last_hidden_state, dec.last_hidden_state,
                             enc.attentions, dec.self_attentions, dec.cross_attentions, **internals)
