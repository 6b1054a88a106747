"""Figures of the positional encoding (the paper's section 3.5): the sinusoidal table, its waves, the similarity
between positions, and the length of each piece's embedding beside its positional code. Numpy arrays in, plotly
figures out; no Streamlit here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .analysis import cosine_similarity, escape, unique_labels
from .figures import DIVERGING, HEAD_COLOURS, hline
from .layout import FONT, fit_margins, named_axis, top_title


def pe_heatmap(table: np.ndarray, title: str = "Sinusoidal positional encoding", position_step: int = 1,
               dim_step: int = 1) -> go.Figure:
    """The positional-encoding table ``(positions, d_model)``: rows positions, columns dimensions (the steps: the
    table holds every ``position_step``-th position and ``dim_step``-th dimension of a larger one; the axes say
    which)."""
    p, d = table.shape
    heat = dict(type="heatmap", z=table, x=np.arange(d) * dim_step, y=np.arange(p) * position_step,
                colorscale=DIVERGING, zmid=0, zmin=-1, zmax=1,
                hovertemplate="position %{y}<br>dimension %{x}<br>value %{z:.3f}<extra></extra>",
                colorbar=dict(thickness=12))
    fig = go.Figure(heat, dict(title=dict(text=title, x=0.0), font=FONT, height=int(min(max(300, 120 + 4 * p), 700)),
                               margin=dict(l=10, r=10, t=45, b=10),
                               xaxis=dict(title="dimension i"), yaxis=dict(title="position", autorange="reversed")))
    return fit_margins(fig)


def wave_dims(d_model: int, length: int) -> list[int]:
    """Even (sine) dimensions whose wavelengths are about 2π, length/4, length/2 and 2·length, plus one cosine."""
    dims = {0}
    for target in (length / 4, length / 2, 2 * length):
        i = np.log(max(target, 2 * np.pi) / (2 * np.pi)) / np.log(10000.0) * d_model  # wavelength = 2π·10000^(i/d)
        dims.add(int(min(max(0, 2 * round(i / 2)), d_model - 2)))
    dims.add(min(sorted(dims)[1] + 1 if len(dims) > 1 else 1, d_model - 1))
    return sorted(dims)


def pe_waves(table: np.ndarray, dims: Sequence[int]) -> go.Figure:
    """Chosen columns of the table as curves over positions: each dimension is a sine or cosine wave."""
    p, d = table.shape
    waves = []
    for i, dim in enumerate(dims):
        if 0 <= dim < d:
            kind = "sin" if dim % 2 == 0 else "cos"
            wavelength = 2 * np.pi * 10000 ** ((dim - dim % 2) / d)
            waves.append(dict(type="scatter", x=np.arange(p), y=table[:, dim], mode="lines",
                              name=f"dim {dim} ({kind}, wavelength {wavelength:.0f})",
                              line=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)], width=2)))
    # the legend above the plot, under the title at the figure's top (room for it to wrap on a phone): below
    # the plot it would sit on the axis title
    fig = go.Figure(waves, dict(title=top_title("Waves of chosen dimensions"), font=FONT, height=480,
                                margin=dict(l=10, r=10, t=130, b=10), xaxis=dict(title="position"),
                                yaxis=dict(title="value"),
                                legend=dict(orientation="h", x=0.0, y=1.0, yanchor="bottom", font=dict(size=11))))
    return fit_margins(fig)


def pe_similarity(table: np.ndarray, step: int = 1) -> go.Figure:
    """Cosine similarity between the encodings of every pair of positions (``step``: the table's rows are every
    ``step``-th position)."""
    sim = cosine_similarity(table)
    at = np.arange(len(sim)) * step
    heat = dict(type="heatmap", z=sim, x=at, y=at, colorscale=DIVERGING, zmid=0, zmin=-1, zmax=1,
                colorbar=dict(thickness=12), hovertemplate="position %{y} vs %{x}<br>cosine %{z:.3f}<extra></extra>")
    fig = go.Figure(heat, dict(title=dict(text="Similarity between positions (cosine)", x=0.0), font=FONT,
                               height=420, margin=dict(l=10, r=10, t=45, b=10), xaxis=dict(title="position"),
                               yaxis=dict(title="position", autorange="reversed")))
    return fit_margins(fig)


def norms_figure(tokens: Sequence[str], token_norms: np.ndarray, pe_norms: np.ndarray,
                 vocab_norms: np.ndarray | None = None) -> go.Figure:
    """Length of each scaled token embedding (``‖E[x]‖·√d_model``) beside the length of its positional encoding."""
    labels = unique_labels(tokens)
    x = list(range(len(tokens)))
    traces = [dict(type="bar", x=x, y=token_norms, name="token embedding × √d_model", marker=dict(color="#3182bd"),
                   customdata=[escape(t) for t in tokens],
                   hovertemplate="<b>%{customdata}</b><br>‖embedding‖·√d = %{y:.2f}<extra></extra>"),
              dict(type="bar", x=x, y=pe_norms, name="positional encoding", marker=dict(color="#fd8d3c"),
                   hovertemplate="position %{x}<br>‖PE‖ = %{y:.2f}<extra></extra>")]
    shapes = []
    top = max(float(np.max(token_norms, initial=0.0)), float(np.max(pe_norms, initial=0.0)))
    if vocab_norms is not None and len(vocab_norms):  # a dotted line named in the legend (a label on the line
        median = float(np.median(vocab_norms))  # itself would sit on the bars)
        top = max(top, median)
        shapes.append(hline(median, line=dict(dash="dot", color="#555"), name="median"))
        traces.append(dict(type="scatter", x=[None], y=[None], mode="lines", line=dict(dash="dot", color="#555"),
                           name=f"median token embedding, whole vocabulary ({median:.1f})"))
    return fit_margins(go.Figure(traces, dict(
        barmode="group", title=top_title("How large the encodings are next to the token embeddings"),
        font=FONT, height=400, margin=dict(l=10, r=10, t=115, b=10), shapes=shapes,
        xaxis=named_axis(labels, "source token", tickangle=-60 if len(tokens) > 8 else 0),
        yaxis=dict(title="vector length (L2)", range=[0, 1.15 * max(top, 1e-9)]),  # room above the bars
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0.0))))
