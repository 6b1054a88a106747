"""Every figure builder the views use, built from a real (tiny) translation: each labelled axis has exactly as many
labels as data points, and each label names the right piece with the right number (one numbering everywhere:
source pieces and output steps from 1, the decoder input from 0, so decoder input t is output step t's piece)."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from app.analysis import inference, probes
from app.drawing import analysis, contributions, figures, grid, svg
from app.drawing import positional as pe_figures
from app.drawing.analysis import KINDS, first_numbers

torch.set_num_threads(1)

TEXT = "a man rides a bike on the street with a dog"


@pytest.fixture(scope="module")
def result(tr):
    return inference.analyse(tr, TEXT, inference.DecodeSettings(beam_size=2, max_len_a=1.0, max_len_b=4))


def oracle(result, axis: str) -> list[tuple[str, int]]:
    """(piece, number) of each position of an axis, from the translation itself (not from the app's labels)."""
    if axis == "source":
        return [(t, i) for i, t in enumerate(result.source_tokens, 1)]
    if axis == "output":  # output step t (from 1) produced target_tokens[t - 1]
        return [(t, i) for i, t in enumerate(result.target_tokens, 1)]
    assert axis == "decoder input"  # <s> is 0; decoder input t is what output step t produced
    return [("<s>", 0)] + [(t, i) for i, t in enumerate(result.target_tokens[:-1], 1)]


AXES = {"encoder": ("source", "source"), "decoder": ("output", "decoder input"), "cross": ("output", "source")}


def check_labels(labels: list[str], expected: list[tuple[str, int]]) -> None:
    """Each label is its piece, with ``·number`` when the piece occurs more than once on the axis."""
    assert len(labels) == len(expected)
    pieces = [p for p, _ in expected]
    for label, (piece, number) in zip(labels, expected):
        text = html.unescape(label)
        if pieces.count(piece) > 1:
            assert text == f"{piece}·{number}", (text, piece, number)
        else:
            assert text == piece, (text, piece)


def points(fig, axis: str) -> set[float]:
    """Positions of the data points along ``axis`` ("x" or "y") over the traces drawn on it."""
    found: set[float] = set()
    for trace in fig.data:
        values = getattr(trace, axis, None)
        if trace.type == "heatmap":
            z = np.asarray(trace.z)
            n = z.shape[1] if axis == "x" else z.shape[0]
            values = values if values is not None else list(range(n))
            assert len(values) == n
        if values is not None:
            found |= {float(v) for v in values if v is not None}
    return found


def check_axis(fig, axis: str, expected: list[tuple[str, int]] | None = None) -> None:
    """A labelled axis: one label per data point, at the data points; and the labels name ``expected``."""
    layout_axis = fig.layout[f"{axis}axis"]
    ticks, text = list(layout_axis.tickvals), list(layout_axis.ticktext)
    assert len(ticks) == len(text)
    assert {float(t) for t in ticks} == points(fig, axis), f"{axis}: labels at {ticks}"
    if expected is not None:
        check_labels(text, expected)


def test_the_tiny_translation_has_what_the_checks_need(result):
    assert len(result.target_tokens) >= 3 and len(result.source_tokens) >= 3
    assert result.decoder_input_tokens[1:] == result.target_tokens[:-1]  # the oracle's convention
    assert analysis.first_numbers("decoder") == (1, 0)


@pytest.mark.parametrize("kind", KINDS)
def test_heatmaps_label_every_row_and_column_with_its_piece(result, kind):
    queries, keys = result.axes(kind)
    qf, kf = first_numbers(kind)
    weights = result.attention(kind)[0, 0]
    fig = figures.attention_heatmap(weights, queries, keys, query_first=qf, key_first=kf)
    check_axis(fig, "y", oracle(result, AXES[kind][0]))
    check_axis(fig, "x", oracle(result, AXES[kind][1]))
    custom = np.asarray(fig.data[0].customdata)  # hover numbers as the labels
    assert [int(n) for n in custom[:, 0, 2]] == [n for _, n in oracle(result, AXES[kind][0])]
    assert [int(n) for n in custom[0, :, 3]] == [n for _, n in oracle(result, AXES[kind][1])]
    # a window of it: the labels keep the whole axis' numbers
    cut = figures.attention_heatmap(weights[1:, 1:], queries[1:], keys[1:], query_offset=1, key_offset=1,
                                    query_first=qf, key_first=kf)
    check_axis(cut, "y", oracle(result, AXES[kind][0])[1:])
    check_axis(cut, "x", oracle(result, AXES[kind][1])[1:])
    assert [int(n) for n in np.asarray(cut.data[0].customdata)[0, :, 3]] == \
        [n for _, n in oracle(result, AXES[kind][1])[1:]]


@pytest.mark.parametrize("kind", KINDS)
def test_svg_heatmap_labels_every_row_and_column_with_its_piece(result, kind):
    queries, keys = result.axes(kind)
    qf, kf = first_numbers(kind)
    weights = result.attention(kind)[0, 0]
    root = ET.fromstring(svg.heatmap_svg(weights, queries, keys, title="t", query_first=qf, key_first=kf))
    ns = {"s": "http://www.w3.org/2000/svg"}
    cells = root.findall("s:g[@class='cells']/s:rect", ns)
    rows, cols = len({c.get("y") for c in cells}), len({c.get("x") for c in cells})
    ylab = [t.find("s:title", ns).tail for t in root.findall("s:text[@class='ytick']", ns)]
    xlab = [t.find("s:title", ns).tail for t in root.findall("s:text[@class='xtick']", ns)]
    assert (len(ylab), len(xlab)) == (rows, cols) == weights.shape
    check_labels(ylab, oracle(result, AXES[kind][0]))
    check_labels(xlab, oracle(result, AXES[kind][1]))
    hover = cells[0].find("s:title", ns).text  # "query (number) → key (number): weight …"
    numbers = [int(n) for n in re.findall(r"\((\d+)\)", hover)]
    assert numbers == [oracle(result, AXES[kind][0])[0][1], oracle(result, AXES[kind][1])[0][1]]


def test_attribution_share_labels_each_bar_with_the_piece_its_step_produced(result, tr):
    data = probes.attributions(tr, result, "input_x_gradient")
    src, tgt = data["source"], data["target"]
    share = np.abs(src).sum(1) / (np.abs(src).sum(1) + np.abs(tgt).sum(1))
    fig = contributions.attribution_share(share, result.target_tokens, 0)
    check_axis(fig, "x", oracle(result, "output"))
    for trace in fig.data:  # bar at step t: the piece step t produced, in its hover too
        assert list(trace.x) == list(range(1, len(result.target_tokens) + 1))
        assert [html.unescape(c) for c in trace.customdata] == result.target_tokens
    assert html.unescape(fig.layout.xaxis.ticktext[-1]).startswith(result.target_tokens[-1])  # the last bar too
    part = contributions.attribution_share(share[1:], result.target_tokens[1:], 1)  # a span starting at the 2nd step
    assert list(part.data[0].x) == list(range(2, len(result.target_tokens) + 1))
    check_axis(part, "x")


def test_step_topk_and_norms_figures_label_every_bar(result, tr):
    t = 1
    fig = figures.topk_figure(result.topk_tokens[t], result.topk_probs[t], 0)
    check_axis(fig, "y", None)
    assert [html.unescape(x) for x in fig.layout.yaxis.ticktext] == result.topk_tokens[t]
    fig = figures.step_cross_figure(result.cross[0][:, t, :], result.source_tokens, result.target_tokens[t])
    check_axis(fig, "x", oracle(result, "source"))
    check_axis(fig, "y", None)
    assert len(fig.layout.yaxis.ticktext) == result.cross.shape[1] + 1  # the mean and each head
    norms = probes.embedding_norms(tr, result.source_ids)
    fig = pe_figures.norms_figure(result.source_tokens, norms, np.ones(len(norms)), np.ones(5))
    check_axis(fig, "x", oracle(result, "source"))


def test_mask_figures_number_the_decoder_input_from_zero(result, tr):
    masks = probes.mask_arrays(tr, result)
    dec, src = result.decoder_input_tokens, result.source_tokens
    fig = figures.mask_figure(masks["decoder"], dec, dec, "m", query_first=0, key_first=0)
    check_axis(fig, "x", oracle(result, "decoder input"))
    check_axis(fig, "y", oracle(result, "decoder input"))
    fig = figures.mask_figure(masks["cross"], dec, src, "m", query_first=0, key_first=1)
    check_axis(fig, "x", oracle(result, "source"))


@pytest.mark.parametrize("kind", KINDS)
def test_evolution_and_lens_figures_label_their_pieces(result, kind):
    queries, keys = result.axes(kind)
    qf, kf = first_numbers(kind)
    w = result.attention(kind)[0, 0]
    fig = figures.evolution_figure([("a", w), ("b", w)], queries, keys, "t", query_first=qf, key_first=kf)
    for name in ("xaxis", "xaxis2"):
        assert len(fig.layout[name].ticktext) == w.shape[1] == len(fig.layout[name].tickvals)
        check_labels(list(fig.layout[name].ticktext), oracle(result, AXES[kind][1]))
    check_labels(list(fig.layout.yaxis.ticktext), oracle(result, AXES[kind][0]))
    lens = np.random.default_rng(0).random((2, len(result.target_tokens)))  # layers x output steps
    fig = figures.attention_heatmap(lens, ["layer 1", "layer 2"], result.target_tokens)
    check_axis(fig, "x", oracle(result, "output"))


@pytest.mark.parametrize("kind", KINDS)
def test_lines_and_grid_name_every_piece_and_head(result, kind):
    queries, keys = result.axes(kind)
    qf, kf = first_numbers(kind)
    attn = result.attention(kind)
    fig = figures.attention_lines(attn[0], queries, keys, query_first=qf, key_first=kf)
    left, right = [t for t in fig.data if t.mode == "markers+text"]
    assert len(left.text) == len(left.y) == len(queries) and len(right.text) == len(right.y) == len(keys)
    check_labels(list(left.text), oracle(result, AXES[kind][0]))  # repeats numbered, as every chart (issue 57 §7)
    check_labels(list(right.text), oracle(result, AXES[kind][1]))
    assert [int(re.match(r"query (\d+)", h).group(1)) for h in left.hovertext] == \
        [n for _, n in oracle(result, AXES[kind][0])]
    assert [int(re.match(r"key (\d+)", h).group(1)) for h in right.hovertext] == \
        [n for _, n in oracle(result, AXES[kind][1])]
    fig = grid.head_grid(attn, queries, keys, kind)
    assert len(fig.layout.xaxis.ticktext) == len(fig.layout.xaxis.tickvals) == attn.shape[1]
    assert len(fig.layout.yaxis.ticktext) == len(fig.layout.yaxis.tickvals) == attn.shape[0]


def test_size_chart_leaves_room_above_the_bars_and_names_the_median_in_the_legend(result, tr):
    norms = probes.embedding_norms(tr, result.source_ids)
    pe = np.full(len(norms), 4.0)
    vocab = np.array([1.0, 2.0, float(norms.max()) * 0.99])
    fig = pe_figures.norms_figure(result.source_tokens, norms, pe, vocab)
    tallest = max(float(norms.max()), 4.0)
    assert fig.layout.yaxis.range[1] >= 1.1 * tallest  # no bar touches the top
    assert not fig.layout.annotations  # no label drawn over the bars: the line is named in the legend
    legend = [t.name for t in fig.data if t.showlegend is not False and t.name]
    assert any(name.startswith("median token embedding") for name in legend)
    assert [s.y0 for s in fig.layout.shapes] == [float(np.median(vocab))]


def test_a_large_grids_click_targets_reach_the_page_as_lists():
    """Above GRID_CLICK_CELLS the grid's click targets carry (layer, head) as plain lists: plotly sends a numpy
    array as a typed array (``bdata``), whose rows the page's selection event drops, so a click opened nothing."""
    import json

    from app.drawing import grid

    attn = np.full((2, 4, 60, 40), 1 / 40)  # 19,200 weights: the lattice of click targets
    assert attn.size > grid.GRID_CLICK_CELLS
    targets = json.loads(grid.head_grid(attn, [f"q{i}" for i in range(60)], [f"k{j}" for j in range(40)],
                                        "cross").to_json())["data"][1]
    assert isinstance(targets["customdata"], list) and targets["customdata"][0] == [1, 1]
    assert grid.grid_pick({"points": [{"customdata": targets["customdata"][-1]}]}) == (2, 4)
