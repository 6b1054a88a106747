"""A scrolling chart's frozen column of row labels (``app.drawing.row_labels``, ``svg.heatmap_svg(rows_only=True)``):
the same labels at the same pixels as the chart's own, computed from the figures (no browser), and none of the
chart's data sent twice. The page keeps it at the box's left edge: ``tests/app/test_row_labels_browser.py``."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import plotly.graph_objects as go
import pytest

from app.drawing import figures, layout, row_labels, svg
from app.views.heads_across_the_test_set import importance_figure

NS = {"s": "http://www.w3.org/2000/svg"}
QUERIES = ["▁Ein", "▁junges", "▁Mädchen", "▁rennt", "▁mit", "▁ihrem", "▁Hund", "▁im", "▁Park", "▁ihrem", "."]
KEYS = ["▁A", "▁young", "▁girl", "▁is", "▁running", "▁with", "▁her", "▁dog", "▁in", "▁the", "▁park", ".", "</s>"]


def weights(q: int, k: int, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).random((q, k))
    return w / w.sum(-1, keepdims=True)


def plot_area(fig: go.Figure, push: float = 0.0) -> tuple[float, float]:
    """(top, height) in px of the plot area of a figure of fixed height and margins (``push``: what plotly's automargin
    adds at the bottom, the same for two figures with the same x labels)."""
    m = fig.layout.margin
    return m.t, fig.layout.height - m.t - m.b - push


def own_row_centres(fig: go.Figure) -> list[float]:
    """Where the chart's own rows lie, as fractions of the plot height from its top: a heatmap of ``q`` rows at
    positions 0..q-1 on a reversed axis fills the height with row i the i-th from the top (plotly draws each cell
    from half way to its neighbour above to half way to the one below)."""
    q = len(fig.data[0].z)
    return [(i + 0.5) / q for i in range(q)]


def labels_row_centres(labels: go.Figure, axis: str = "yaxis") -> list[float]:
    """Where the labels figure puts each tick, as fractions of the plot height from its top, from its axis' range
    (plotly: the range's first value at the bottom)."""
    ax = labels.layout[axis]
    bottom, top = ax.range
    values = list(ax.tickvals) if ax.tickvals is not None else list(range(len(ax.categoryarray)))
    return [(v - top) / (bottom - top) for v in values]


def test_the_heatmaps_row_labels_fall_on_its_rows():
    fig = figures.attention_heatmap(weights(len(QUERIES), len(KEYS)), QUERIES, KEYS, title="Cross · layer 2",
                                    query_title="output token", key_title="source token")
    frozen = row_labels.row_labels(fig)
    assert frozen is not None
    labels = frozen.figure
    assert list(labels.layout.yaxis.ticktext) == list(fig.layout.yaxis.ticktext)  # the same names...
    assert "▁ihrem·6" in labels.layout.yaxis.ticktext  # (a repeat keeps its number)
    assert list(labels.layout.yaxis.tickvals) == list(fig.layout.yaxis.tickvals)
    assert labels.layout.yaxis.title.text == fig.layout.yaxis.title.text
    # ... in the same place: the same height, margins and x labels (so the same plot area), rows at the same fractions
    for name in ("height", "margin", "title", "font"):
        assert labels.layout[name] == fig.layout[name], name
    assert labels.layout.xaxis.ticktext == fig.layout.xaxis.ticktext
    assert labels.layout.xaxis.tickangle == fig.layout.xaxis.tickangle
    top, height = plot_area(fig)
    own = [top + f * height for f in own_row_centres(fig)]
    frozen_px = [top + f * height for f in labels_row_centres(labels)]
    assert frozen_px == pytest.approx(own, abs=0.01)
    assert labels.layout.xaxis.range == (-0.5, len(KEYS) - 0.5)  # every column's label drawn, as in the chart
    # no data sent twice: one empty cell keeps the colour bar's room
    (cell,) = labels.data
    assert cell.type == "heatmap" and list(map(list, cell.z)) == [[None]]
    assert cell.colorbar == fig.data[0].colorbar and cell.customdata is None
    assert len(labels.to_json()) < len(go.Figure(layout=fig.layout).to_json()) + 800  # the layout and little more
    assert frozen.subplot == "xy" and frozen.title == "g-ytitle"
    assert labels.layout.meta == {row_labels.ROW_LABELS: True}  # marked, for whoever reads the page's figures
    # the band is at least as wide as the margin the longest label and the axis title need
    assert frozen.width >= layout.text_px("▁Mädchen", 12) + 30


def test_a_grid_of_named_categories_and_several_panels():
    """Head importance: layers L1-L4 as category names, three panels sharing rows; the frozen rows are the leftmost
    panel's (the others show none)."""
    rng = np.random.default_rng(1)
    importance = {k: rng.random((4, 6)).tolist() for k in ("encoder", "decoder", "cross")}
    fig = importance_figure(importance)
    frozen = row_labels.row_labels(fig)
    assert frozen is not None and frozen.subplot == "xy"
    labels = frozen.figure
    assert list(labels.layout.yaxis.categoryarray) == ["L1", "L2", "L3", "L4"]
    assert labels.layout.yaxis.type == "category"
    assert labels_row_centres(labels) == pytest.approx([(i + 0.5) / 4 for i in range(4)])  # L1 on top (reversed)
    assert [labels.layout[f"xaxis{s}"].categoryarray for s in ("", "2", "3")] == [tuple(f"H{h}" for h in
                                                                                      range(1, 7))] * 3
    assert len(labels.data) == 3 and all(list(map(list, t.z)) == [[None]] for t in labels.data)


def test_several_snapshots_share_the_first_panels_rows():
    panels = [(f"step {s}", weights(len(QUERIES), len(KEYS), s)) for s in (80, 400, 1200)]
    fig = figures.evolution_figure(panels, QUERIES, KEYS, "Cross · layer 2")
    frozen = row_labels.row_labels(fig)
    assert frozen is not None and frozen.subplot == "xy"
    assert labels_row_centres(frozen.figure) == pytest.approx(own_row_centres(fig))
    assert frozen.figure.layout.coloraxis == fig.layout.coloraxis  # the shared colour bar keeps its room


def test_panels_in_two_rows_each_keep_their_labels_and_no_band_covers_them():
    """A 47-piece sentence's snapshots go two a row, each row with its labels (issue 68: its labels were unreadable);
    one frozen band would cover the second row's labels with its white, so there is none."""
    keys = [f"k{i}" for i in range(47)]
    panels = [(f"step {s}", weights(len(QUERIES), len(keys), s)) for s in (80, 400, 1200, 2400)]
    fig = figures.evolution_figure(panels, QUERIES, keys, "Cross · layer 2")
    assert [fig.layout[f"yaxis{n}"].showticklabels for n in ("", 2, 3, 4)] == [True, False, True, False]
    assert fig.layout.yaxis.domain != fig.layout.yaxis3.domain  # two rows
    assert row_labels.row_labels(fig) is None


def test_a_legend_entry_stays_and_a_chart_of_other_data_gets_none():
    fig = figures.mask_figure(np.tril(np.ones((5, 5))), QUERIES[:5], QUERIES[:5], "Causal mask")
    frozen = row_labels.row_labels(fig)
    assert frozen is not None
    assert [t.name for t in frozen.figure.data[1:]] == [t.name for t in fig.data[1:]]  # the legend, the same
    # a bar chart's or a scatter's room depends on its data: no frozen column (it scrolls as before)
    assert row_labels.row_labels(figures.topk_figure(["▁a", "▁the"], np.array([0.6, 0.3]), 0)) is None
    assert row_labels.row_labels(go.Figure(go.Scatter(x=[0, 1], y=[2, 3]))) is None
    points = go.Scatter(x=np.arange(3), y=np.arange(3))  # numpy arrays, as the positional encoding's figures hold
    assert row_labels.row_labels(go.Figure([go.Heatmap(z=np.ones((3, 4))), points])) is None


def test_the_pictures_band_has_its_row_labels_where_the_picture_has_them():
    w = weights(len(QUERIES), len(KEYS))
    args = dict(title="Cross · layer 2", query_title="output token (query = the step producing it)",
                key_title="source token", query_offset=3)
    picture = ET.fromstring(svg.heatmap_svg(w, QUERIES, KEYS, **args))
    band = ET.fromstring(svg.heatmap_svg(w, QUERIES, KEYS, rows_only=True, **args))
    ticks = [(t.get("x"), t.get("y"), t.get("font-size"), "".join(t.itertext()))
             for t in picture.findall("s:text[@class='ytick']", NS)]
    assert ticks == [(t.get("x"), t.get("y"), t.get("font-size"), "".join(t.itertext()))
                     for t in band.findall("s:text[@class='ytick']", NS)]
    assert [t[3] for t in ticks][:2] == ["▁Ein▁Ein", "▁junges▁junges"]  # tooltip then label: the token itself
    assert "▁ihrem·9" in "".join(t[3] for t in ticks)  # numbered from the window's start, as the picture
    title = [(t.get("transform"), t.text) for t in picture.findall("s:text[@class='axis-title']", NS)][1]
    assert [(t.get("transform"), t.text) for t in band.findall("s:text[@class='axis-title']", NS)] == [title]
    # as tall as the picture, as wide as its margin: the cells start where the band ends, and it is white along them
    assert band.get("height") == picture.get("height")
    cells = picture.findall("s:g[@class='cells']/s:rect", NS)
    assert float(band.get("width")) == min(float(c.get("x")) for c in cells)
    (white,) = band.findall("s:rect", NS)
    assert white.get("fill") == "#ffffff"
    assert float(white.get("y")) == min(float(c.get("y")) for c in cells)
    assert float(white.get("y")) + float(white.get("height")) == pytest.approx(
        max(float(c.get("y")) + float(c.get("height")) for c in cells), abs=1.01)
    assert not band.findall("s:g", NS)  # no cell, no colour bar: the picture's data is not sent twice


def test_the_beam_trees_ranks_keep_the_charts_own_ranges():
    """The beam tree's rows are ranks, on axes whose ranges the figure sets: the frozen column keeps them, and each
    kind of node keeps its legend entry, with none of the tree's points."""
    import torch
    from conftest import tiny_model

    from app.views.beam_tree import tree_figure
    from transformer import beam_search

    model = tiny_model(0, src_vocab_size=12, tgt_vocab_size=12, d_model=16, n_heads=2, n_encoder_layers=1,
                       n_decoder_layers=1, d_ff=32, dropout=0.0, max_len=32)  # test_beam_tree's tiny model
    src = torch.tensor([[5, 6, 7, 3, 0]])
    tree = beam_search(model, src, beam_size=3, max_len_b=6, record_tree=True).trees[0]
    fig = tree_figure(tree, [f"▁p{n.token}" for n in tree.nodes])
    deepest = max(n for t in fig.data for n in (t.y or ()) if n is not None)
    assert tuple(fig.layout.yaxis.range) == (deepest + 0.6, -0.6)  # every node inside, the first rank on top
    frozen = row_labels.row_labels(fig)
    assert frozen is not None and frozen.subplot == "xy"
    labels = frozen.figure
    assert labels.layout.yaxis.range == fig.layout.yaxis.range and labels.layout.xaxis.range == fig.layout.xaxis.range
    assert labels.layout.yaxis.title.text == "rank within the step (by log-probability)"
    assert [(t.name, t.mode, t.showlegend) for t in labels.data] == [(t.name, t.mode, t.showlegend) for t in fig.data]
    assert all(list(t.x) == [None] and list(t.y) == [None] for t in labels.data)
    assert len(labels.to_json()) < len(go.Figure(layout=fig.layout).to_json()) + 2000
