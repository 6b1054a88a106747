"""All heads: every layer x head of one type on one colour scale."""

from __future__ import annotations

from ..analysis.inference import Analysis
from ..drawing import grid
from ..drawing.analysis import KIND_NAMES, KINDS
from . import Chart, Choice, Part, Source

INTRO = ("Every head of one attention type at a glance, on one shared colour scale (0 to 1), so strong and diffuse "
         "heads compare fairly; rows are layers, columns heads.")


def chart(a: Analysis, kind: str, zrange: tuple[float, float] = (0.0, 1.0)) -> Chart:
    """The grid of one type: every layer, or as many of the first layers as one grid holds
    (``grid.grid_layers``: what a page must draw stays bounded), the caption saying so."""
    queries, keys = a.axes(kind)
    attn = a.attention(kind)  # (L, H, Q, K)
    shown = grid.grid_layers(attn.shape)
    caption = "" if shown == attn.shape[0] else (
        f"Layers 1–{shown} of {attn.shape[0]}: one grid holds at most {grid.GRID_MOST_CELLS:,} weights (the "
        "explorer's All heads view chooses the layers).")
    return Chart(grid.head_grid(attn[:shown], queries, keys, kind, zrange=zrange), caption, name=f"{kind}-all-heads")


def describe(src: Source) -> list[Part]:
    a = src.analysis
    return [Choice("Type", [(KIND_NAMES[k], [chart(a, k)]) for k in KINDS], KINDS.index("cross"))]
