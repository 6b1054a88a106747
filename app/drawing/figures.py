"""Plotly figures for the explorer. Inputs are numpy arrays and token lists; no Streamlit here.

Every token label goes through :func:`app.drawing.analysis.escape` (plotly renders some HTML in labels and
hover text), and tokens sit at integer positions with ``ticktext``, so repeated tokens keep their own
rows and columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .analysis import escape, unique_labels
from .layout import (
    FONT,
    LABEL_GAP,
    PHONE_AXIS,
    TICKS_DRAWN,
    axis_title_room,
    cell_size,
    colour_bar,
    fit_margins,
    named_axis,
    short_title,
    text_px,
    tick_font,
    tick_room,
)

ATTENTION_SCALE = [[0.0, "#ffffff"], [0.08, "#eef3fb"], [0.3, "#9ecae1"], [0.6, "#3182bd"], [1.0, "#08306b"]]
MASK_SCALE = [[0.0, "#f3d6d6"], [0.5, "#f3d6d6"], [0.5, "#2e7d32"], [1.0, "#2e7d32"]]
DIVERGING = "RdBu"  # low values red, high values blue
DIVERGING_WORDS = "blue pushed it up (positive), red pushed it down (negative)"  # what DIVERGING's colours say
HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]

PLOTLY_CONFIG = {
    "displaylogo": False,
    "toImageButtonOptions": {"format": "png", "filename": "attention", "scale": 2},
    "modeBarButtonsToRemove": ["lasso2d", "select2d"],
}


def plotly_config(filename: str) -> dict:
    """Chart config whose camera button downloads a PNG named ``filename`` (no server-side Chrome needed)."""
    return {**PLOTLY_CONFIG, "toImageButtonOptions": {**PLOTLY_CONFIG["toImageButtonOptions"], "filename": filename}}


def attention_heatmap(weights: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str], title: str = "",
                      query_title: str = "query", key_title: str = "key", zmax: float | None = None,
                      colorscale: list | str | None = None, zmin: float = 0.0, value_name: str = "weight",
                      query_offset: int = 0, key_offset: int = 0, query_first: int = 1,
                      key_first: int = 1) -> go.Figure:
    """One attention matrix ``(Q, K)``: rows are queries, columns keys; hover names both tokens and the weight.

    ``query_offset``/``key_offset`` say where a cropped window starts, so labels and hover show the true positions;
    ``query_first``/``key_first`` are the numbers of the axes' first positions (1; 0 for the decoder input, see
    ``app.drawing.analysis.FIRST_NUMBER``).
    """
    w = np.asarray(weights, dtype=np.float64)
    q, k = w.shape
    ylabels = unique_labels(query_tokens, query_offset + query_first)
    xlabels = unique_labels(key_tokens, key_offset + key_first)
    qtext = [escape(t) for t in query_tokens]
    ktext = [escape(t) for t in key_tokens]
    custom = np.empty((q, k, 4), dtype=object)
    custom[:, :, 0] = np.asarray(qtext, dtype=object)[:, None]
    custom[:, :, 1] = np.asarray(ktext, dtype=object)[None, :]
    custom[:, :, 2] = (np.arange(q) + query_offset + query_first)[:, None]  # numbered as the labels
    custom[:, :, 3] = (np.arange(k) + key_offset + key_first)[None, :]
    heat = dict(
        type="heatmap", z=w, x=list(range(k)), y=list(range(q)), customdata=custom,
        colorscale=colorscale or ATTENTION_SCALE, zmin=zmin,
        zmax=zmax if zmax is not None else max(float(w.max()), 1e-9),
        hovertemplate=(f"{query_title} %{{customdata[2]}}: <b>%{{customdata[0]}}</b><br>"
                       f"{key_title} %{{customdata[3]}}: <b>%{{customdata[1]}}</b><br>"
                       f"{value_name} %{{z:.3f}}<extra></extra>"),
        colorbar=colour_bar(value_name), xgap=1 if k <= 60 else 0, ygap=1 if q <= 60 else 0,
    )
    cell = cell_size(max(q, k))
    top = 50 if title else 20
    # upright key labels only where the whole row of them fits a phone's plot; else turned
    angled = k > 8 or sum(text_px(t, tick_font(k)) + 2 * LABEL_GAP for t in xlabels) > PHONE_AXIS
    # a few rows: the query axis keeps the short name (before its explanation, which the hover still gives), so
    # it is no longer than the rows and the chart needs no empty band to hold it
    rows = top + cell * q + 40
    shown_title = short_title(query_title) if axis_title_room(query_title) > rows else query_title
    return go.Figure(heat, dict(  # not fit_margins: on a short sentence in a narrow column (Compare models, What
        # carries the change) its margins squeezed the colour bar into the next chart (test_every_view_browser)
        title=dict(text=title, x=0.0, xanchor="left"), font=FONT,
        height=int(min(max(260, 150 + cell * q, top + axis_title_room(shown_title) + tick_room(xlabels, angled)),
                       2600)),
        margin=dict(l=10, r=10, t=top, b=10),
        xaxis=named_axis(xlabels, key_title, tickangle=-60 if angled else 0, side="bottom"),
        yaxis=named_axis(ylabels, shown_title, autorange="reversed"),
        plot_bgcolor="white",
    ))


LINE_BUCKETS = ((0.05, 0.15, 0.12, 1.0), (0.15, 0.35, 0.3, 1.6), (0.35, 0.6, 0.55, 2.4), (0.6, 1.01, 0.85, 3.4))
HEAD_FAN = 0.3  # rows: the heads' ends of one token spread over this height, so two heads' lines never overlay


def tint(colour: str, strength: float) -> str:
    """``colour`` (``#rrggbb``) mixed with white: ``strength`` 1 the colour itself, 0 white. A faint line is drawn
    in a tint of its head's colour, opaque, never see-through: lines that cross keep their heads' colours instead of
    blending into one the legend has not."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 - strength * (255 - c)):02x}" for c in rgb)


