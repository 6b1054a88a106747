"""A scrolling chart's frozen column of row labels: which plotly chart has one and which of its drawn pieces the page
copies into it (``app.drawing.row_labels``; the copy itself, at each label's row to the pixel, is checked in the
browser: ``tests/app/test_row_labels_browser.py``), and a picture's band (``svg.heatmap_svg(rows_only=True)``): the same
labels at the same pixels as the picture's own, with none of its data sent twice."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import plotly.graph_objects as go
import pytest

from app.drawing import figures, row_labels, svg
from app.views.heads_across_the_test_set import importance_figure

NS = {"s": "http://www.w3.org/2000/svg"}
QUERIES = ["▁Ein", "▁junges", "▁Mädchen", "▁rennt", "▁mit", "▁ihrem", "▁Hund", "▁im", "▁Park", "▁ihrem", "."]
KEYS = ["▁A", "▁young", "▁girl", "▁is", "▁running", "▁with", "▁her", "▁dog", "▁in", "▁the", "▁park", ".", "</s>"]


def weights(q: int, k: int, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).random((q, k))
    return w / w.sum(-1, keepdims=True)


def test_a_heatmap_keeps_its_rows_labels_and_axis_title():
    fig = figures.attention_heatmap(weights(len(QUERIES), len(KEYS)), QUERIES, KEYS, title="Cross · layer 2",
                                    query_title="output token", key_title="source token")
    assert row_labels.row_labels(fig) == row_labels.RowLabels("xy", "g-ytitle")


def test_a_grid_of_named_categories_and_several_panels():
    """Head importance: layers L1-L4 as category names, three panels sharing rows; the frozen rows are the leftmost
    panel's (the others show none)."""
    rng = np.random.default_rng(1)
    importance = {k: rng.random((4, 6)).tolist() for k in ("encoder", "decoder", "cross")}
    fig = importance_figure(importance)
    assert [fig.layout[f"yaxis{s}"].showticklabels for s in ("", "2", "3")] == [None, False, False]
    assert row_labels.row_labels(fig) == row_labels.RowLabels("xy", "g-ytitle")


def test_the_rows_of_the_leftmost_panel_whatever_its_axes_are_called():
    """A panel on the axes x2 / y2 drawn left of the one on x / y (whose labels sit at the right): the frozen rows are
    x2y2's, the title y2's."""
    fig = go.Figure([go.Heatmap(z=np.ones((3, 4)), xaxis="x", yaxis="y"),
                     go.Heatmap(z=np.ones((3, 4)), xaxis="x2", yaxis="y2")])
    fig.update_layout(xaxis=dict(domain=[0.55, 1.0]), xaxis2=dict(domain=[0.0, 0.45]), yaxis2=dict(anchor="x2"))
    assert row_labels.row_labels(fig) == row_labels.RowLabels("x2y2", "g-y2title")
    fig.update_layout(yaxis2=dict(showticklabels=False))  # the left panel names no rows: the other's are the rows
    assert row_labels.row_labels(fig) == row_labels.RowLabels("xy", "g-ytitle")


def test_several_snapshots_share_the_first_panels_rows():
    panels = [(f"step {s}", weights(len(QUERIES), len(KEYS), s)) for s in (80, 400, 1200)]
    fig = figures.evolution_figure(panels, QUERIES, KEYS, "Cross · layer 2")
    assert row_labels.row_labels(fig) == row_labels.RowLabels("xy", "g-ytitle")


def test_panels_in_two_rows_each_keep_their_labels_and_no_band_covers_them():
    """A 47-piece sentence's snapshots go two a row, each row with its labels (issue 68: its labels were unreadable);
    one frozen band would cover the second row's labels with its white, so there is none."""
    keys = [f"k{i}" for i in range(47)]
    panels = [(f"step {s}", weights(len(QUERIES), len(keys), s)) for s in (80, 400, 1200, 2400)]
    fig = figures.evolution_figure(panels, QUERIES, keys, "Cross · layer 2")
    assert [fig.layout[f"yaxis{n}"].showticklabels for n in ("", 2, 3, 4)] == [True, False, True, False]
    assert fig.layout.yaxis.domain != fig.layout.yaxis3.domain  # two rows
    assert row_labels.row_labels(fig) is None


def test_a_legend_entry_is_no_data_and_a_chart_of_other_data_gets_none():
    fig = figures.mask_figure(np.tril(np.ones((5, 5))), QUERIES[:5], QUERIES[:5], "Causal mask")
    assert [list(t.x) for t in fig.data[1:]] == [[None]] * (len(fig.data) - 1)  # legend entries, no points
    assert row_labels.row_labels(fig) == row_labels.RowLabels("xy", "g-ytitle")
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
    """The beam tree's rows are ranks, on axes whose ranges the figure sets (its points do not move them): it has a
    frozen column."""
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
    assert row_labels.row_labels(fig) == row_labels.RowLabels("xy", "g-ytitle")  # ranks at fixed ranges
