"""The all-heads grid: every head of one attention type tiled layers x heads on one colour scale, with
framed blocks, hover text and (up to a size) invisible click targets that open a head. No Streamlit here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .analysis import KIND_NAMES, escape
from .figures import ATTENTION_SCALE
from .layout import FONT, TICKS_DRAWN, colour_bar, fit_margins

# what the browser must draw stays bounded: tokens on every cell cost ~34 bytes a cell, a marker a cell
# ~54 (a 4 x 4-head grid of a 39-piece sentence was 1.3 MB of chart data with its markers, of 60 pieces 2 MB)
GRID_HOVER_CELLS = 12_000  # above this many cells the grid's hover names no tokens (the weight only)
GRID_CLICK_CELLS = 10_000  # up to this many weights a click on the grid picks a head (one SVG marker each)
# and at the most this many weights in one grid (about 8 bytes each of chart data: 1.7 MB): a model of many layers
# x heads shows some of its layers at a time (NLLB-200-3.3B's 24 x 16 heads of a 60 x 60 window were 1.4M weights,
# 11 MB of chart data; the shipped 3 x 4 heads of the same window 43,200 weights)
GRID_MOST_CELLS = 200_000


def grid_layers(shape: tuple[int, int, int, int]) -> int:
    """How many layers of attention of ``shape`` ``(L, H, Q, K)`` one grid shows at a time (at most
    ``GRID_MOST_CELLS`` weights; one layer at least)."""
    per_layer = max(1, shape[1] * shape[2] * shape[3])
    return max(1, min(shape[0], GRID_MOST_CELLS // per_layer))


def grid_blocks(shape: tuple[int, int, int, int]) -> tuple[int, int, int]:
    """(gap, block height, block width) of the tiled head grid for attention of ``shape`` ``(L, H, Q, K)``."""
    q, k = shape[2], shape[3]
    gap = max(1, round(0.08 * max(q, k)))
    return gap, q + gap, k + gap


def grid_block(z: np.ndarray, shape: tuple[int, int, int, int], layer: int, head: int) -> np.ndarray:
    """The ``(Q, K)`` block of one head (0-based) out of the tiled grid's ``z``."""
    gap, bh, bw = grid_blocks(shape)
    return z[layer * bh: layer * bh + shape[2], head * bw: head * bw + shape[3]]