def fan(n_heads: int) -> np.ndarray:
    """Each head's offset (in rows) at a token's end of its lines: spread evenly over ``HEAD_FAN``, centred."""
    return (np.arange(n_heads) - (n_heads - 1) / 2) * (HEAD_FAN / max(n_heads - 1, 1))


def attention_lines(attn: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str],
                    heads: Sequence[int] | None = None, focus: int | None = None, threshold: float = 0.05,
                    title: str = "", query_title: str = "query", key_title: str = "key", query_first: int = 1,
                    key_first: int = 1) -> go.Figure:
    """Token-to-token lines for one layer ``(H, Q, K)``: queries on the left, keys on the right (headed by
    ``query_title`` and ``key_title``), one colour per head, line strength by weight (weights below ``threshold``
    hidden). ``focus`` keeps one query's lines. Each head's lines end a little apart from the others' at a token
    (``fan``) and are drawn in opaque tints of its colour (``tint``), so overlapping heads never blend into a colour
    the legend has not; repeated pieces carry their numbers, as every chart writes them."""
    n_heads, q, k = attn.shape
    heads = list(range(n_heads)) if heads is None else list(heads)
    n = max(q, k)  # both columns span the same height, so lines between sentences of unequal length stay level
    y_q = -np.linspace(0, n - 1, q) if q > 1 else np.zeros(1)
    y_k = -np.linspace(0, n - 1, k) if k > 1 else np.zeros(1)
    offsets = dict(zip(heads, fan(len(heads))))  # in rows of the longer column (1 apart)
    traces = []
    colours = {head: HEAD_COLOURS[head % len(HEAD_COLOURS)] for head in heads}
    for head in heads:  # legend entries at full strength (the line traces below are faint on purpose)
        traces.append(dict(
            type="scatter", x=[None], y=[None], mode="lines", line=dict(color=colours[head], width=3),
            name=f"head {head + 1}", legendgroup=f"h{head}"))
    for low, high, alpha, width in LINE_BUCKETS:  # every head's faint lines first, the strong ones over them
        low = max(low, threshold)  # below the threshold: no line, whatever the bucket
        for head in heads:
            sel = (attn[head] >= low) & (attn[head] < high)
            if focus is not None:
                rows = np.zeros_like(sel)
                rows[focus] = True
                sel &= rows
            qi, ki = np.nonzero(sel)
            if qi.size == 0:
                continue
            xs = np.tile(np.array([0.0, 1.0, np.nan]), qi.size)
            ys = np.stack([y_q[qi], y_k[ki], np.full(qi.size, np.nan)], axis=1).ravel() + offsets[head]
            traces.append(dict(
                type="scatter", x=xs, y=ys, mode="lines", line=dict(color=tint(colours[head], alpha), width=width),
                name=f"head {head + 1}", legendgroup=f"h{head}", showlegend=False, hoverinfo="skip"))
    # token columns, with hover listing each head's strongest key for that query
    qlabels = unique_labels(query_tokens, query_first)
    klabels = unique_labels(key_tokens, key_first)
    hover_q = []
    for i in range(q):
        parts = [f"query {i + query_first}: <b>{qlabels[i]}</b>"]
        for head in heads:
            j = int(np.argmax(attn[head, i]))
            parts.append(f"head {head + 1} → {klabels[j]} ({attn[head, i, j]:.2f})")
        hover_q.append("<br>".join(parts))
    traces.append(dict(
        type="scatter", x=np.zeros(q), y=y_q, mode="markers+text", text=qlabels, textposition="middle left",
        marker=dict(size=7, color="#444"), hovertext=hover_q, hoverinfo="text", showlegend=False,
        textfont=dict(size=tick_font(q) + 1)))
    traces.append(dict(
        type="scatter", x=np.ones(k), y=y_k, mode="markers+text", text=klabels, textposition="middle right",
        marker=dict(size=7, color="#444"), hovertext=[f"key {j + key_first}: <b>{klabels[j]}</b>" for j in range(k)],
        hoverinfo="text", showlegend=False, textfont=dict(size=tick_font(k) + 1)))
    return go.Figure(traces, dict(
        title=dict(text=title, x=0.0), font=FONT, height=int(min(max(320, 90 + 22 * n), 3000)),
        xaxis=dict(visible=False, range=[-0.6, 1.6], fixedrange=True),
        yaxis=dict(visible=False, range=[-n + 0.3, 1.6]), plot_bgcolor="white",
        margin=dict(l=10, r=10, t=80 if title else 40, b=10),
        annotations=[dict(x=0.0, y=1.1, text=f"<b>{escape(query_title)}</b>", showarrow=False, xanchor="right",
                          yanchor="bottom", name="query heading"),
                     dict(x=1.0, y=1.1, text=f"<b>{escape(key_title)}</b>", showarrow=False, xanchor="left",
                          yanchor="bottom", name="key heading")],
        legend=dict(orientation="h", y=1.0, x=0.0, yanchor="bottom", font=dict(size=12)),
    ))


