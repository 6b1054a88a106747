"""One head pick (``app.drawing.analysis.one_head``): one head of a layer or the mean over its heads, with its
title and name, the same wherever a view picks one (the page's heatmap, the offline page, a notebook)."""

from __future__ import annotations

import html

import numpy as np
import pytest

pytest.importorskip("plotly")

from app.drawing.analysis import head_title, one_head  # noqa: E402

RNG = np.random.default_rng(0)
ATTN = RNG.random((3, 4, 5, 6)).astype(np.float32)  # (L, H, Q, K)


@pytest.mark.parametrize("head", [None, "mean"])
def test_the_mean_over_heads(head):
    picked = one_head(ATTN, "cross", 2, head)
    np.testing.assert_allclose(picked.weights, sum(ATTN[1, h] for h in range(4)) / 4, rtol=1e-6)
    assert picked.title == "Cross-attention · layer 2 · mean over heads" and picked.name == "cross-L2-mean"


@pytest.mark.parametrize("head", [3, "3", np.int64(3)])
def test_one_head_by_its_number_from_one(head):
    picked = one_head(ATTN, "encoder", 3, head)
    assert np.array_equal(picked.weights, ATTN[2, 2])
    assert picked.title.endswith("· layer 3 · head 3") and picked.name == "encoder-L3-H3"
    assert head_title(head) == "head 3" and head_title(None) == head_title("mean") == "mean over heads"


@pytest.mark.parametrize(("layer", "head", "says"), [(0, 1, "layer counts from 1 to 3"), (4, 1, "layer"),
                                                     (True, 1, "layer"), (1, 0, "head counts from 1 to 4"),
                                                     (1, 5, "head"), (1, "x", "head"), (1, True, "head"),
                                                     (1, "٣", "head"), (1, 1.0, "head")])
def test_a_layer_or_head_the_attention_lacks_says_what_there_is(layer, head, says):
    with pytest.raises(ValueError, match=says):
        one_head(ATTN, "cross", layer, head)


def test_the_page_the_offline_page_and_a_notebook_pick_alike(tr):
    """The offline page's chart, a notebook's SVG and the builder's figure for the same pick: its numbers (against
    the analysis' own weights) and its title."""
    from app import notebook, report
    from app.parts import heatmap

    text = "a man rides a red bike ."
    a = report.analysis_for(tr.translate(text, beam_size=1), tr, text)
    for kind, layer, head in (("cross", 1, "mean"), ("decoder", 2, "2"), ("encoder", 1, "1")):
        expected = a.attention(kind)[layer - 1].mean(axis=0) if head == "mean" else \
            a.attention(kind)[layer - 1, int(head) - 1]
        chart = heatmap.chart(a, kind, layer, head)
        np.testing.assert_allclose(np.asarray(chart.figure.data[0].z, dtype=np.float32), expected, rtol=1e-6)
        title = one_head(a.attention(kind), kind, layer, head).title
        assert chart.figure.layout.title.text == title
        svg = notebook.heatmap_html(a, kind, layer, None if head == "mean" else int(head))
        assert html.escape(title, quote=False) in svg
