"""The server-built SVG heatmap (``app.drawing.svg``): its cells are the model's weights, its text is escaped, its
colours follow the plotly figure's scale."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from app.drawing import figures, svg

NS = {"s": "http://www.w3.org/2000/svg"}


def parse(text: str) -> ET.Element:
    return ET.fromstring(text)  # well-formed XML, or this raises


def cells(root: ET.Element) -> list[ET.Element]:
    return root.findall("s:g[@class='cells']/s:rect", NS)


def test_cells_are_the_models_weights_in_place(tr):
    ref = tr.translate("A man rides a red bike in the park.")
    w = ref.cross_attentions[-1].mean(0).numpy()  # (target, source)
    root = parse(svg.heatmap_svg(w, ref.target_tokens, ref.source_tokens, title="Cross · L2"))
    rects = cells(root)
    q, k = w.shape
    assert len(rects) == q * k
    xs = sorted({float(r.get("x")) for r in rects})
    ys = sorted({float(r.get("y")) for r in rects})
    assert (len(ys), len(xs)) == (q, k)
    for r in rects:  # each cell at its row and column, hover naming both tokens and the weight
        i, j = ys.index(float(r.get("y"))), xs.index(float(r.get("x")))
        hover = r.find("s:title", NS).text
        assert hover.startswith(f"{ref.target_tokens[i]} ({i + 1}) → {ref.source_tokens[j]} ({j + 1}): weight ")
        assert float(hover.rsplit(" ", 1)[1]) == pytest.approx(float(w[i, j]), abs=5.1e-4)
    xticks = [t.find("s:title", NS).text for t in root.findall("s:text[@class='xtick']", NS)]
    yticks = [t.find("s:title", NS).text for t in root.findall("s:text[@class='ytick']", NS)]
    assert xticks == ref.source_tokens and yticks == ref.target_tokens


def test_offsets_and_highlight():
    w = np.arange(6, dtype=float).reshape(2, 3) / 10
    root = parse(svg.heatmap_svg(w, ["a", "b"], ["x", "y", "z"], query_offset=40, key_offset=7, highlight_row=1))
    hovers = [r.find("s:title", NS).text for r in cells(root)]
    assert hovers[0] == "a (41) → x (8): weight 0.000" and hovers[-1] == "b (42) → z (10): weight 0.500"
    box = root.find("s:rect[@class='row-highlight']", NS)
    assert float(box.get("y")) < float(cells(root)[3].get("y")) < float(box.get("y")) + float(box.get("height"))


def test_cells_are_lean():
    """The browser makes a node of every element and every run of text between elements, on each new visit: no
    whitespace between a row's cells, coordinates without digits they do not need."""
    w = np.random.default_rng(0).random((5, 17))
    root = parse(svg.heatmap_svg(w, list("abcde"), [f"k{j}" for j in range(17)], title="t"))
    rects = cells(root)
    tails = [r.tail for r in rects]
    assert tails.count("\n") == 4 and set(tails) == {None, "\n"}  # one line a row
    assert [i for i, t in enumerate(tails) if t] == [16, 33, 50, 67]
    numbers = [r.get(a) for r in rects for a in ("x", "y", "width", "height")]
    assert all(re.fullmatch(r"\d+(\.\d)?", v) and not v.endswith(".0") for v in numbers), numbers
    assert {r.get("y") for r in rects} == {"28", "46", "64", "82", "100"}  # whole pixels stay whole


HOSTILE = ['<script>alert(1)</script>', '"onload=alert(1) x="', "<img src=x onerror=alert(1)>", "a&b", "'", "]]>",
           "<!--", "x" * 80]


def test_hostile_tokens_stay_text():
    w = np.full((len(HOSTILE), len(HOSTILE)), 1 / len(HOSTILE))
    text = svg.heatmap_svg(w, HOSTILE, HOSTILE, title='<b onmouseover="x">T</b>', query_title="<q>", key_title="&k",
                           value_name="<v>")
    root = parse(text)
    tags = {el.tag.split("}")[1] for el in root.iter()}
    assert tags <= {"svg", "text", "title", "g", "rect", "defs", "linearGradient", "stop"}
    assert not [a for el in root.iter() for a in el.attrib if a.lower().startswith("on")]
    assert "<script" not in text and "<img" not in text and "<b " not in text and "<!--" not in text
    # the parsed text is exactly what the visitor typed
    titles = [t.find("s:title", NS).text for t in root.findall("s:text[@class='xtick']", NS)]
    assert titles == HOSTILE
    labels = [t.find("s:title", NS).tail for t in root.findall("s:text[@class='xtick']", NS)]
    n = svg.LABEL_CHARS
    assert labels == [h if len(h) <= n else h[:n - 1] + "…" for h in HOSTILE]  # long labels cut
    assert labels[-1] == "x" * (n - 1) + "…" and labels[1] == HOSTILE[1]
    assert root.find("s:text[@class='title']", NS).text == '<b onmouseover="x">T</b>'
    script = HOSTILE[0]
    assert cells(root)[0].find("s:title", NS).text == f"{script} (1) → {script} (1): <v> 0.125"
    assert root.findall("s:text[@class='axis-title']", NS)[1].text == "<q>"