def mask_figure(allowed: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str], title: str,
                query_title: str = "query", key_title: str = "key", query_first: int = 1,
                key_first: int = 1) -> go.Figure:
    """A boolean mask ``(Q, K)``: green = may attend, pink = blocked (weight forced to exactly 0)."""
    m = np.asarray(allowed, dtype=float)
    q, k = m.shape
    qtext = np.asarray([escape(t) for t in query_tokens], dtype=object)
    ktext = np.asarray([escape(t) for t in key_tokens], dtype=object)
    custom = np.empty((q, k, 3), dtype=object)
    custom[:, :, 0] = qtext[:, None]
    custom[:, :, 1] = ktext[None, :]
    custom[:, :, 2] = np.where(m > 0, "may attend", "blocked")
    heat = dict(
        type="heatmap", z=m, x=list(range(k)), y=list(range(q)), zmin=0, zmax=1, colorscale=MASK_SCALE,
        showscale=False, customdata=custom, xgap=1, ygap=1,
        hovertemplate=f"{query_title} <b>%{{customdata[0]}}</b><br>{key_title} <b>%{{customdata[1]}}</b><br>"
                      "%{customdata[2]}<extra></extra>",
    )
    legend = [dict(type="scatter", x=[None], y=[None], mode="markers", name=name, showlegend=True, hoverinfo="skip",
                   marker=dict(symbol="square", size=12, color=colour, line=dict(color="#888", width=1)))
              for name, colour in (("may attend", MASK_SCALE[-1][1]), ("blocked (weight 0)", MASK_SCALE[0][1]))]
    cell = cell_size(max(q, k))
    return fit_margins(go.Figure([heat, *legend], dict(
        title=dict(text=title, x=0.0), font=FONT, height=int(min(max(240, 160 + cell * q), 2200)),
        margin=dict(l=10, r=10, t=70, b=10), plot_bgcolor="white",
        legend=dict(orientation="h", x=0.0, y=1.0, yanchor="bottom", font=dict(size=12)),
        xaxis=named_axis(unique_labels(key_tokens, key_first), key_title,
                    tickangle=-90 if k > 30 else -60 if k > 8 else 0),
        yaxis=named_axis(unique_labels(query_tokens, query_first), query_title, autorange="reversed"),
    )))


