"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Plain PyTorch (attention is in ``attention.py``, the output projection in ``projection.py``, the positional table in
``positional.py``, the masks in ``masks.py``, the returned dataclasses in ``outputs.py``). Every attention weight
(encoder self-attention, decoder self-attention, cross-attention; per layer and per head) is a *returned value*: ask
for it with ``return_attention=True``. Without it, attention runs through ``F.scaled_dot_product_attention``.

Mask convention: boolean tensors where ``True`` means "may attend" (the convention of
``F.scaled_dot_product_attention``); they broadcast to ``(batch, heads, query_len, key_len)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .config import TransformerConfig
from .dropout import Dropout
from .kv_cache import KVCache, LayerCache
from .linear import Linear, activation_dtype, linear, logits_into
from .masks import causal_mask, decoder_self_mask, padding_mask  # noqa: F401  (re-exported)
from .outputs import AttentionInputs, DecoderOutput, EncoderOutput, Seq2SeqOutput
from .positional import positional_encoding, positional_table  # noqa: F401  (re-exported)
from .projection import OutputProjection

ACTIVATION_FUNCTIONS = {"relu": F.relu, "swish": F.silu, "silu": F.silu, "gelu": F.gelu}  # by config name


# ----------------------------------------------------------------------------------------------
# Layers


