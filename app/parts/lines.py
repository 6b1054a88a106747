"""Lines: BertViz-style token-to-token lines for one layer, one colour per head."""

from __future__ import annotations

from collections.abc import Sequence

from ..analysis.inference import Analysis
from ..drawing import figures
from ..drawing.analysis import KIND_NAMES, KINDS, first_numbers
from . import Chart, Choice, Part, Source

INTRO = ("Token-to-token lines for one layer, one colour per head (like BertViz's head view): queries on the left, "
         "keys on the right; stronger weights draw darker, thicker lines. Hover a token to see where each head sends "
         "it; click a head in the legend to hide it. Weights below 0.05 draw no line.")
HEADINGS = {"encoder": ("source (query)", "source (key)"), "decoder": ("output (query)", "decoder input (key)"),
            "cross": ("output (query)", "source (key)")}


def chart(a: Analysis, kind: str, layer: int, heads: Sequence[int] | None = None, focus: int | None = None,
          threshold: float = 0.05) -> Chart:
    """The lines of one layer (from 1): ``heads`` 0-based (None: all), ``focus`` one query's row (0-based)."""
    attn = a.attention(kind)[layer - 1]  # (H, Q, K)
    queries, keys = a.axes(kind)
    qt, kt = HEADINGS[kind]
    qf, kf = first_numbers(kind)
    fig = figures.attention_lines(attn, queries, keys, heads=list(range(attn.shape[0])) if heads is None else heads,
                                  focus=focus, threshold=threshold, title=f"{KIND_NAMES[kind]} · layer {layer}",
                                  query_title=qt, key_title=kt, query_first=qf, key_first=kf)
    return Chart(fig, name=f"{kind}-L{layer}-lines")


def describe(src: Source) -> list[Part]:
    a = src.analysis

    def layers(kind: str) -> list[Part]:
        n = a.attention(kind).shape[0]
        return [Choice("Layer", [(f"layer {i}", [chart(a, kind, i)]) for i in range(1, n + 1)], n - 1)]

    return [Choice("Type", [(KIND_NAMES[k], layers(k)) for k in KINDS], KINDS.index("cross"))]