def topk_figure(candidates: Sequence[str], probs: np.ndarray, chosen: int | None) -> go.Figure:
    """Top-k next-token candidates at one step; the token the search kept is highlighted."""
    labels = [escape(c) for c in candidates]
    probs = np.asarray(probs, dtype=float)
    n = len(labels)
    colours = ["#2e7d32" if i == chosen else "#9ecae1" for i in range(n)]
    bars = dict(type="bar", x=probs, y=list(range(n)), orientation="h", marker=dict(color=colours), customdata=labels,
                text=[f"{p:.1%}" for p in probs], textposition="outside", cliponaxis=False,
                hovertemplate="<b>%{customdata}</b><br>p = %{x:.4f}<extra></extra>")
    return go.Figure(bars, dict(title=dict(text="Top candidates for this step", x=0.0), font=FONT,
                                height=int(120 + 30 * n), margin=dict(l=10, r=60, t=45, b=10),
                                xaxis=dict(title="probability", range=[0, float(probs.max(initial=0.0)) * 1.2 + 0.02]),
                                yaxis=named_axis(labels, "", autorange="reversed")))


def step_cross_figure(cross_step: np.ndarray, source_tokens: Sequence[str], output_token: str,
                      zrange: tuple[float, float] | None = None) -> go.Figure:
    """One decoding step's cross-attention ``(H, S)``: a row per head plus their mean."""
    rows = np.vstack([cross_step.mean(axis=0, keepdims=True), cross_step])
    names = ["mean"] + [f"head {h + 1}" for h in range(cross_step.shape[0])]
    fig = attention_heatmap(rows, names, source_tokens, title=f"Where this step looked (cross-attention) "
                            f"while producing <b>{escape(output_token)}</b>", query_title="head",
                            key_title="source token", zmin=zrange[0] if zrange else 0.0,
                            zmax=zrange[1] if zrange else None)
    fig.layout.height = int(150 + 26 * rows.shape[0] + 6 * max(len(t) for t in source_tokens))
    return fig


EVOLUTION_COLUMNS = 100  # columns of cells side by side at the most: a longer sentence's panels go in rows


