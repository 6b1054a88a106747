"""The figures of a whole test set (the "Whole test set" view): plain functions from arrays to plotly figures, so
they run in a notebook or a test without a browser."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .layout import FONT

FLAGGED, KEPT = "#c62828", "#3182bd"  # flagged lines red, the others the explorer's blue
OPEN = "#212121"  # the open line's mark: near black, apart from both
HEIGHT = 340  # fits a phone's screen (390 x 844) with the view's controls above


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=float)


def threshold_text(value: float) -> str:
    """A threshold as a label writes it: a whole number as one ("6", a repetition), else two decimals."""
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def signal_histogram(values: Sequence[float] | np.ndarray, name: str,
                     flagged: Sequence[bool] | np.ndarray | None = None,
                     threshold: float | None = None, bins: int = 30, threshold_name: str = "threshold",
                     opened: tuple[int, float] | None = None) -> go.Figure:
    """How the lines spread over one signal: a histogram of ``values`` (missing ones left out and counted in the
    title), flagged lines stacked in red on the others, a dotted line at ``threshold`` when given, labelled
    ``threshold_name`` and its value, and the open line (``opened``: its id and value) as a solid line labelled
    "line <id>" (none when its value is missing), its label a line lower than the threshold's."""
    values = _finite(values)
    flagged = np.zeros(len(values), dtype=bool) if flagged is None else np.asarray(flagged, dtype=bool)
    ok = np.isfinite(values)
    missing = int((~ok).sum())
    fig = go.Figure()
    if ok.any():
        low, high = float(values[ok].min()), float(values[ok].max())
        size = (high - low) / bins if high > low else 1.0
        xbins = dict(start=low, end=high + size * 1e-6, size=size)  # both traces on the same bins
        for label, colour, rows in (("not flagged", KEPT, ok & ~flagged), ("flagged", FLAGGED, ok & flagged)):
            if rows.any():
                fig.add_trace(go.Histogram(x=values[rows], name=label, marker_color=colour, xbins=xbins,
                                           autobinx=False,
                                           hovertemplate=f"{label}: %{{y}} lines in %{{x}}<extra></extra>"))
    if threshold is not None:
        fig.add_vline(x=threshold, line_dash="dot", line_width=2, line_color=FLAGGED,
                      annotation_text=f"{html.escape(threshold_name)} {threshold_text(threshold)}",
                      annotation_position="top left",
                      annotation_font=dict(size=12, color=FLAGGED))
    if opened is not None and np.isfinite(opened[1]):  # its label a line below the threshold's: never on top of it
        fig.add_vline(x=float(opened[1]), line_width=2, line_color=OPEN, annotation_text=f"line {int(opened[0])}",
                      annotation_position="top right", annotation_font=dict(size=12, color=OPEN),
                      annotation_yshift=-18 if threshold is not None else 0)
    title = f"{int(ok.sum()):,} lines" + (f" ({missing:,} without a value)" if missing else "")
    fig.update_layout(barmode="stack", height=HEIGHT, font=FONT, margin=dict(l=10, r=10, t=40, b=10),
                      title=dict(text=title, x=0.0, font=dict(size=13)),
                      xaxis=dict(title=dict(text=html.escape(name)), automargin=True),  # "on </s>" as typed
                      yaxis=dict(title=dict(text="lines"), automargin=True, tickformat=",d", rangemode="tozero"),
                      # "not flagged", "flagged" in the order of the scatter beside it (plotly reverses a stack's)
                      legend=dict(orientation="h", y=1.02, x=1.0, xanchor="right", yanchor="bottom",
                                  traceorder="normal"),
                      bargap=0.05)
    return fig


def share_chrf_scatter(share: Sequence[float] | np.ndarray, chrf: Sequence[float] | np.ndarray,
                       ids: Sequence[int] | np.ndarray, flagged: Sequence[bool] | np.ndarray | None = None,
                       threshold: float | None = None, threshold_name: str = "threshold",
                       opened: int | None = None) -> go.Figure:
    """Each line as a point: its source share (ALTI+) across, its chrF up; flagged lines red, a dotted line at the
    source-share ``threshold`` (labelled ``threshold_name`` and its value). Lines without either value are left
    out (the title counts them); a point's hover names its line id (``customdata``, what a click reads). The open
    line (``opened``, an id) is ringed, a trace of its own named "line <id>"."""
    share, chrf, ids = _finite(share), _finite(chrf), np.asarray(ids)
    flagged = np.zeros(len(share), dtype=bool) if flagged is None else np.asarray(flagged, dtype=bool)
    ok = np.isfinite(share) & np.isfinite(chrf)
    fig = go.Figure()
    for label, colour, rows in (("not flagged", KEPT, ok & ~flagged), ("flagged", FLAGGED, ok & flagged)):
        if rows.any():
            fig.add_trace(go.Scatter(x=share[rows], y=chrf[rows], mode="markers", name=label,
                                     customdata=ids[rows].astype(int),
                                     marker=dict(color=colour, size=7, opacity=0.7, line=dict(width=0)),
                                     hovertemplate=f"line %{{customdata}} ({label}): source share %{{x:.2f}}, "
                                                   "chrF %{y:.1f}<extra></extra>"))
    here = ok & (ids == opened) if opened is not None else np.zeros(len(share), dtype=bool)
    if here.any():
        fig.add_trace(go.Scatter(x=share[here][:1], y=chrf[here][:1], mode="markers", name=f"line {int(opened)}",
                                 customdata=ids[here][:1].astype(int),
                                 marker=dict(color="rgba(0,0,0,0)", size=16, line=dict(width=2.5, color=OPEN)),
                                 hovertemplate="line %{customdata} (open): source share %{x:.2f}, chrF %{y:.1f}"
                                               "<extra></extra>"))
    if threshold is not None:
        fig.add_vline(x=threshold, line_dash="dot", line_width=2, line_color=FLAGGED,
                      annotation_text=f"{html.escape(threshold_name)} {threshold_text(threshold)}",
                      annotation_position="top left",
                      annotation_font=dict(size=12, color=FLAGGED))
    left = int(len(share) - ok.sum())
    title = f"{int(ok.sum()):,} lines" + (f" ({left:,} without chrF or source share)" if left else "")
    fig.update_layout(height=HEIGHT, font=FONT, margin=dict(l=10, r=10, t=40, b=10),
                      title=dict(text=title, x=0.0, font=dict(size=13)),
                      xaxis=dict(title=dict(text="share from the source (ALTI+)"), automargin=True),
                      yaxis=dict(title=dict(text="chrF"), automargin=True),
                      legend=dict(orientation="h", y=1.02, x=1.0, xanchor="right", yanchor="bottom"))
    return fig
