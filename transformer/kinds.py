"""The three kinds of attention in the Transformer (the paper's section 3.2.3), in one place: their names, how
many layers of each a model has, head masks, the decoder input a translation was read with, and the per-head
statistics that describe a weight matrix (used by ``transformer.heads``, ``transformer.interpret`` and the app).

- ``"encoder"``: encoder self-attention, queries and keys the source pieces (``</s>`` last);
- ``"decoder"``: masked decoder self-attention, queries the output steps, keys the decoder input (``<s>`` first);
- ``"cross"``: encoder-decoder attention, queries the output steps, keys the source pieces.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from .config import TransformerConfig

KINDS = ("encoder", "decoder", "cross")
KIND_NAMES = {"encoder": "Encoder self-attention", "decoder": "Decoder self-attention", "cross": "Cross-attention"}
HeadKey = tuple[str, int, int]  # (kind, layer, head), 0-based


def check_kind(kind: str) -> str:
    """``kind`` if it is one of ``KINDS``, else a ``ValueError`` that names them."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    return kind


def layer_counts(config: TransformerConfig) -> dict[str, int]:
    """Layers of each kind: the encoder's for ``"encoder"``, the decoder's for ``"decoder"`` and ``"cross"``."""
    return {"encoder": config.n_encoder_layers, "decoder": config.n_decoder_layers, "cross": config.n_decoder_layers}


def all_heads(config: TransformerConfig) -> list[HeadKey]:
    """Every head of the model as ``(kind, layer, head)``, kind by kind, layer by layer."""
    return [(kind, layer, head) for kind, n in layer_counts(config).items() for layer in range(n)
            for head in range(config.n_heads)]


def head_mask(config: TransformerConfig, off: Iterable[HeadKey] = (),
              device: torch.device | str | None = None) -> dict[str, Tensor]:
    """The model's ``head_mask``: per kind ``(layers, n_heads)``, 1 everywhere and 0 for each head in ``off``
    (a ``ValueError`` for a head the model does not have)."""
    counts = layer_counts(config)
    mask = {kind: torch.ones(n, config.n_heads, device=device) for kind, n in counts.items()}
    for kind, layer, head in off:
        if kind not in mask or not (0 <= layer < counts[kind]) or not (0 <= head < config.n_heads):
            raise ValueError(f"no head {kind} layer {layer + 1} head {head + 1} in this model")
        mask[kind][layer, head] = 0.0
    return mask


def decoder_input(bos_id: int, target_ids: Sequence[int]) -> list[int]:
    """The decoder input a translation was produced from: BOS and every output token but the last (step ``t``
    reads ``target_ids[:t]`` and predicts ``target_ids[t]``)."""
    return [bos_id, *list(target_ids)[:-1]]


# ------------------------------------------------------------------------------------------------ head statistics


def special_key(kind: str, n_keys: int) -> int:
    """Key index of the kind's special token: ``</s>`` (the last source piece) for source keys, ``<s>`` (key 0) for
    the decoder's own."""
    return 0 if check_kind(kind) == "decoder" else n_keys - 1


def entropy(weights: Tensor) -> Tensor:
    """Shannon entropy in nats of each distribution over the last axis (0 log 0 = 0): ``(..., K)`` -> ``(...)``."""
    return torch.special.entr(weights).sum(-1)


def has_offset(n_queries: int, n_keys: int, offset: int) -> Tensor:
    """``(Q,)`` bool: whether query ``q`` has a key ``q + offset``."""
    cols = torch.arange(n_queries) + offset
    return (cols >= 0) & (cols < n_keys)


def offset_weight(weights: Tensor, offset: int) -> Tensor:
    """``(..., Q, K)`` -> the weight each query ``q`` puts on key ``q + offset``, ``(..., Q)`` (0 where there is no
    such key)."""
    q, k = weights.shape[-2:]
    ok = has_offset(q, k, offset).to(weights.device)  # (Q,)
    rows = torch.arange(q, device=weights.device)
    out = weights.new_zeros(weights.shape[:-1])
    out[..., ok] = weights[..., rows[ok], rows[ok] + offset]
    return out


QUERY_STATS = ("entropy", "max_weight", "on_special", "on_previous", "on_same", "on_next")


def query_stats(weights: Tensor, special: int | None) -> dict[str, Tensor]:
    """Per-query statistics of one layer's weights ``(H, Q, K)``, each ``(H, Q)``: entropy, largest weight, weight
    on the ``special`` key (None: left out), on the previous / same / next position (0 where there is none)."""
    stats = {"entropy": entropy(weights), "max_weight": weights.amax(-1)}
    if special is not None:
        stats["on_special"] = weights[..., special]
    for name, offset in (("on_previous", -1), ("on_same", 0), ("on_next", 1)):
        stats[name] = offset_weight(weights, offset)
    return stats
