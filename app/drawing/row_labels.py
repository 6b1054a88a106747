"""Which chart keeps its row labels at the left edge of a box that scrolls sideways (a frozen column, as a
spreadsheet's), so that a phone's visitor who swipes to the far columns of a heatmap still reads which row is which.

:func:`row_labels` says whether a chart has such a column and which of its drawn pieces the column repeats (the rows'
subplot and the row axis' title). The page (``app.page.frozen``) copies those pieces, as the browser drew them, into a
band at the box's left edge: the same labels at the same pixels, with nothing drawn a second time. A chart whose rows
a zoom or a pan could move gets its rows fixed by the page (along its columns it zooms as before). Charts with no
named rows at their left, a trace whose data sets the rows' range, or labelled subplots in more than one row (one
band would cover the lower rows' labels) get None and scroll as before. No Streamlit here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go


@dataclass(frozen=True)
class RowLabels:
    """A chart's frozen column: ``subplot`` (plotly's class of the rows' subplot: ``xy``, ``x2y2``) and ``title``
    (the class of the row axis' title: ``g-ytitle``), the drawn pieces the band repeats."""

    subplot: str
    title: str


def _axis_name(ref: str | None, letter: str) -> str:
    """A trace's axis reference (``"y2"``) as the layout's key (``"yaxis2"``)."""
    ref = ref or letter
    return f"{letter}axis{ref[1:]}"


def _empty(trace) -> bool:
    """A trace with no point to draw (a legend entry: ``x=[None]``)."""
    points = [v for axis in ("x", "y") for v in (() if getattr(trace, axis, None) is None else getattr(trace, axis))]
    return all(v is None for v in points)


def _fixed(layout, name: str) -> bool:
    """Whether the axis ``name`` has a range of its own (its data does not move it)."""
    axis = layout[name]
    return axis.range is not None and axis.autorange in (None, False)


def row_axis(fig: go.Figure) -> str | None:
    """The layout key (``yaxis``, ``yaxis2``...) of the chart's rows at its left edge: the y axis of a heatmap, or
    one whose range the chart sets, that shows its tick labels on the left of the leftmost subplot; None when there
    is none."""
    layout = fig.layout
    best, left = None, math.inf
    for trace in fig.data:
        name = _axis_name(trace.yaxis, "y")
        if trace.type != "heatmap" and not _fixed(layout, name):
            continue
        axis = layout[name]
        if axis.showticklabels is False or axis.side == "right" or axis.visible is False:
            continue
        x_axis = layout[_axis_name(trace.xaxis, "x")]
        start = x_axis.domain[0] if x_axis.domain else 0.0
        if start < left:
            best, left = name, start
    return best


def row_labels(fig: go.Figure) -> RowLabels | None:
    """The frozen column of ``fig`` (see the module), or None when ``fig`` has no named rows at its left, a trace
    other than a heatmap or a legend entry whose data sets a range, or labelled subplots in more than one row."""
    rows = row_axis(fig)
    if rows is None:
        return None
    labelled = {_axis_name(t.yaxis, "y") for t in fig.data if fig.layout[_axis_name(t.yaxis, "y")].showticklabels}
    if len({tuple(fig.layout[name].domain or (0, 1)) for name in labelled}) > 1:
        return None
    for trace in fig.data:
        if trace.type == "heatmap" or _empty(trace):
            continue
        if not all(_fixed(fig.layout, _axis_name(getattr(trace, f"{a}axis"), a)) for a in "xy"):
            return None  # its data sets a range: a scatter over the rows, which the page would fix
    ref = rows.replace("axis", "")  # "yaxis2" -> "y2"
    x_ref = next(_axis_name(t.xaxis, "x") for t in fig.data if _axis_name(t.yaxis, "y") == rows).replace("axis", "")
    return RowLabels(f"{x_ref}{ref}", f"g-{ref}title")
