"""The layers of a patched run, each through the model's own sub-layers (``SublayerStack.residual``, the attention's
projections, ``merge_heads``, the feed-forward block, the norms): a head's output can be replaced on its way, with no
hook and nothing set on the model."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor

from ...network.attention import MultiHeadAttention
from ...network.model import DecoderLayer, EncoderLayer

HeadPatch = Callable[[Tensor], Tensor]  # each head's output (N, H, Tq, d) -> the same with some rows replaced


def attend(module: MultiHeadAttention, query: Tensor, kv: tuple[Tensor, Tensor], mask: Tensor | None,
           heads: HeadPatch | None = None) -> tuple[Tensor, Tensor]:
    """One attention sub-layer through the module's own projections: ``query (N, Tq, D)``, keys and values
    ``(N, H, Tk, d)`` -> the output ``(N, Tq, D)`` and every head's output before W_O ``(N, H, Tq, d)`` (``heads``
    replaces some of them first)."""
    q = module.split_heads(module.q_proj(query))  # (N, H, Tq, d)
    k, v = kv
    z = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask)  # (N, H, Tq, d)
    if heads is not None:
        z = heads(z)
    return module.merge_heads(z), z


def encoder_layer(layer: EncoderLayer, x: Tensor, mask: Tensor | None,
                  heads: HeadPatch | None = None) -> tuple[Tensor, Tensor]:
    """Encoder layer ``x (N, S, D)`` -> its output and its heads' outputs ``(N, H, S, d)``, as
    ``EncoderLayer.forward`` runs it (in eval mode)."""
    seen = []

    def self_attention(h: Tensor) -> tuple[Tensor, None]:
        out, z = attend(layer.self_attn, h, layer.self_attn.project_kv(h), mask, heads)
        seen.append(z)
        return out, None

    x, _, _ = layer.residual(x, layer.norm1, self_attention)
    x, _, _ = layer.residual(x, layer.norm2, lambda h: (layer.ffn(h), None))
    return x, seen[0]


def decoder_layer(layer: DecoderLayer, x: Tensor, self_mask: Tensor, cross_kv: tuple[Tensor, Tensor],
                  cross_mask: Tensor | None, self_heads: HeadPatch | None = None,
                  cross_heads: HeadPatch | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Decoder layer ``x (N, T, D)`` reading the cross-attention keys and values ``cross_kv`` ``(N, H, S, d)`` ->
    its output, its self-attention heads' and its cross-attention heads' outputs ``(N, H, T, d)``, as
    ``DecoderLayer.forward`` runs it (in eval mode)."""
    seen = []

    def attention(module: MultiHeadAttention, kv: Callable[[Tensor], tuple[Tensor, Tensor]], mask: Tensor | None,
                  heads: HeadPatch | None) -> Callable[[Tensor], tuple[Tensor, None]]:
        def run(h: Tensor) -> tuple[Tensor, None]:
            out, z = attend(module, h, kv(h), mask, heads)
            seen.append(z)
            return out, None
        return run

    x, _, _ = layer.residual(x, layer.norm1, attention(layer.self_attn, layer.self_attn.project_kv, self_mask,
                                                       self_heads))
    x, _, _ = layer.residual(x, layer.norm2, attention(layer.cross_attn, lambda h: cross_kv, cross_mask,
                                                       cross_heads))
    x, _, _ = layer.residual(x, layer.norm3, lambda h: (layer.ffn(h), None))
    return x, seen[0], seen[1]
