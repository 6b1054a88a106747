"""Heatmap: one attention matrix, large; offline, every type, layer and head (or the mean) to pick from."""

from __future__ import annotations

from ..compute.inference import Analysis
from ..drawing import figures
from ..drawing.analysis import AXIS_TITLES, KIND_NAMES, KINDS, first_numbers
from . import Chart, Choice, Note, Part, Source, as_json, variant

KEY = "heatmap"
INTRO = "Rows are queries, columns keys; hover a cell for both tokens and the weight (colours from 0 to 1)."
READING = {
    "encoder": "Each row is a source piece building its new representation; the colours along the row say how "
               "much it takes from each source piece (a row sums to 1).",
    "decoder": "Row t is the step that produced output piece t; it may only look at decoder inputs 0 to t − 1 "
               "(<s> and the pieces already produced), never ahead.",
    "cross": "Row t is the step that produced output piece t; the colours say which source pieces it read "
             "from. Good heads often trace a soft word alignment.",
}
OFFLINE_CELLS = 300_000  # weights the offline page holds for this view; above, the mean of each layer only


def title(kind: str, layer: int, head: str) -> str:
    """Chart title naming the type, layer (from 1) and head (``"mean"`` or a number from 1)."""
    return f"{KIND_NAMES[kind]} · layer {layer} · {'mean over heads' if head == 'mean' else f'head {head}'}"


def chart(a: Analysis, kind: str, layer: int, head: str, zrange: tuple[float, float] = (0.0, 1.0)) -> Chart:
    """The heatmap of one head (``head`` from 1) or the mean over heads, of a layer counted from 1."""
    attn = a.attention(kind)[layer - 1]  # (H, Q, K)
    weights = attn.mean(axis=0) if head == "mean" else attn[int(head) - 1]
    queries, keys = a.axes(kind)
    qt, kt = AXIS_TITLES[kind]
    qf, kf = first_numbers(kind)
    fig = figures.attention_heatmap(weights, queries, keys, title=title(kind, layer, head), query_title=qt,
                                    key_title=kt, zmin=zrange[0], zmax=zrange[1], query_first=qf, key_first=kf)
    name = f"{kind}-L{layer}-{'mean' if head == 'mean' else 'H' + str(head)}"
    return Chart(fig, READING[kind], name)


def describe(src: Source) -> list[Part]:
    a = src.analysis
    cells = sum(a.attention(k).size * (1 + 1 / a.attention(k).shape[1]) for k in KINDS)  # every head and the means
    every_head = cells <= OFFLINE_CELLS

    def heads(kind: str, layer: int, base: Chart) -> list[Part]:
        attn = a.attention(kind)[layer - 1]  # (H, Q, K)
        each = [(h, attn[h - 1]) for h in range(1, attn.shape[0] + 1)] if every_head else []
        options = [(name, [variant(base, z, title(kind, layer, head), f"{kind}-L{layer}-{suffix}")])
                   for name, head, suffix, z in [("mean over heads", "mean", "mean", attn.mean(axis=0)),
                                                 *((f"head {h}", str(h), f"H{h}", w) for h, w in each)]]
        return [Choice("Head", options)]

    def layers(kind: str) -> list[Part]:
        n = a.attention(kind).shape[0]
        base = as_json(chart(a, kind, n, "mean"))  # built once; the other layers and heads are its variants
        return [Choice("Layer", [(f"layer {i}", heads(kind, i, base)) for i in range(1, n + 1)], n - 1)]

    parts: list[Part] = [Choice("Type", [(KIND_NAMES[k], layers(k)) for k in KINDS], KINDS.index("cross"))]
    if not every_head:
        parts.append(Note("This model's heads are many: the page holds the mean over heads of each layer (All heads "
                          "shows every head)."))
    return parts
