"""Numbers behind the views: head statistics (``transformer.network.kinds``' own, on numpy arrays), labels,
positional-encoding similarity."""

from __future__ import annotations

import html
import numbers
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from transformer.network import kinds
from transformer.network.kinds import KIND_NAMES as KIND_NAMES  # re-exported: app.drawing.analysis.KINDS, KIND_NAMES
from transformer.network.kinds import KINDS as KINDS

AXIS_TITLES = {"encoder": ("source token (query)", "source token (key)"),
               "decoder": ("output token (query = the step producing it)", "decoder input (key)"),
               "cross": ("output token (query = the step producing it)", "source token (key)")}


@dataclass(frozen=True)
class Head:
    """One head of a layer, or the mean over the layer's heads, as every view picks it (:func:`one_head`): its
    ``(Q, K)`` weights, the chart's title ("Cross-attention · layer 2 · head 3") and file name ("cross-L2-H3")."""

    weights: np.ndarray
    title: str
    name: str


def head_title(head: int | str | None) -> str:
    """How a head is named on the page: ``head 3`` (from 1), or ``mean over heads`` (None or ``"mean"``)."""
    return "mean over heads" if head in (None, "mean") else f"head {head}"


def one_head(attn: np.ndarray, kind: str, layer: int, head: int | str | None) -> Head:
    """One head or the mean over a layer's heads of ``attn (L, H, Q, K)``, an attention of type ``kind``: ``layer``
    counts from 1; ``head`` from 1 (an int or its digits, as the address writes it), or None / ``"mean"`` for the
    mean over heads. A layer or a head this attention lacks is a ``ValueError`` that says what there is."""
    n_layers, n_heads = attn.shape[:2]
    if isinstance(layer, bool) or not isinstance(layer, numbers.Integral) or not 1 <= layer <= n_layers:
        raise ValueError(f"layer counts from 1 to {n_layers} here, not {layer!r}")
    mean = head in (None, "mean")
    number = None if mean else int(head) if isinstance(head, str) and head.isascii() and head.isdigit() else head
    if not mean and (isinstance(number, bool) or not isinstance(number, numbers.Integral)
                     or not 1 <= number <= n_heads):
        raise ValueError(f"head counts from 1 to {n_heads} here (or 'mean'), not {head!r}")
    per_layer = attn[int(layer) - 1]  # (H, Q, K)
    weights = per_layer.mean(axis=0) if mean else per_layer[int(number) - 1]  # (Q, K)
    label = head_title(None if mean else int(number))
    return Head(weights, f"{KIND_NAMES[kind]} · layer {int(layer)} · {label}",
                f"{kind}-L{int(layer)}-{'mean' if mean else f'H{int(number)}'}")


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