class FeedForward(nn.Module):
    """Position-wise feed-forward: Linear(d_model, d_ff) -> activation (ReLU in the paper) -> dropout ->
    Linear(d_ff, d_model)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.linear1 = Linear(d_model, d_ff)
        self.linear2 = Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)
        self.activation = ACTIVATION_FUNCTIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        first, second = self.linear1, self.linear2
        h = self.activation(linear(x, first.weight, first.bias, first.packed))
        return linear(self.dropout(h) if self.training else h, second.weight, second.bias, second.packed)


def layer_norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    """``norm(x)`` as a plain function call (a decoding step's Python-level work is mostly module calls), its
    parameters in ``x``'s dtype (float32 activations of a bfloat16 model: ``linear.activation_dtype``)."""
    weight, bias = norm.weight, norm.bias
    if weight is not None and weight.dtype != x.dtype:
        weight, bias = weight.to(x.dtype), None if bias is None else bias.to(x.dtype)
    return F.layer_norm(x, norm.normalized_shape, weight, bias, norm.eps)


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` whose forward is :func:`layer_norm` (its parameters in the input's dtype)."""

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(self, x)


class SublayerStack(nn.Module):
    """Base of the encoder and decoder layers: the residual connection and LayerNorm around every sub-layer."""

    norm_first: bool
    dropout: nn.Dropout

    def residual(self, x: Tensor, norm: nn.LayerNorm, sublayer: Callable[[Tensor], tuple[Tensor, Tensor | None]]
                 ) -> tuple[Tensor, Tensor | None, Tensor]:
        """Post-norm (the paper): ``norm(x + dropout(f(x)))``; pre-norm: ``x + dropout(f(norm(x)))``.

        ``sublayer`` returns its output and, for attention, its weights (passed through); the sub-layer's input
        (``x`` or ``norm(x)``) is returned third."""
        inp = layer_norm(norm, x) if self.norm_first else x
        h, weights = sublayer(inp)
        x = x + (self.dropout(h) if self.training else h)
        return (x if self.norm_first else layer_norm(norm, x)), weights, inp


class EncoderLayer(SublayerStack):
    """Self-attention then feed-forward, each wrapped by :meth:`SublayerStack.residual`."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        attn_dropout = cfg.dropout if cfg.attention_dropout is None else cfg.attention_dropout
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, attn_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        self.norm1 = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.norm2 = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def forward(self, x: Tensor, mask: Tensor | None, need_weights: bool = False, head_gates: Tensor | None = None,
                return_inputs: bool = False) -> tuple[Tensor, Tensor | None] | tuple[Tensor, Tensor | None,
                                                                                     AttentionInputs]:
        """``x (B, S, D)`` -> ``(output (B, S, D), weights or None)``; with ``return_inputs`` also the
        self-attention's :class:`AttentionInputs`."""
        stream = x
        x, w, h = self.residual(x, self.norm1,
                                lambda h: self.self_attn(h, h, mask, need_weights, head_gates=head_gates))
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
        self.norm1 = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.norm2 = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.norm3 = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def forward(self, x: Tensor, memory: Tensor, self_mask: Tensor | None, cross_mask: Tensor | None,
                need_weights: bool = False, self_gates: Tensor | None = None,
                cross_gates: Tensor | None = None, return_inputs: bool = False, cache: LayerCache | None = None,
                ) -> tuple[Tensor, Tensor | None, Tensor | None] | tuple[Tensor, Tensor | None, Tensor | None,
                                                                         AttentionInputs, AttentionInputs]:
        """The target ``x (B, T, D)`` -> ``(output, self-attention weights, cross-attention weights)``; with
        ``return_inputs`` also both sub-layers' :class:`AttentionInputs`. Without a ``cache``: the whole target at
        once (teacher forcing). With one (incremental decoding): ``x`` holds the next ``T`` positions after the
        ``cache.length`` cached ones, whose keys and values they join; ``self_mask`` then covers those too (None: every
        one; a single new position sees all of them)."""
        stream_self = x  # the stream each sub-layer's output is added to (ALTI+'s residual term)
        # sub-layers' forward called directly (no module hooks are ever registered here; __call__'s dispatch is a
        # tenth of a small model's decoding step)
        x, self_w, h_self = self.residual(
            x, self.norm1, lambda h: self.self_attn.forward(h, None, self_mask, need_weights,
                                                            head_gates=self_gates, cache=cache))
        stream_cross = x
        x, cross_w, h_cross = self.residual(
            x, self.norm2, lambda h: self.cross_attn.forward(h, memory, cross_mask, need_weights,
                                                             head_gates=cross_gates, cache=cache))
        x, _, _ = self.residual(x, self.norm3, lambda h: (self.ffn.forward(h), None))
        if return_inputs:
            return (x, self_w, cross_w, AttentionInputs(h_self, h_self, self_mask, stream_self),
                    AttentionInputs(h_cross, memory, cross_mask, stream_cross))
        return x, self_w, cross_w


# ----------------------------------------------------------------------------------------------
# The model

TIED_WEIGHTS = ("src_embed.weight", "tgt_embed.weight", "generator.weight")  # one tensor under share_embeddings


def tied_weights(config: TransformerConfig) -> frozenset[str]:
    """The names of the one tensor the two embeddings and the output projection share when ``share_embeddings``
    (a file stores it once, under any one of them); none otherwise."""
    return frozenset(TIED_WEIGHTS) if config.share_embeddings else frozenset()


def missing_weights(config: TransformerConfig, missing: list[str]) -> list[str]:
    """Of the names ``load_state_dict(..., strict=False)`` reports ``missing``, those really not loaded: a tied
    weight is loaded when any one of its names was."""
    tied = tied_weights(config)
    return [k for k in missing if k not in tied] + ([TIED_WEIGHTS[0]] if tied and tied <= set(missing) else [])


class Transformer(nn.Module):
    """Encoder-decoder Transformer returning every attention weight on request."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = cfg = config
        meta = torch.get_default_device().type == "meta"  # a load's first step: no values to compute (on meta
        # tensors torch would first import its reference kernels: seconds)
        self.src_embed, self.tgt_embed = (nn.Embedding(n, cfg.d_model, padding_idx=cfg.pad_id, _weight=torch.empty(
            n, cfg.d_model) if meta else None) for n in (cfg.src_vocab_size, cfg.tgt_vocab_size))
        self.register_buffer("pe", torch.empty(cfg.max_len + cfg.position_offset, cfg.d_model)[cfg.position_offset:]
                             if meta else positional_table(cfg), persistent=False)  # meta: its shape and storage
        self.dropout = Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        self.encoder_norm = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None
        self.decoder_norm = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None
        self.generator = OutputProjection(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.final_logits_bias)
        if not meta:
            self.reset_parameters()
        self.tie_embeddings()

    def tie_embeddings(self) -> None:
        """Under ``share_embeddings``: the target embedding and the output projection are the source embedding's
        parameter (one tensor, three names); otherwise nothing."""
        if self.config.share_embeddings:
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

    @property
    def embedding_scale(self) -> float:
        """What a token's embedding is multiplied by before the positions are added: sqrt(d_model) (the paper's
        section 3.4), or 1 where the config says ``scale_embedding=False``."""
        return math.sqrt(self.config.d_model) if self.config.scale_embedding else 1.0

    def embed(self, tokens: Tensor, embedding: nn.Embedding, offset: int = 0,
              token_embeds: Tensor | None = None) -> Tensor:
        """Token embedding * :attr:`embedding_scale` + positional encoding (positions from ``offset``), then
        dropout. ``(B, L)`` -> ``(B, L, D)``. ``token_embeds (B, L, D)``: the embedding rows given instead of
        looked up (attribution differentiates with respect to them)."""
        length = tokens.size(1)
        if offset + length > self.config.max_len:
            raise ValueError(f"sequence of {offset + length} tokens is longer than max_len={self.config.max_len}")
        x = F.embedding(tokens, embedding.weight, embedding.padding_idx) if token_embeds is None else token_embeds
        x = x.to(activation_dtype(embedding.weight))  # float32 for a bfloat16 model without bfloat16 instructions
        if self.config.scale_embedding:
            x = x * math.sqrt(self.config.d_model)
        x = x + self.pe[offset:offset + length].to(x.dtype)
        return self.dropout(x) if self.training else x

    def encode(self, src: Tensor, src_mask: Tensor | None = None, return_attention: bool = False,
               encoder_head_mask: Tensor | None = None, return_internals: bool = False,
               src_embeds: Tensor | None = None) -> EncoderOutput:
        """``src (B, S)`` -> encoder output. ``src_mask`` defaults to the padding mask ``(B, 1, 1, S)``.
        ``encoder_head_mask`` ``(n_encoder_layers, H)`` (the ``"encoder"`` tensor of the model's ``head_mask``): 0
        switches a head off. ``return_internals``: also every
        self-attention's inputs and every layer's output. ``src_embeds (B, S, D)``: the token embeddings given
        instead of looked up (see :meth:`embed`)."""
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        x = self.embed(src, self.src_embed, token_embeds=src_embeds)
        attentions, inputs, outputs = [], [], []
        for i, layer in enumerate(self.encoder_layers):
            gates = None if encoder_head_mask is None else encoder_head_mask[i]  # (H,): layer i's row
            x, w, *seen = layer(x, src_mask, return_attention, gates, return_inputs=return_internals)
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
               return_internals: bool = False, tgt_embeds: Tensor | None = None) -> DecoderOutput:
        """``tgt (B, T)`` decoder input (BOS first), ``memory (B, S, D)`` -> logits ``(B, T, V)``: the whole target
        at once (teacher forcing, and the oracle :meth:`decode_step` is tested against).

        ``src_mask`` ``(B, 1, 1, S)``; ``tgt_mask`` defaults to padding & causal ``(B, 1, T, T)``.
        ``logits_mask`` ``(B, T)`` bool: logits only where it is True, as ``(n, V)`` rows in row-major order
        (training skips the padding positions: the vocabulary-wide work is most of a small model's step).
        ``return_internals``: also both attention sub-layers' inputs and every layer's output, per layer.
        ``tgt_embeds (B, T, D)``: the token embeddings given instead of looked up (see :meth:`embed`).
        """
        if tgt_mask is None:
            tgt_mask = decoder_self_mask(tgt, self.config.pad_id)
        x = self.embed(tgt, self.tgt_embed, token_embeds=tgt_embeds)
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

    def new_cache(self, memory: Tensor | None = None) -> KVCache:
        """A key/value cache for :meth:`decode_step`, one :class:`~.kv_cache.LayerCache` per decoder layer (a
        search's own object: nothing is kept on the model). Empty, or with ``memory (B, S, D)``: every layer's
        cross-attention keys and values projected now, once per sentence, ``(B, H, S, d)`` (``KVCache.branch``
        then shares each among a sentence's beams)."""
        cache = KVCache(len(self.decoder_layers), self.config.max_len)
        if memory is not None:
            for layer, c in zip(self.decoder_layers, cache.layers):
                c.cross_k, c.cross_v = layer.cross_attn.project_kv(memory)  # (B, H, S, d) each
        return cache

    def decode_step(self, tokens: Tensor, memory: Tensor, src_mask: Tensor | None, cache: KVCache,
                    out: Tensor | None = None, head_mask: dict[str, Tensor] | None = None,
                    project: bool = True, need_weights: bool = False,
                    ) -> Tensor | tuple[Tensor, tuple[Tensor, ...], tuple[Tensor, ...]]:
        """Incremental decoding, the one path of greedy search, beam search and its tree, ablation and Marian's
        scoring: logits ``(N, V)`` of the next token after the new positions ``tokens (N, T)`` (one per step in a
        search; several, e.g. a forced prefix, are causal among themselves), given the ``cache.length`` earlier
        ones in ``cache`` (which they join).

        The numbers of :meth:`decode` on the whole prefix at its last position (up to float rounding; tested), at
        inference (no dropout), through the same layers and attention as :meth:`decode`, each with its
        :class:`~.kv_cache.LayerCache` (see :meth:`DecoderLayer.forward`).
        ``head_mask``: ``forward``'s dict; its ``"decoder"`` and ``"cross"`` ``(layers, H)`` apply here (the
        encoder's applies where ``memory`` was computed). ``out``: an ``(N, V)`` tensor of the model's dtype to
        write the logits into (a search reuses one across steps: a fresh N x V tensor each step costs more in page
        faults than the softmax over it). ``project=False``: the last position's output ``(N, D)`` instead, before
        the output projection (a search that reads the logits a block at a time: ``OutputProjection.blocks``).
        ``need_weights``: also the new positions' attention weights, ``(logits, self, cross)`` with one tensor a
        layer, ``(N, H, T, cache.length)`` and ``(N, H, T, S)`` (greedy search's attentions, step by step).
        """
        offset, new = cache.length, tokens.size(1)
        x = self.embed(tokens, self.tgt_embed, offset)  # refuses a sequence past max_len
        # one new position sees every cached one: no mask; several: causal among themselves
        self_mask = None if new == 1 else torch.ones(new, offset + new, dtype=torch.bool, device=x.device).tril(offset)
        self_masks = cross_masks = None
        if head_mask is not None:
            self_masks, cross_masks = head_mask.get("decoder"), head_mask.get("cross")
        self_weights, cross_weights = [], []
        for i, (layer, c) in enumerate(zip(self.decoder_layers, cache.layers)):
            x, self_w, cross_w = layer.forward(x, memory, self_mask, src_mask, need_weights,
                                               None if self_masks is None else self_masks[i],
                                               None if cross_masks is None else cross_masks[i], cache=c)
            if need_weights:
                self_weights.append(self_w)
                cross_weights.append(cross_w)
        if self.decoder_norm is not None:
            x = layer_norm(self.decoder_norm, x)
        last = x[:, -1]  # (N, D)
        result = last if not project else self._project(last, out)
        if need_weights:
            return result, tuple(self_weights), tuple(cross_weights)
        return result

    def _project(self, last: Tensor, out: Tensor | None) -> Tensor:
        """The logits ``(N, V)`` of the last positions' outputs ``last (N, D)`` (into ``out`` where it can)."""
        if out is None:
            return self.generator(last)
        return logits_into(last, self.generator.weight, self.generator.bias, self.generator.packed, out)

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