def test_control_characters_cannot_end_the_html_block():
    """A blank line would end the raw-HTML block of Markdown the SVG is shown in; control characters are not XML."""
    text = svg.heatmap_svg(np.ones((1, 2)) / 2, ["a\n\nb"], ["\x01c", "d\r\n"], title="t\n\nu")
    assert "\n\n" not in text and "\r" not in text and "\x01" not in text
    root = parse(text)
    assert [t.find("s:title", NS).text for t in root.findall("s:text[@class='xtick']", NS)] == [" c", "d  "]


def test_colours_follow_the_plotly_scale():
    scale = figures.ATTENTION_SCALE
    # at each stop, the stop's colour; clipped outside the range
    values = np.array([s for s, _ in scale])
    assert list(svg.colours(values, 0.0, 1.0)) == [c for _, c in scale]
    assert svg.colours(np.array([-3.0, 7.0]), 0.0, 1.0).tolist() == [scale[0][1], scale[-1][1]]
    # halfway between two stops: the mean of their RGB (plotly interpolates linearly in RGB)
    (s0, c0), (s1, c1) = scale[2], scale[3]
    mid = svg.colours(np.array([(s0 + s1) / 2]), 0.0, 1.0)[0]
    rgb = [(int(c0[i:i + 2], 16) + int(c1[i:i + 2], 16)) / 2 for i in (1, 3, 5)]
    assert [int(mid[i:i + 2], 16) for i in (1, 3, 5)] == pytest.approx(rgb, abs=0.51)
    # a stretched range maps its ends to the scale's ends, and darker means larger
    w = np.array([[0.2, 0.3], [0.25, 0.4]])
    root = parse(svg.heatmap_svg(w, ["a", "b"], ["c", "d"], zmin=0.2, zmax=0.4))
    fills = [r.get("fill") for r in cells(root)]
    assert fills[0] == scale[0][1] and fills[3] == scale[-1][1]
    brightness = [sum(int(f[i:i + 2], 16) for i in (1, 3, 5)) for f in fills]
    assert brightness[0] > brightness[2] > brightness[1] > brightness[3]
    assert (root.get("data-zmin"), root.get("data-zmax")) == ("0.2", "0.4")


def test_row_summary_is_the_rows_largest_values():
    row = np.array([0.1, 0.5, 0.05, 0.3, 0.05])
    assert svg.row_summary(row, top=3) == [(1, 0.5), (3, 0.3), (0, 0.1)]
    assert [j for j, _ in svg.row_summary(row)] == [1, 3, 0, 2, 4]  # ties keep their order



def test_read_a_row_lists_the_rows_largest_weights(app_env, tr):
    """The row picker under the SVG (a click on a cell, without plotly): the row outlined, its largest weights listed
    in order, as the model gives them."""
    pytest.importorskip("streamlit")
    from conftest import assert_clean, new_app, plain, svg_chart, translate

    text = "Two dogs play with a ball on the beach."
    at = translate(new_app(), text)
    ref = tr.translate(text)
    row = ref.cross_attentions[-1].mean(0).numpy()[2]
    at.selectbox(key="heatmap_chart_row").set_value(2)
    at.run()
    assert_clean(at)
    spec = svg_chart(at, "Cross-attention · layer 2 · mean over heads")
    box = spec["root"].find("s:rect[@class='row-highlight']", NS)
    ys = sorted({float(r.get("y")) for r in cells(spec["root"])})
    assert float(box.get("y")) < ys[2] < float(box.get("y")) + float(box.get("height"))
    listing = [plain(c.value) for c in at.caption if "takes the most from" in c.value]
    assert len(listing) == 1 and listing[0].startswith(f"Query 3 ({ref.target_tokens[2]}) takes the most from: ")
    order = np.argsort(-row, kind="stable")[:8]
    expected = " · ".join(f"{ref.source_tokens[j]} ({j + 1}) {row[j]:.3f}" for j in order)  # which piece: its number
    assert expected in listing[0]


@pytest.mark.parametrize("n", [3, 45])
def test_the_pages_image_is_the_svg_and_never_shrinks_its_labels_below_the_least_size(n):
    import base64

    rng = np.random.default_rng(n)
    w = rng.dirichlet(np.ones(n), size=n)
    tokens = [f"▁tok{i}" for i in range(n)]
    image = svg.heatmap_svg(w, tokens, tokens, title="<b>T</b>")
    uri = svg.data_uri(image)
    assert uri.startswith("data:image/svg+xml;base64,") and re.fullmatch(r"[A-Za-z0-9+/=]+", uri.split(",", 1)[1])
    assert base64.b64decode(uri.split(",", 1)[1]).decode("utf-8") == image  # the same document, byte for byte
    root = parse(image)
    labels = [float(t.get("font-size")) for t in root.findall("s:text[@class='xtick']", NS)]
    # drawn min_width wide, the smallest label is MIN_FONT px tall (within a rounded pixel)
    assert svg.min_width(image) * min(labels) / float(root.get("width")) == pytest.approx(svg.MIN_FONT, abs=0.05)
