"""What carries the change (activation patching) as figures: each site kind's effects as a heatmap on one diverging
scale shared by every chart of an edit (0 white at the centre, 1 the whole change, values outside [0, 1] kept and
shown, never clipped), the edited source piece marked. No Streamlit here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from . import figures

EFFECT = "effect"  # the colour bar's and the hover's name for a site's normalised effect
MARK = "#111111"  # the outline of the edited source piece's column


def scale_bound(*arrays: np.ndarray) -> float:
    """The half-range of the diverging scale shared by ``arrays``: at least 1 (the whole change), or the largest
    finite ``|effect|`` when one is larger, so no value is clipped."""
    top = [float(np.nanmax(np.abs(a))) for a in map(np.asarray, arrays) if a.size and np.isfinite(a).any()]
    return max([1.0, *top])


def marked_tokens(tokens: Sequence[str], edited: Sequence[str], positions: Sequence[int]) -> list[str]:
    """The source pieces as the charts label them: an edited position reads ``clean→edited``."""
    out = list(tokens)
    for j in positions:
        if 0 <= j < len(out):
            out[j] = f"{tokens[j]}→{edited[j]}" if j < len(edited) else tokens[j]
    return out


def effect_heatmap(effect: np.ndarray, rows: Sequence[str], columns: Sequence[str], title: str, row_title: str,
                   column_title: str, bound: float, marked: Sequence[int] = (), clickable: bool = False) -> go.Figure:
    """One site kind's effects ``(rows, columns)`` as a heatmap on the diverging scale ``[-bound, bound]`` (blue:
    the site carries the change, red: it works against it), the columns ``marked`` (the edited source pieces)
    outlined. ``clickable`` (a heads chart): an invisible marker on every cell carries its hover and lets a click
    pick the cell (plotly heatmaps cannot be selected; scatter points can; :func:`head_pick`)."""
    values = np.asarray(effect, dtype=np.float64)
    fig = figures.attention_heatmap(values, list(rows), list(columns), title=title, query_title=row_title,
                                    key_title=column_title, zmin=-bound, zmax=bound, colorscale=figures.DIVERGING,
                                    value_name=EFFECT)
    n = len(rows)
    if clickable:
        r, c = np.indices(values.shape).reshape(2, -1)  # (2, rows * columns)
        custom = [[int(i) + 1, int(j) + 1, float(v)] for i, j, v in zip(r, c, values.reshape(-1))]  # plain lists:
        # a typed array's rows are not passed on by the page's selection event
        invisible = dict(marker=dict(opacity=0))
        fig.update_traces(hoverinfo="skip", hovertemplate=None, selector=dict(type="heatmap"))
        fig.add_trace(dict(type="scatter", x=c.tolist(), y=r.tolist(), mode="markers", customdata=custom,
                           marker=dict(symbol="square", size=24, opacity=0), selected=invisible,
                           unselected=invisible, showlegend=False, name="cells",
                           hovertemplate=f"{row_title} %{{customdata[0]}} · {column_title} %{{customdata[1]}}<br>"
                                         f"{EFFECT} %{{customdata[2]:.3f}}: click to open<extra></extra>"))
    for j in marked:
        fig.add_shape(type="rect", x0=j - 0.5, x1=j + 0.5, y0=-0.5, y1=n - 0.5, xref="x", yref="y",
                      line=dict(color=MARK, width=2), fillcolor="rgba(0,0,0,0)")
    return fig


def layer_names(n: int, first: str | None = None) -> list[str]:
    """Row names of a stream's layers: ``first`` (the embeddings' row) then ``layer 1`` ... (``n`` rows in all)."""
    return ([first] if first else []) + [f"layer {i}" for i in range(1, n + 1 - bool(first))]


def head_names(n: int) -> list[str]:
    """A heads chart's column names: the heads' numbers from 1 (the axis is titled "head"; upright, they fit)."""
    return [str(h) for h in range(1, n + 1)]


def head_pick(selection: dict | None) -> tuple[int, int] | None:
    """The (layer, head), 0-based, of the first point of a Streamlit plotly selection on a heads chart
    (:func:`effect_heatmap` of layers x heads)."""
    for point in (selection or {}).get("points", []):
        x, y = point.get("x"), point.get("y")
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            return int(y), int(x)
    return None
