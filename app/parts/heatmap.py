"""Heatmap: one attention matrix, large; offline, every type, layer and head (or the mean) to pick from."""

from __future__ import annotations

from ..analysis.inference import Analysis
from ..drawing import figures
from ..drawing.analysis import AXIS_TITLES, KIND_NAMES, KINDS, first_numbers, head_title, one_head
from . import Chart, Choice, Note, Part, Source, as_json, variant

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


def chart(a: Analysis, kind: str, layer: int, head: str, zrange: tuple[float, float] = (0.0, 1.0)) -> Chart:
    """The heatmap of one head (``head`` from 1) or the mean over heads (``"mean"``), of a layer counted from 1."""
    picked = one_head(a.attention(kind), kind, layer, head)
    queries, keys = a.axes(kind)
    qt, kt = AXIS_TITLES[kind]
    qf, kf = first_numbers(kind)
    fig = figures.attention_heatmap(picked.weights, queries, keys, title=picked.title, query_title=qt,
                                    key_title=kt, zmin=zrange[0], zmax=zrange[1], query_first=qf, key_first=kf)
    return Chart(fig, READING[kind], picked.name)


def describe(src: Source) -> list[Part]:
    a = src.analysis
    cells = sum(a.attention(k).size * (1 + 1 / a.attention(k).shape[1]) for k in KINDS)  # every head and the means
    every_head = cells <= OFFLINE_CELLS

    def heads(kind: str, layer: int, base: Chart) -> list[Part]:
        attn = a.attention(kind)  # (L, H, Q, K)
        options = []
        for head in (None, *(range(1, attn.shape[1] + 1) if every_head else ())):  # the mean, then each head
            picked = one_head(attn, kind, layer, head)
            options.append((head_title(head), [variant(base, picked.weights, picked.title, picked.name)]))
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
