"""The row labels of a chart that scrolls sideways, as a figure of their own that the page keeps at the left edge of
the scrolling box (a frozen column, as a spreadsheet's): a phone's visitor who swipes to the far columns of a heatmap
still reads which row is which.

:func:`row_labels` builds it from the chart's own layout (the same height, margins, titles, legend and axes, so the
same plot area and the same rows) with no data but one empty cell per heatmap (its colour bar takes the same room)
and one empty point per other trace (its legend entry takes the same room), each axis given the range plotly's
autorange gives the chart's heatmaps (cells centred on their positions) or the chart's own range. The
page (``app.page.controls.chart``) shows only its left margin: the row labels and the row axis' title on a white
band. Charts it cannot rebuild exactly (a trace other than a heatmap on an axis whose range its data sets) get None
and scroll as before. No Streamlit here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from .layout import FONT, text_px

BAND = "#ffffff"  # the frozen column's background: the page's white
ROW_LABELS = "row_labels"  # the key of ``layout.meta`` that marks a frozen column's figure (True)


@dataclass(frozen=True)
class RowLabels:
    """A chart's frozen column: ``figure`` (drawn as wide as the chart), the ``width`` (px) of the band the page
    shows of it (at least the chart's left margin), and which of the chart's pieces it repeats: ``subplot``
    (plotly's ``xy`` / ``x2y2``: the rows' subplot) and ``title`` (the class of the row axis' title, ``g-ytitle``)."""

    figure: go.Figure
    width: int
    subplot: str
    title: str


def _axis_name(ref: str | None, letter: str) -> str:
    """A trace's axis reference (``"y2"``) as the layout's key (``"yaxis2"``)."""
    ref = ref or letter
    return f"{letter}axis{ref[1:]}"


def _cells(values, n: int) -> tuple[list, bool] | None:
    """(the positions of a heatmap's ``n`` cells along one axis, whether they are categories); None when they are not
    evenly spaced numbers or distinct names (then plotly's range is not the simple one computed here)."""
    if values is None:
        return list(range(n)), False
    values = list(values)
    if len(values) != n:
        return None
    if all(isinstance(v, str) for v in values):
        return (values, True) if len(set(values)) == n else None
    try:
        numbers = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if n > 1 and not np.allclose(np.diff(numbers), numbers[1] - numbers[0]):
        return None
    return numbers.tolist(), False


def _range(cells: list, categorical: bool, reversed_: bool) -> list[float]:
    """The range plotly's autorange gives a heatmap's axis: half a cell beyond the first and the last cell."""
    if categorical:
        low, high = -0.5, len(cells) - 0.5
    else:
        step = (cells[1] - cells[0]) if len(cells) > 1 else 1.0
        low, high = min(cells) - abs(step) / 2, max(cells) + abs(step) / 2
    return [high, low] if reversed_ else [low, high]


def _empty(trace) -> bool:
    """A trace with no point to draw (a legend entry: ``x=[None]``)."""
    points = [v for axis in ("x", "y") for v in (() if getattr(trace, axis, None) is None else getattr(trace, axis))]
    return all(v is None for v in points)


def _fixed(layout, name: str) -> bool:
    """Whether the axis ``name`` has a range of its own (its data does not move it)."""
    axis = layout[name]
    return axis.range is not None and axis.autorange in (None, False)


def _without_data(trace) -> dict:
    """A trace of the same kind, style and name with no point (``x=[None]``): its legend entry takes the same room,
    nothing is drawn. Arrays of per-point values (text, colours, widths) keep their first value."""
    def first(value):
        if isinstance(value, dict):
            return {k: first(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, np.ndarray)) and not isinstance(value, str):
            return first(value[0]) if len(value) else None
        return value
    spec = {k: first(v) for k, v in trace.to_plotly_json().items() if k not in ("customdata", "hovertemplate")}
    return {**spec, "x": [None], "y": [None], "hoverinfo": "skip"}


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
    """The frozen column of ``fig`` (see the module), or None when ``fig`` has no named rows, a trace whose room
    this cannot rebuild without its data, or subplots in more than one row with labels (one band's white would cover
    the other rows' labels)."""
    rows = row_axis(fig)
    if rows is None:
        return None
    labelled = {_axis_name(t.yaxis, "y") for t in fig.data if fig.layout[_axis_name(t.yaxis, "y")].showticklabels}
    if len({tuple(fig.layout[name].domain or (0, 1)) for name in labelled}) > 1:
        return None
    ranges: dict[str, dict] = {}
    skeleton = []
    for trace in fig.data:
        if trace.type != "heatmap":
            if _empty(trace) or all(_fixed(fig.layout, _axis_name(getattr(trace, f"{a}axis"), a)) for a in "xy"):
                skeleton.append(_without_data(trace))  # its room in the legend, nothing drawn
                continue
            return None  # its data sets a range this cannot know
        z = np.asarray(trace.z if trace.z is not None else [], dtype=object)
        if z.ndim != 2 or not z.size:
            return None
        for letter, n in (("y", z.shape[0]), ("x", z.shape[1])):
            cells = _cells(getattr(trace, letter), n)
            if cells is None:
                return None
            name = _axis_name(getattr(trace, f"{letter}axis"), letter)
            if _fixed(fig.layout, name):
                continue  # the chart's own range holds
            axis = fig.layout[name]
            values, categorical = cells
            if name in ranges and ranges[name]["cells"] != values:
                return None  # two heatmaps of different cells on one axis
            ranges[name] = dict(cells=values, categorical=categorical,
                                range=_range(values, categorical, axis.autorange == "reversed"))
        # one empty cell where the heatmap starts: the same colour bar (its room at the right), nothing drawn
        skeleton.append(go.Heatmap(z=[[None]], x=[trace.x[0] if trace.x is not None else 0],
                                   y=[trace.y[0] if trace.y is not None else 0], xaxis=trace.xaxis,
                                   yaxis=trace.yaxis, coloraxis=trace.coloraxis, colorscale=trace.colorscale,
                                   zmin=trace.zmin, zmax=trace.zmax, showscale=trace.showscale,
                                   colorbar=trace.colorbar, hoverinfo="skip"))
    labels = go.Figure(data=skeleton, layout=fig.layout)  # a copy of it: plotly copies a layout it is given
    for name, axis in ranges.items():
        extra = dict(type="category", categoryorder="array", categoryarray=axis["cells"]) if axis["categorical"] \
            else {}
        labels.layout[name].update(range=axis["range"], autorange=False, **extra)
    # the band: white from the figure's left edge to its plot area, along the rows (a shape under the axes); the rest
    # see-through (the chart's title and x labels above and below it scroll with the chart)
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    labels.update_layout(meta={**meta, ROW_LABELS: True},  # what it is, for whoever reads the page's figures
                         paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", images=[], shapes=[
        dict(type="rect", xref="paper", yref="paper", x0=-20, x1=0, y0=0, y1=1, layer="below",
             fillcolor=BAND, line=dict(width=0))], hovermode=False, dragmode=False)
    ref = rows.replace("axis", "")  # "yaxis2" -> "y2"
    x_ref = next(_axis_name(t.xaxis, "x") for t in fig.data if _axis_name(t.yaxis, "y") == rows).replace("axis", "")
    return RowLabels(labels, _band_width(fig, rows), f"{x_ref}{ref}", f"g-{ref}title")


def _band_width(fig: go.Figure, rows: str) -> int:
    """Pixels of the chart's left margin at the most: its margin, the longest row label, the ticks' gap and the axis
    title (estimated generously: the band may be wider than the margin, it is see-through past it)."""
    layout, axis = fig.layout, fig.layout[rows]
    default = layout.font.size if layout.font and layout.font.size else FONT["size"]
    size = axis.tickfont.size if axis.tickfont and axis.tickfont.size else default
    names = list(axis.ticktext) if axis.ticktext else [str(c) for t in fig.data if t.type == "heatmap"
                                                       for c in (t.y if t.y is not None else [])]
    longest = max((text_px(t, size) for t in names), default=2 * size)
    title = 30 if axis.title and axis.title.text else 0
    return math.ceil((layout.margin.l or 0) + longest + 16 + title + 12)
