"""Numbers behind the views: head statistics (``transformer.network.kinds``' own, on numpy arrays), labels,
positional-encoding similarity."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch

from transformer.network import kinds
from transformer.network.kinds import KIND_NAMES as KIND_NAMES  # re-exported: app.drawing.analysis.KINDS, KIND_NAMES
from transformer.network.kinds import KINDS as KINDS

AXIS_TITLES = {"encoder": ("source token (query)", "source token (key)"),
               "decoder": ("output token (query = the step producing it)", "decoder input (key)"),
               "cross": ("output token (query = the step producing it)", "source token (key)")}


def escape(text: str) -> str:
    """A token as plotly text (tick labels, hovers, titles), never as markup: ``<``, ``>`` and ``&`` become the
    entities plotly decodes back. Quotes stay as they are: plotly decodes no ``&quot;`` (a ``"`` would show as
    ``▁&quot;``), and its text is never an HTML attribute."""
    return html.escape(str(text), quote=False)


# One numbering everywhere: source pieces and output steps count from 1; the decoder input counts from 0 (its <s>
# is 0), so decoder input t is the piece output step t produced and both carry the same number.
FIRST_NUMBER = {"encoder": (1, 1), "decoder": (1, 0), "cross": (1, 1)}  # (first query, first key) per type


def first_numbers(kind: str) -> tuple[int, int]:
    """The numbers of the first query and the first key of an attention type (see ``FIRST_NUMBER``)."""
    return FIRST_NUMBER[kind]


def unique_labels(tokens: Sequence[str], first: int = 1) -> list[str]:
    """Escaped display labels; a token that occurs more than once gets its number (``▁a·3``, the number of
    ``tokens[0]`` being ``first``)."""
    counts = Counter(tokens)
    return [escape(t) + (f"·{i}" if counts[t] > 1 else "") for i, t in enumerate(tokens, first)]


def entropy(weights: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy in nats of distributions along ``axis`` (0 log 0 = 0): ``transformer.network.kinds.entropy``."""
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    return kinds.entropy(w.movedim(axis, -1)).numpy()


def _share(values: torch.Tensor, n_keys: int, offset: int) -> float:
    """Mean of ``values (Q,)`` (weights on key ``q + offset``) over the queries where that key exists (0: none)."""
    ok = kinds.has_offset(values.size(0), n_keys, offset)
    return float(values[ok].mean()) if ok.any() else 0.0


def diagonal_share(weights: np.ndarray, offset: int) -> float:
    """Mean weight a query ``q`` puts on key ``q + offset`` (over the queries where that key exists)."""
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64))  # (Q, K)
    return _share(kinds.offset_weight(w, offset), w.size(1), offset)


def head_diagnostics(attentions: dict[str, np.ndarray], special_keys: dict[str, int | None]) -> list[dict]:
    """One row per head: entropy, peak weight, share on a special token, share on previous/same/next position
    (``transformer.network.kinds.query_stats``).

    ``attentions[kind]`` is ``(layers, heads, queries, keys)``; ``special_keys[kind]`` the key index of the
    special token (``</s>`` for source keys, ``<s>`` for decoder keys), or None. Every number is a mean over
    the queries (previous / same / next: over the queries that have such a key).
    """
    rows = []
    for kind in KINDS:
        attn = attentions.get(kind)
        if attn is None or attn.size == 0:
            continue
        n_layers, n_heads = attn.shape[:2]
        special = special_keys.get(kind)
        for layer in range(n_layers):
            w = torch.as_tensor(np.asarray(attn[layer], dtype=np.float64))  # (H, Q, K)
            stats = kinds.query_stats(w, special)  # (H, Q) each
            n_keys = w.size(-1)
            for head in range(n_heads):
                rows.append({
                    "type": KIND_NAMES[kind],
                    "layer": layer + 1,
                    "head": head + 1,
                    "entropy": float(stats["entropy"][head].mean()),
                    "max weight": float(stats["max_weight"][head].mean()),
                    "on special token": float(stats["on_special"][head].mean()) if special is not None
                    else float("nan"),
                    "on previous": _share(stats["on_previous"][head], n_keys, -1),
                    "on same": _share(stats["on_same"][head], n_keys, 0),
                    "on next": _share(stats["on_next"][head], n_keys, 1),
                    "kind": kind,
                })
    return rows


def cosine_similarity(table: np.ndarray) -> np.ndarray:
    """``(P, D)`` -> ``(P, P)`` cosine similarity between rows."""
    t = np.asarray(table, dtype=np.float64)
    norms = np.linalg.norm(t, axis=1, keepdims=True)
    unit = t / np.where(norms > 0, norms, 1.0)
    return unit @ unit.T


def masked_weight(weights: np.ndarray, allowed: np.ndarray) -> float:
    """Largest attention weight that falls on a position the mask forbids (0 when the mask works)."""
    blocked = ~np.asarray(allowed, dtype=bool)
    if not blocked.any():
        return 0.0
    return float(np.abs(np.asarray(weights)[..., blocked]).max())
