"""ALTI / ALTI+ (Ferrando et al., EMNLP 2022): how much each input piece contributes to each output, from what one
teacher-forced pass returns (no hook, no state left on the model).

Each attention block's output is split into one term per input position (its weight times its value through
``W_O``, per head for the information-flow graph: :func:`head_terms`), plus the residual, carried through the
block's layer norm (:func:`through_norm`); a term's contribution is how close it is to the block's output
(:func:`alti_rows`). :func:`contributions` rolls them out through the layers: each output step's contributions from
every source piece and every decoder-input piece (``source_share``: how much came from the source).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..network.attention import MultiHeadAttention
from ..network.model import Transformer
from .methods import attention_module, full, internals, require_eval


@dataclass
class Contributions:
    """ALTI+ contributions of one teacher-forced pass; every row non-negative and summing to 1.

    Rolled out through the whole model: ``encoder (B, S, S)`` (each encoder output position from each source
    piece), ``source (B, T, S)`` and ``target (B, T, T)`` (each output step from each source piece and each
    decoder-input piece; ``target`` zero above the diagonal; a row of ``source`` and ``target`` together sums
    to 1) and ``source_share (B, T)`` (``source`` summed over the source pieces).
    Per layer, not rolled out (one tensor per layer): ``encoder_layers (B, S, S)``, ``decoder_layers (B, T, T)``
    (the decoder self-attention block), ``cross_layers (B, T, S)`` and ``cross_residual (B, T)`` (the
    cross-attention block: each source piece, and the residual stream from the target side; together 1)."""

    encoder: Tensor
    source: Tensor
    target: Tensor
    source_share: Tensor
    encoder_layers: tuple[Tensor, ...]
    decoder_layers: tuple[Tensor, ...]
    cross_layers: tuple[Tensor, ...]
    cross_residual: tuple[Tensor, ...]


DEFAULT_ALTI_BYTES = 256_000_000  # the per-token terms one chunk of queries may hold, when none is given


def transformed_values(module: MultiHeadAttention, key_value: Tensor) -> Tensor:
    """Each key's value through its head's slice of the output projection, ``v^h_j W_O^h`` (value bias included,
    the output bias not): ``(B, H, K, D)`` from the keys' source ``key_value (B, K, D)``."""
    _, v = module.project_kv(key_value)  # (B, H, K, d)
    w_o = module.out_proj.weight.view(-1, module.n_heads, module.d_head)  # (D, H*d) -> (D, H, d)
    return torch.einsum("bhkd,ehd->bhke", full(v), full(w_o))  # (B, H, K, D), float32 for a bfloat16 model


def attention_terms(module: MultiHeadAttention, weights: Tensor, key_value: Tensor) -> Tensor:
    """The attention sub-layer's output split per key: ``sum_h alpha^h_ij (v^h_j W_O^h)`` (value bias included, the
    output bias not), ``(B, Q, K, D)`` from ``weights (B, H, Q, K)`` and the keys' source ``key_value (B, K, D)``.
    Summed over the keys, plus the output bias, it is the sub-layer's output."""
    transformed = transformed_values(module, key_value)  # (B, H, K, D): v_j W_O^h
    return torch.einsum("bhqk,bhke->bqke", weights, transformed)  # (B, Q, K, D), summed over the heads


def head_terms(module: MultiHeadAttention, weights: Tensor, key_value: Tensor) -> Tensor:
    """:func:`attention_terms` before the sum over the heads: ``alpha^h_ij (v^h_j W_O^h)``, ``(B, Q, H, K, D)``
    (summed over ``H`` it is :func:`attention_terms`)."""
    transformed = transformed_values(module, key_value)  # (B, H, K, D)
    return torch.einsum("bhqk,bhke->bqhke", weights, transformed)  # (B, Q, H, K, D)


