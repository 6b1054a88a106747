"""All heads: every layer x head of one type on one colour scale."""

from __future__ import annotations

from ..compute.inference import Analysis
from ..drawing import grid
from ..drawing.analysis import KIND_NAMES, KINDS
from . import Chart, Choice, Part, Source

KEY = "all_heads"
INTRO = ("Every head of one attention type at a glance, on one shared colour scale (0 to 1), so strong and diffuse "
         "heads compare fairly; rows are layers, columns heads.")


def chart(a: Analysis, kind: str, zrange: tuple[float, float] = (0.0, 1.0)) -> Chart:
    queries, keys = a.axes(kind)
    return Chart(grid.head_grid(a.attention(kind), queries, keys, kind, zrange=zrange), name=f"{kind}-all-heads")


def describe(src: Source) -> list[Part]:
    a = src.analysis
    return [Choice("Type", [(KIND_NAMES[k], [chart(a, k)]) for k in KINDS], KINDS.index("cross"))]