def head_grid(attn: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str], kind: str,
              highlight: tuple[int, int] | None = None, zrange: tuple[float, float] | None = None,
              value_name: str = "weight", first_layer: int = 0) -> go.Figure:
    """All heads of one attention type, ``(layers, heads, Q, K)``: a layers x heads grid on one shared colour
    scale (``zrange``, default 0 to the largest weight; ``value_name`` names the numbers, e.g. "norm").

    Drawn as one tiled heatmap (blocks separated by empty cells), which is many times cheaper to build and
    draw than a subplot per head; :func:`grid_block` cuts one head back out. Up to ``GRID_CLICK_CELLS`` weights,
    a second trace of invisible markers names the tokens on hover and lets a click pick a head; above that,
    a coarser lattice of invisible markers over each block keeps clicks working (:func:`grid_pick` reads the
    selection). Every head's block has a thin frame. ``first_layer``: the model's layer (0-based) of the first
    row, when ``attn`` holds some of its layers (labels, hover and clicks name the model's layers; ``highlight``
    counts from the first row).
    """
    n_layers, n_heads, q, k = attn.shape
    gap, bh, bw = grid_blocks(attn.shape)
    rows, cols = n_layers * bh - gap, n_heads * bw - gap
    z = np.full((rows, cols), np.nan, dtype=np.float32)
    for layer in range(n_layers):
        for head in range(n_heads):
            z[layer * bh: layer * bh + q, head * bw: head * bw + k] = attn[layer, head]
    zmin, zmax = zrange if zrange is not None else (0.0, max(float(attn.max()), 1e-9))
    heat = dict(z=z, zmin=zmin, zmax=zmax, colorscale=ATTENTION_SCALE, hoverongaps=False,
                colorbar=colour_bar(value_name))
    clickable = attn.size <= GRID_CLICK_CELLS
    if clickable:  # the hover label and the click come from invisible markers on the cells
        heat.update(hoverinfo="skip")
    elif z.size <= GRID_HOVER_CELLS:
        row_layer = np.repeat(np.arange(rows) // bh, cols).reshape(rows, cols)
        col_head = np.tile(np.arange(cols) // bw, (rows, 1))
        qpos, kpos = np.arange(rows) % bh, np.arange(cols) % bw
        qtext = np.asarray([escape(t) for t in query_tokens] + [""] * gap, dtype=object)
        ktext = np.asarray([escape(t) for t in key_tokens] + [""] * gap, dtype=object)
        custom = np.empty((rows, cols, 4), dtype=object)
        custom[:, :, 0] = row_layer + 1 + first_layer
        custom[:, :, 1] = col_head + 1
        custom[:, :, 2] = qtext[qpos][:, None]
        custom[:, :, 3] = ktext[kpos][None, :]
        heat.update(customdata=custom, hovertemplate="layer %{customdata[0]} · head %{customdata[1]}<br>query "
                    "<b>%{customdata[2]}</b><br>key <b>%{customdata[3]}</b><br>" + value_name
                    + " %{z:.3f}<extra></extra>")
    else:
        heat.update(hovertemplate=value_name + " %{z:.3f}<extra></extra>")
    targets = (_grid_cells(attn, query_tokens, key_tokens, bh, bw, value_name, first_layer) if clickable else
               _grid_targets(attn.shape, bh, bw, first_layer=first_layer))
    # a frame around every head, so one sees where each block ends
    shapes = [dict(type="rect", x0=head * bw - 0.5, x1=head * bw + k - 0.5, y0=layer * bh - 0.5,
                   y1=layer * bh + q - 0.5, line=dict(color="#9aa5b1", width=1), layer="above",
                   name=f"frame L{first_layer + layer + 1} H{head + 1}") for layer in range(n_layers)
              for head in range(n_heads)]
    if highlight is not None:
        layer, head = highlight
        shapes.append(dict(type="rect", x0=head * bw - 0.5 - gap / 2, x1=head * bw + k - 0.5 + gap / 2,
                           y0=layer * bh - 0.5 - gap / 2, y1=layer * bh + q - 0.5 + gap / 2,
                           line=dict(color="#d62728", width=3), name="picked"))
    block_px = max(90, min(260, 1000 // max(n_heads, 1)))
    height = 90 + n_layers * block_px * max(0.4, min(2.0, q / max(k, 1)))
    return fit_margins(go.Figure([dict(type="heatmap", **heat), targets], dict(
        shapes=shapes,
        title=dict(text=f"{KIND_NAMES.get(kind, kind)}: every head (rows = layers, columns = heads)", x=0.0),
        font=FONT, height=int(height), margin=dict(l=10, r=10, t=70, b=10), plot_bgcolor="white",
        xaxis=dict(tickmode="array", tickvals=[h * bw + (k - 1) / 2 for h in range(n_heads)],
                   ticktext=[f"head {h + 1}" for h in range(n_heads)], side="top", showgrid=False, zeroline=False,
                   **TICKS_DRAWN),
        yaxis=dict(tickmode="array", tickvals=[layer * bh + (q - 1) / 2 for layer in range(n_layers)],
                   ticktext=[f"layer {first_layer + layer + 1}" for layer in range(n_layers)], autorange="reversed",
                   showgrid=False, zeroline=False),
        meta=dict(grid=list(attn.shape), first_layer=first_layer),
    )))


def _grid_cells(attn: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str], bh: int,
                bw: int, value_name: str = "weight", first_layer: int = 0) -> dict:
    """Invisible markers on every cell of the tiled grid: they carry the hover label and make a click choose a
    head (plotly heatmaps cannot be selected; scatter points can). ``customdata``: layer, head (1-based), query
    token, key token, weight."""
    layer, head, qi, ki = np.indices(attn.shape).reshape(4, -1)  # (4, L*H*Q*K)
    qtext = np.asarray([escape(t) for t in query_tokens], dtype=object)
    ktext = np.asarray([escape(t) for t in key_tokens], dtype=object)
    custom = np.empty((layer.size, 5), dtype=object)
    custom[:, 0], custom[:, 1], custom[:, 2], custom[:, 3] = layer + 1 + first_layer, head + 1, qtext[qi], ktext[ki]
    custom[:, 4] = np.round(attn.reshape(-1).astype(float), 4)  # (L*H*Q*K,)
    invisible = dict(marker=dict(opacity=0))
    return dict(type="scatter", x=head * bw + ki, y=layer * bh + qi, mode="markers", customdata=custom,
                marker=dict(symbol="square", size=10, opacity=0), selected=invisible, unselected=invisible,
                hovertemplate="layer %{customdata[0]} · head %{customdata[1]}<br>query <b>%{customdata[2]}</b>"
                              "<br>key <b>%{customdata[3]}</b><br>" + value_name
                              + " %{customdata[4]:.3f}<extra></extra>",
                showlegend=False, name="cells")


def _grid_targets(shape: tuple[int, int, int, int], bh: int, bw: int, per_side: int = 8,
                  first_layer: int = 0) -> dict:
    """Click targets for grids too large for one marker per cell: an invisible lattice of at most
    ``per_side`` x ``per_side`` markers over each head's block, ``customdata`` = layer, head (1-based)."""
    n_layers, n_heads, q, k = shape
    rows = np.unique(np.linspace(0, q - 1, min(q, per_side)).round().astype(int))
    cols = np.unique(np.linspace(0, k - 1, min(k, per_side)).round().astype(int))
    layer, head, r, c = (a.reshape(-1) for a in np.meshgrid(np.arange(n_layers), np.arange(n_heads), rows, cols,
                                                              indexing="ij"))  # each (L*H*len(rows)*len(cols),)
    # (N, 2) as plain lists: plotly sends a numpy array as a typed array, whose rows the page's selection event
    # does not pass on, so a click picked nothing
    custom = np.stack([layer + 1 + first_layer, head + 1], axis=1).tolist()
    size = max(10, min(40, int(900 / max(n_heads * per_side, 1))))
    invisible = dict(marker=dict(opacity=0))
    return dict(type="scatter", x=head * bw + c, y=layer * bh + r, mode="markers", customdata=custom,
                marker=dict(symbol="square", size=size, opacity=0), selected=invisible, unselected=invisible,
                hovertemplate="layer %{customdata[0]} · head %{customdata[1]}: click to open<extra></extra>",
                showlegend=False, name="heads")


def grid_pick(selection: dict | None) -> tuple[int, int] | None:
    """The (layer, head), 1-based, of the first point of a Streamlit plotly selection on :func:`head_grid`."""
    for point in (selection or {}).get("points", []):
        custom = point.get("customdata")
        if isinstance(custom, (list, tuple)) and len(custom) >= 2:
            return int(custom[0]), int(custom[1])
    return None