def block_terms(module: MultiHeadAttention, weights: Tensor, key_value: Tensor, residual: Tensor,
                norm: torch.nn.LayerNorm | None, cross: bool, offset: int = 0,
                per_head: bool = False) -> tuple[Tensor, Tensor]:
    """ALTI's decomposition of one attention block's output at each query ``i``: ``y_i = sum_j T_i(x_j) + bias``.

    ``weights (B, H, Q, K)`` of the queries ``offset .. offset+Q-1``, ``residual (B, Q, D)`` the stream at them.
    Self-attention: one term per key, the residual added to the query's own key (``offset + i``);
    cross-attention (``cross``): one term per source key, then the residual as a last term. ``norm``: the
    post-norm LayerNorm after the residual sum (None in pre-norm, where the block's output is the sum itself): its
    centring and scaling by the real standard deviation of the whole sum are linear given that deviation, so each
    term goes through them; the output bias (through the norm) and the norm's own bias are left out of every
    term, as ALTI does. Returns ``(terms (B, Q, K', D), y (B, Q, D))``, K' = K (+1 for cross-attention), ``y``
    the block's output. ``per_head`` (the information-flow graph, :mod:`.flow`): one term per head and key
    (head-major, ``h * K + j``, from :func:`head_terms`), then the residual as a last term for every kind:
    K' = H * K + 1; the same norm."""
    if per_head:
        terms = head_terms(module, weights, key_value).flatten(2, 3)  # (B, Q, H, K, D) -> (B, Q, H*K, D)
        terms = torch.cat([terms, residual[:, :, None]], dim=2)  # (B, Q, H*K+1, D)
        return through_norm(terms, module.out_proj.bias, norm)
    terms = attention_terms(module, weights, key_value)  # (B, Q, K, D)
    b, q, k, _ = terms.shape
    if cross:
        terms = torch.cat([terms, residual[:, :, None]], dim=2)  # (B, Q, K+1, D)
    else:
        own = torch.arange(offset, offset + q, device=terms.device)  # (Q,) each query's own key
        terms[:, torch.arange(q, device=terms.device), own] += residual  # the residual on j = i
    return through_norm(terms, module.out_proj.bias, norm)


def through_norm(terms: Tensor, bias: Tensor | None,
                 norm: torch.nn.LayerNorm | None) -> tuple[Tensor, Tensor]:
    """A residual block's terms ``(B, Q, K', D)``, whose sum plus ``bias`` is the block's sum, through the block's
    post-norm LayerNorm as ALTI does (:func:`block_terms`): ``(terms, y)``, ``y (B, Q, D)`` the block's output."""
    total = terms.sum(dim=2) + (0 if bias is None else bias)  # (B, Q, D): the block's sum before any norm
    if norm is None:
        return terms, total
    std = (total.var(dim=-1, unbiased=False, keepdim=True) + norm.eps).sqrt()  # (B, Q, 1): the real deviation
    gamma = norm.weight if norm.weight is not None else torch.ones_like(total[0, 0])
    scale = (gamma / std)[:, :, None]  # (B, Q, 1, D)
    terms = (terms - terms.mean(dim=-1, keepdim=True)) * scale
    y = terms.sum(dim=2)
    if bias is not None:
        y = y + (bias - bias.mean()) * scale[:, :, 0]
    if norm.bias is not None:
        y = y + norm.bias
    return terms, y


def alti_rows(terms: Tensor, y: Tensor, own: Tensor) -> Tensor:
    """``c_ij = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1)``, normalised per row: ``(B, Q, K')`` from ``terms
    (B, Q, K', D)`` and ``y (B, Q, D)``. A row with no positive proximity (possible, rarely) gives all of itself to
    its residual term, the column ``own (Q,)`` of each query. The distances ``||y_i - T_i(x_j)||_1`` come from
    ``torch.cdist`` (p=1), which never holds the differences ``(B, Q, K', D)`` (docs/corpus.md); ``||y_i||_1``
    too, as the distance to a zero term, so that a zero term (a key the query cannot see) gets exactly 0."""
    b, q, k, d = terms.shape
    y = y.float().reshape(b * q, 1, d)  # (B*Q, 1, D)
    dist = torch.cdist(y, terms.float().reshape(b * q, k, d), p=1).view(b, q, k)  # (B, Q, K')
    norm = torch.cdist(y, torch.zeros_like(y), p=1).view(b, q, 1)  # (B, Q, 1)
    c = (norm - dist).clamp(min=0)  # (B, Q, K')
    total = c.sum(-1, keepdim=True)  # (B, Q, 1)
    fallback = torch.zeros_like(c)
    fallback[:, torch.arange(c.size(1), device=c.device), own] = 1.0
    return torch.where(total > 0, c / total.clamp(min=torch.finfo(c.dtype).tiny), fallback)


