"""What each output piece takes from the source and from the earlier output, as figures from arrays (no Streamlit):
the attribution's share per step (What drives each word), ALTI+'s source share per piece and its whole contribution
matrix (Source or prefix). The heatmap, axes and lines are :mod:`app.drawing.figures`'."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .analysis import escape, unique_labels
from .figures import attention_heatmap, hline, vline
from .layout import FONT, TICKS_DRAWN, fit_margins, named_axis, top_title


def attribution_share(source_share: np.ndarray, outputs: Sequence[str], first: int = 0) -> go.Figure:
    """The share of each output step's attribution that goes to the source (the rest: the earlier output), as
    stacked bars. ``outputs[i]`` is the piece output step ``first + i + 1`` produced (steps count from 1); each
    bar sits at its step and is labelled with the piece that step produced."""
    share = np.asarray(source_share, dtype=float)
    steps = list(range(first + 1, first + 1 + len(share)))  # output steps, counted from 1
    pieces = [escape(t) for t in outputs]
    bars = [dict(type="bar", x=steps, y=share, name="source", marker=dict(color="#3182bd"), customdata=pieces,
                 hovertemplate="step %{x}: <b>%{customdata}</b><br>source %{y:.2f}<extra></extra>"),
            dict(type="bar", x=steps, y=1 - share, name="earlier output", marker=dict(color="#ff7f0e"),
                 customdata=pieces,
                 hovertemplate="step %{x}: <b>%{customdata}</b><br>earlier output %{y:.2f}<extra></extra>")]
    fig = go.Figure(bars, dict(barmode="stack", height=290, margin=dict(l=10, r=10, t=70, b=10), font=FONT,
                               title=top_title("Share of the attribution (absolute values) per step"),
                               xaxis=dict(tickmode="array", tickvals=steps, ticktext=unique_labels(outputs, first + 1),
                                          title=dict(text="output piece (the step that produced it)"),
                                          tickangle=-60 if len(steps) > 8 else 0, **TICKS_DRAWN),
                               yaxis=dict(range=[0, 1], title=dict(text="share")),
                               legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom")))  # under the title
    return fit_margins(fig)


SOURCE_COLOUR, PREFIX_COLOUR = "#3182bd", "#ff7f0e"


def source_share_figure(share: np.ndarray, output_tokens: Sequence[str], threshold: float | None = None,
                        title: str = "Share from the source per output piece (ALTI+)", first: int = 0,
                        mean: float | None = None) -> go.Figure:
    """Stacked bars per output piece: ``share (T,)`` from the source, the rest from the target prefix; a dashed line
    at the sentence's mean source share and, when given, a dotted one at the hallucination ``threshold``
    (in a window of a long sentence: ``first``, the index of the first piece shown; ``mean``, the whole sentence's)."""
    share = np.asarray(share, dtype=np.float64)
    steps = list(range(len(share)))
    text = [escape(t) for t in output_tokens]
    traces = [
        dict(type="bar", x=steps, y=share, name="source", marker=dict(color=SOURCE_COLOUR), customdata=text,
             hovertemplate="%{customdata}: %{y:.3f} from the source<extra></extra>"),
        dict(type="bar", x=steps, y=1 - share, name="target prefix", marker=dict(color=PREFIX_COLOUR), customdata=text,
             hovertemplate="%{customdata}: %{y:.3f} from the target prefix<extra></extra>")]
    mean = mean if mean is not None else float(share.mean()) if len(share) else 0.0
    # the lines are named in the legend (a label on a line would sit on the bars)
    lines = [(mean, "dash", "#222222", f"mean source share ({mean:.2f})")]
    if threshold is not None:
        lines.append((threshold, "dot", "#c62828", f"hallucination threshold ({threshold:.2f})"))
    traces += [dict(type="scatter", x=[None], y=[None], mode="lines", line=dict(dash=dash, color=colour, width=2),
                    name=name, hoverinfo="skip") for y, dash, colour, name in lines]
    return fit_margins(go.Figure(traces, dict(
        barmode="stack", height=360, margin=dict(l=10, r=10, t=110, b=10), font=FONT,
        title=top_title(title),  # the legend under the title (it may wrap on a phone)
        legend=dict(orientation="h", y=1.0, x=0, yanchor="bottom", font=dict(size=12)),
        xaxis=named_axis(unique_labels(output_tokens, first + 1), "output piece",
                         tickangle=-60 if len(share) > 8 else 0),
        yaxis=dict(range=[0, 1], title=dict(text="share")), plot_bgcolor="white",
        shapes=[hline(y, line=dict(dash=dash, width=2, color=colour)) for y, dash, colour, _ in lines])))


def contribution_matrix_figure(source: np.ndarray, target: np.ndarray, output_tokens: Sequence[str],
                               source_tokens: Sequence[str], prefix_tokens: Sequence[str],
                               title: str = "Contributions to each output piece (ALTI+)",
                               query_offset: int = 0, source_offset: int = 0, prefix_offset: int = 0) -> go.Figure:
    """The full ALTI+ matrix: rows the output pieces, columns the source pieces ``source (T, S)`` then the decoder
    input ``target (T, T)``; a line between the two parts, each row summing to 1. Each part keeps the numbers every
    other chart gives its pieces (source from 1, decoder input from 0: ``app.drawing.analysis.FIRST_NUMBER``), never the
    place on the joined axis; a piece found more than once in its part carries its number there, as every other
    chart writes it (a piece found once in each part is written bare in both: the part says which). In a window of
    a long sentence: ``query_offset``, ``source_offset`` and ``prefix_offset``, where the rows, the source pieces
    and the target prefix shown start (0-based)."""
    s = len(source_tokens)
    matrix = np.hstack([np.asarray(source, dtype=np.float64), np.asarray(target, dtype=np.float64)])  # (T, S+T)
    fig = attention_heatmap(matrix, output_tokens, [*source_tokens, *prefix_tokens], title=title,
                            query_title="output piece", key_title="source piece | target prefix",
                            value_name="contribution", zmax=max(float(matrix.max()), 1e-9),
                            query_offset=query_offset)
    numbers = [*range(source_offset + 1, source_offset + s + 1),
               *range(prefix_offset, prefix_offset + len(prefix_tokens))]
    fig.layout.xaxis.ticktext = [*unique_labels(source_tokens, source_offset + 1),
                                 *unique_labels(prefix_tokens, prefix_offset)]
    heat = fig.data[0]
    custom = np.array(heat.customdata, dtype=object)  # (T, S+T, 4): query, key, query number, key number
    custom[:, :, 3] = np.asarray([f"source piece {n}" if j < s else f"target prefix {n}"
                                  for j, n in enumerate(numbers)], dtype=object)[None, :]
    heat.update(customdata=custom, hovertemplate=heat.hovertemplate.replace(
        "source piece | target prefix %{customdata[3]}", "%{customdata[3]}"))
    fig.layout.shapes = [vline(s - 0.5, line=dict(width=2, color="#444444"))]
    fig.layout.annotations = [dict(x=x - 0.5, y=1.0, yref="paper", xanchor="left", yanchor="bottom", showarrow=False,
                                   text=f"<b>{name}</b>", font=dict(size=11, color="#444444"))
                              for x, name in ((0, "source"), (s, "target prefix"))]
    return fit_margins(fig)