def evolution_figure(panels: Sequence[tuple[str, np.ndarray]], query_tokens: Sequence[str],
                     key_tokens: Sequence[str], title: str, zrange: tuple[float, float] | None = None,
                     query_first: int = 1, key_first: int = 1) -> go.Figure:
    """The same attention matrix in several checkpoints side by side, one shared colour scale; where they would be
    more than ``EVOLUTION_COLUMNS`` columns of cells in all, two panels a row (one for a very long sentence), each
    row with its row labels, every row at least its labels' height (a 44-piece sentence's stay readable)."""
    n = len(panels)
    q, k = len(query_tokens), len(key_tokens)
    per_row = n if k * n <= EVOLUTION_COLUMNS else 2 if 2 * k <= EVOLUTION_COLUMNS else 1
    rows = -(-n // per_row)
    fig = make_subplots(rows=rows, cols=per_row, subplot_titles=[escape(name) for name, _ in panels],
                        horizontal_spacing=0.02, vertical_spacing=0.3 / rows)
    qtext = np.asarray([escape(t) for t in query_tokens], dtype=object)
    ktext = np.asarray([escape(t) for t in key_tokens], dtype=object)
    custom = np.empty((q, k, 2), dtype=object)
    custom[:, :, 0] = qtext[:, None]
    custom[:, :, 1] = ktext[None, :]
    for i, (name, w) in enumerate(panels):
        fig.add_trace(go.Heatmap(z=w, coloraxis="coloraxis", customdata=custom,
                                 hovertemplate=f"{escape(name)}<br>query <b>%{{customdata[0]}}</b><br>key "
                                               "<b>%{customdata[1]}</b><br>weight %{z:.3f}<extra></extra>"),
                      row=i // per_row + 1, col=i % per_row + 1)
    fig.update_xaxes(showticklabels=True, showgrid=False, zeroline=False, tickmode="array", tickvals=list(range(k)),
                     ticktext=unique_labels(key_tokens, key_first), tickfont=dict(size=tick_font(k * per_row)),
                     tickangle=-90, **TICKS_DRAWN)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed", **TICKS_DRAWN)
    for row in range(1, rows + 1):
        fig.update_yaxes(showticklabels=True, tickmode="array", tickvals=list(range(q)),
                         ticktext=unique_labels(query_tokens, query_first), tickfont=dict(size=tick_font(q)),
                         row=row, col=1)
    zmin, zmax = zrange if zrange is not None else (0.0, max(max(float(np.max(w)) for _, w in panels), 1e-9))
    width_share = 1100 / max(per_row, 1)
    labels = (tick_font(q) + 3) * q  # each row label its own line
    x_labels = 8 + 0.62 * tick_font(k * per_row) * max((len(t) for t in key_tokens), default=1)  # turned, below
    panel = max(190 + width_share * q / max(k, 1) - 160, labels, 120)
    fig.update_layout(coloraxis=dict(colorscale=ATTENTION_SCALE, cmin=zmin, cmax=zmax, colorbar=dict(thickness=12)),
                      title=dict(text=title, x=0.0), font=FONT, margin=dict(l=10, r=10, t=70, b=10),
                      height=int(min(max(320, 100 + rows * (panel + x_labels + 30)), 1000 * rows)),
                      plot_bgcolor="white")
    return fit_margins(fig)


def history_figure(history: Sequence[dict], marks: Sequence[int] = ()) -> go.Figure | None:
    """Validation BLEU (and loss) over training steps from the model card; ``marks`` are snapshot steps."""
    steps = [h.get("step") for h in history if isinstance(h, dict) and h.get("step") is not None]
    if not steps:
        return None
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for key, colour, secondary in (("val_bleu", "#2e7d32", False), ("val_loss", "#d62728", True)):
        pts = [(h["step"], h[key]) for h in history if isinstance(h, dict) and key in h and h.get("step") is not None]
        if pts:
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                     name=key.replace("_", " "), line=dict(color=colour)), secondary_y=secondary)
    for step in marks:
        fig.add_vline(x=step, line_dash="dot", line_color="#888")
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=30, b=10), font=FONT, legend=dict(orientation="h", y=1.15),
                      xaxis=dict(title=dict(text="training step")))
    fig.update_yaxes(title_text="validation BLEU", secondary_y=False)
    fig.update_yaxes(title_text="validation loss", secondary_y=True)
    return fit_margins(fig)


def hline(y: float, **shape) -> dict:
    """A horizontal line across the plot at ``y`` (what ``fig.add_hline`` adds, as part of a layout)."""
    return dict(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=y, y1=y, **shape)


def vline(x: float, **shape) -> dict:
    """A vertical line across the plot at ``x`` (what ``fig.add_vline`` adds, as part of a layout)."""
    return dict(type="line", xref="x", x0=x, x1=x, yref="y domain", y0=0, y1=1, **shape)