def block_contributions(module: MultiHeadAttention, weights: Tensor, key_value: Tensor, residual: Tensor,
                        norm: torch.nn.LayerNorm | None, cross: bool, max_bytes: int,
                        per_head: bool = False) -> Tensor:
    """:func:`alti_rows` of :func:`block_terms`, a chunk of queries at a time so that the per-token terms held at
    once stay within ``max_bytes``: ``(B, Q, K')`` (``per_head``: ``K' = H * K + 1``, the residual last)."""
    b, h, q, k = weights.shape
    n_terms = h * k + 1 if per_head else k + 1
    per_query = 4 * 4 * b * n_terms * key_value.size(-1)  # float32 terms, centred copy, distances, scratch
    chunk = max(1, max_bytes // per_query)
    rows = []
    for start in range(0, q, chunk):
        sl = slice(start, start + chunk)
        terms, y = block_terms(module, weights[:, :, sl], key_value, residual[:, sl], norm, cross, start, per_head)
        n = terms.size(1)
        if per_head or cross:  # the residual is the last term
            own = torch.full((n,), terms.size(2) - 1, device=terms.device)
        else:
            own = torch.arange(start, start + n, device=terms.device)
        rows.append(alti_rows(terms, y, own))
        del terms, y
    return torch.cat(rows, dim=1)


@torch.no_grad()
def contributions(model: Transformer, src: Tensor, tgt: Tensor, max_bytes: int | None = None) -> Contributions:
    """ALTI+ (Ferrando et al., 2022) from one returned forward pass: every attention block's output split into one
    term per input piece (:func:`block_terms`), each piece's contribution its proximity to the output
    (:func:`alti_rows`), rolled out through the layers: the encoder's self-attention blocks one after the other;
    in each decoder layer the self-attention block over the target prefix, then the cross-attention block, whose
    source terms carry the encoder's rollout and whose residual term carries what the target side held so far.

    Post-norm: each term through its block's LayerNorm (linear given the real deviation); pre-norm: the block's
    output is the residual sum. The final LayerNorm of a pre-norm stack, like the feed-forward and every other
    norm, acts on each position alone: it mixes nothing, so the rollout passes through it unchanged (as in ALTI).
    Scaled embeddings are the stream the first residual carries. ``max_bytes`` (default ``DEFAULT_ALTI_BYTES``)
    bounds the per-token terms held at once (queries are taken in chunks; the result does not depend on it). The
    model must be in eval mode (a model in training mode raises ``ValueError``)."""
    require_eval(model, "contributions")
    budget = DEFAULT_ALTI_BYTES if max_bytes is None else max_bytes
    out = internals(model, src, tgt)
    post = not model.config.norm_first

    def block(kind: str, i: int, weights: Tensor, norm: torch.nn.LayerNorm) -> Tensor:
        inputs = out.attention_inputs[kind][i]
        return block_contributions(attention_module(model, kind, i), weights, inputs.key_value, inputs.residual,
                                   norm if post else None, kind == "cross", budget)

    enc_layers = tuple(block("encoder", i, w, layer.norm1)
                       for i, (w, layer) in enumerate(zip(out.encoder_attentions, model.encoder_layers)))
    b, s, t = src.size(0), src.size(1), tgt.size(1)
    encoder = torch.eye(s, device=src.device).expand(b, s, s)  # (B, S, S) before any layer: each piece itself
    for c in enc_layers:
        encoder = c @ encoder
    dec_layers, cross_layers, cross_res = [], [], []
    source = torch.zeros(b, t, s, device=src.device)  # (B, T, S): the rollout so far, source part
    target = torch.eye(t, device=src.device).expand(b, t, t)  # (B, T, T): target part
    for i, layer in enumerate(model.decoder_layers):
        c_self = block("decoder", i, out.decoder_attentions[i], layer.norm1)  # (B, T, T)
        c_cross = block("cross", i, out.cross_attentions[i], layer.norm2)  # (B, T, S+1)
        from_source, residual = c_cross[..., :s], c_cross[..., s]  # (B, T, S), (B, T)
        source = from_source @ encoder + residual[..., None] * (c_self @ source)
        target = residual[..., None] * (c_self @ target)
        dec_layers.append(c_self)
        cross_layers.append(from_source)
        cross_res.append(residual)
    return Contributions(encoder, source, target, source.sum(-1), enc_layers, tuple(dec_layers),
                         tuple(cross_layers), tuple(cross_res))
