"""The words the views show (issue 48 §2): what a colour means, one numbering per axis, quotes as quotes, the
notice for unknown characters, labels off the bars, no empty header, no "None" cell, a word for every number, and
plain words before the terms (the terms kept in the tooltips). Figure builders and wording functions directly;
the views' captions through AppTest on the tiny checkpoint."""

from __future__ import annotations

import html
import re
import unicodedata
from pathlib import Path

import numpy as np
import plotly.colors
import pytest

from app.drawing import analysis, contributions, figures, layout, svg
from app.drawing import positional as pe_figures
from app.models import card
from app.page import controls
from app.page.frame import FSI, PDI, unknown_notice

ROOT = Path(__file__).resolve().parents[2]


def _rgb(colour: str) -> tuple[int, ...]:
    return tuple(int(float(v)) for v in re.findall(r"[\d.]+", plotly.colors.convert_colors_to_same_type(colour)[0][0]))


def test_the_diverging_colours_are_described_as_they_are_drawn():
    scale = plotly.colors.get_colorscale(figures.DIVERGING)
    low, high = _rgb(scale[0][1]), _rgb(scale[-1][1])
    assert low[0] > low[2] and high[2] > high[0]  # the lowest value red, the highest blue
    words = figures.DIVERGING_WORDS
    assert words.index("blue") < words.index("positive") < words.index("red") < words.index("negative")
    from app import parts  # the one description the app, the notebook and the offline page draw

    assert words in parts.what_drives_each_word.INTRO
    assert "red positive" not in (ROOT / "app" / "report.js").read_text()


def test_quotes_in_a_token_show_as_quotes_and_markup_stays_text():
    tokens = ['▁"', "<b>x</b>", "'s"]
    fig = figures.attention_heatmap(np.full((3, 3), 1 / 3), tokens, tokens)
    labels = list(fig.layout.xaxis.ticktext)
    assert labels[0] == '▁"' and labels[2] == "'s"  # plotly decodes no &quot;: the quote itself
    assert labels[1] == "&lt;b&gt;x&lt;/b&gt;"  # ... but a tag is still shown as text (plotly decodes &lt;)
    assert not any("&quot;" in str(v) or "&#x27;" in str(v) for v in np.asarray(fig.data[0].customdata).ravel())
    assert analysis.escape('"&<') == '"&amp;&lt;'
    # the server-built SVG is XML, whose attributes need the quote escaped (and XML decodes it)
    assert svg.escape('a"b') == "a&quot;b"


def test_the_contribution_matrix_numbers_each_part_as_every_other_chart():
    source = ["▁A", "▁dog", "▁in", "</s>"]
    prefix = ["<s>", "▁Ein", "▁Hund", "▁in", "m"]
    outputs = ["▁Ein", "▁Hund", "▁in", "m", "</s>"]
    rng = np.random.default_rng(0)
    fig = contributions.contribution_matrix_figure(rng.random((5, 4)), rng.random((5, 5)), outputs, source, prefix)
    labels = list(fig.layout.xaxis.ticktext)
    # "▁in" once in each part: written bare in both, as the Heatmap writes it (issue 57 §8: no "▁in·3" here alone)
    assert labels[:4] == ["▁A", "▁dog", "▁in", "&lt;/s&gt;"]
    assert labels[4:] == ["&lt;s&gt;", "▁Ein", "▁Hund", "▁in", "m"]
    cross_chart = figures.attention_heatmap(np.eye(5, 4), outputs, source)
    decoder_chart = figures.attention_heatmap(np.eye(5), outputs, prefix, key_first=analysis.first_numbers(
        "decoder")[1])
    assert labels == [*cross_chart.layout.xaxis.ticktext, *decoder_chart.layout.xaxis.ticktext]
    # a piece repeated within a part carries its part's number (source from 1, decoder input from 0)
    again = contributions.contribution_matrix_figure(rng.random((2, 4)), rng.random((2, 3)), ["▁a", "."],
                                                     ["▁a", ".", "▁a", "."], ["<s>", "▁a", "."])
    assert list(again.layout.xaxis.ticktext) == ["▁a·1", ".·2", "▁a·3", ".·4", "&lt;s&gt;", "▁a", "."]
    custom = np.asarray(fig.data[0].customdata)
    assert custom[0, 2, 3] == "source piece 3" and custom[0, 7, 3] == "target prefix 3"
    assert "%{customdata[3]}: <b>%{customdata[1]}</b>" in fig.data[0].hovertemplate


def test_the_unknown_character_notice_counts_pieces_and_characters_apart():
    chinese = list("一只小狗在雪地里玩耍和跑步开心极")  # 16 characters, one run: one <unk> piece
    text = unknown_notice(1, chinese)
    assert text.startswith("1 piece of the input is not") and "shows as <unk>" in text
    assert "16 characters" in text and "and 4 more" in text  # 12 named + 4
    assert "(s)" not in text
    assert unknown_notice(3, ["é"]).startswith("3 pieces of the input are not")
    assert "1 character it does not know" in unknown_notice(3, ["é"])


def test_right_to_left_characters_are_isolated_in_the_notice():
    arabic = ["ب", "ت", "ث"]
    text = unknown_notice(2, arabic)
    for c in arabic:
        assert f"“{FSI}{c}{PDI}”" in text  # each one isolated: its quotes and the commas keep their places
    assert unicodedata.bidirectional(FSI) == "FSI" and unicodedata.bidirectional(PDI) == "PDI"
    assert text.count(FSI) == text.count(PDI) == 3


def test_the_source_share_lines_are_named_in_the_legend_not_on_the_bars():
    fig = contributions.source_share_figure(np.array([0.9, 0.5, 0.7]), ["▁Ein", "▁Hund", "."], threshold=0.6)
    assert not fig.layout.annotations  # nothing written over the bars
    names = [t.name for t in fig.data]
    assert "mean source share (0.70)" in names and "hallucination threshold (0.60)" in names
    assert len(fig.layout.shapes) == 2  # the two lines themselves
    legend, title_gap = fig.layout.legend, fig.layout.margin.t
    assert legend.yanchor == "bottom" and legend.y == 1.0 and title_gap >= 100  # under the title, above the plot


def test_a_short_output_keeps_its_axis_titles_close():
    title = analysis.AXIS_TITLES["decoder"][0]  # "output token (query = the step producing it)"
    fig = figures.attention_heatmap(np.full((2, 3), 0.5), ["▁Zwei", "</s>"], ["<s>", "▁Zwei", "▁Hunde"],
                                    query_title=title)
    shown = fig.layout.yaxis.title.text
    assert shown == "output token (query)"  # the explanation would be longer than the two rows
    assert layout.axis_title_room(shown) < fig.layout.height - fig.layout.margin.t
    assert fig.layout.height <= 300  # no band of empty plot between the ticks and the x title
    long = figures.attention_heatmap(np.full((20, 3), 0.5), [f"t{i}" for i in range(20)], ["a", "b", "c"],
                                     query_title=title)
    assert long.layout.yaxis.title.text == title  # rows enough: the whole title
    # eight long labels do not fit a phone's row upright: turned
    words = ["▁spielen", "▁draußen", "▁zusammen", "▁Schnee", "▁fröhlich", "▁Hunde", "▁laufen", "."]
    turned = figures.attention_heatmap(np.full((2, 8), 0.1), ["a", "b"], words)
    assert turned.layout.xaxis.tickangle == -60
    assert figures.attention_heatmap(np.full((2, 3), 0.3), ["a", "b"], ["x", "y", "z"]).layout.xaxis.tickangle == 0
    # the server-built picture of the first screen: the same short title, its labels turned where they do not fit a
    # column, and the key axis' title right under its labels (not at the foot of a picture grown for the title)
    picture = svg.heatmap_svg(np.full((2, 8), 0.1), ["▁Zwei", "</s>"], words, query_title=title)
    assert ">output token (query)</text>" in picture and 'transform="rotate(-60' in picture
    height = float(re.search(r'height="(\d+)"', picture).group(1))
    key_title_y = float(re.findall(r'class="axis-title" x="[\d.]+" y="([\d.]+)"', picture)[0])
    assert key_title_y <= height - 6
    assert "rotate(-60" not in svg.heatmap_svg(np.full((2, 3), 0.1), ["a", "b"], ["x", "y", "z"])


def test_colour_bars_are_named_along_their_side():
    fig = figures.attention_heatmap(np.eye(2), ["a", "b"], ["c", "d"])
    assert fig.data[0].colorbar.title.side == "right"  # never on top, over the top value


def test_min_width_gives_every_label_its_room():
    few = figures.attention_heatmap(np.eye(4), list("abcd"), list("abcd"))
    many = figures.attention_heatmap(np.eye(32), [f"▁w{i}" for i in range(32)], [f"▁w{i}" for i in range(32)])
    assert layout.min_width(few) < layout.PHONE_PLOT + 200
    need = layout.min_width(many)
    size = many.layout.xaxis.tickfont.size
    plot = need - 90 - 20 - max(layout.text_px(t, size) for t in many.layout.yaxis.ticktext) - 30
    assert plot / 32 * np.sin(np.radians(60)) >= size  # a turned label's thickness fits its column
    panels = figures.evolution_figure([(f"step {s}", np.eye(20)) for s in (1, 2, 3, 4)], list("abcdefghijklmnopqrst"),
                                      list("abcdefghijklmnopqrst"), "t")
    assert layout.min_width(panels) >= 4 * 20 * (panels.layout.xaxis.tickfont.size + layout.LABEL_GAP)
    assert layout.min_width(pe_figures.pe_similarity(np.eye(8))) == 0  # numeric ticks: plotly thins them itself


def test_a_number_in_the_lens_table_says_what_it_is():
    from app.parts.layer_by_layer import top_cell

    assert top_cell("▁Jemand", 0.412) == "▁Jemand (probability 0.412)"
    # an early layer's top prediction over a flat spread: never "0.000" beside "on top from" that layer
    assert top_cell("▁Zwei", 0.000412) == "▁Zwei (probability 0.00041)"
    assert top_cell("▁Zwei", 0.0004) == "▁Zwei (probability 0.00040)"


def test_the_heads_table_shows_a_dash_where_a_statistic_does_not_apply():
    import json

    from app.views.heads_across_the_test_set import head_rows, styled

    data = json.loads((ROOT / "checkpoints" / "multi30k-en-de" / "heads.json").read_text())
    frame = head_rows(data)
    assert frame["on start token"].dtype.kind == "f"  # numbers (NaN where none), sortable
    shown = styled(frame).to_html()
    assert "None" not in shown and "—" in shown


def test_no_table_has_an_empty_header():
    from app.page.sidebar import markdown_table

    for readme in (ROOT / "checkpoints").glob("*/README.md"):
        for line in readme.read_text().splitlines():
            if line.startswith("|"):
                assert line.replace(" ", "") != "|||", readme
    facts = markdown_table(("property", "value"), [("layers", 4)]).splitlines()[0]
    assert all(cell.strip() for cell in facts.strip("|").split("|"))
    sidebar = (ROOT / "app" / "page" / "sidebar.py").read_text()
    assert 'markdown_table((""' not in sidebar


def test_plain_words_for_the_data_splits_and_percentiles():
    assert card.split_words("val") == "the validation sentences"
    assert card.split_words("test_2016_flickr") == "the test (Flickr 2016) sentences"
    assert card.split_words("mine") == "mine"
    assert card.percentile_words(1.0) == "the lowest 1%"


def test_the_measure_names_are_words_with_the_formula_in_the_tooltip():
    assert not any("‖" in v or "α" in v for v in controls.MEASURES.values())
    assert "‖" not in controls.NORMS_NOTE and "‖α_ij" in controls.NORMS_TERMS


JARGON = ("captum", "heads.json", "nats", "Spearman", "padding_mask", "tr.model.pe", "‖α", "I_h", "dL/d",
          "percentile 1", " val,", " val)", " val.")


@pytest.mark.parametrize("view", ["what_drives_each_word", "masks", "positional_encoding", "head_table",
                                  "source_or_prefix"])
def test_the_views_say_it_in_plain_words(app_env, view):
    from conftest import assert_clean, new_app, plain, set_view, translate

    at = set_view(translate(new_app(), "A man rides a red bike."), view)
    assert_clean(at)
    shown = [plain(e.value) for e in [*at.caption, *at.markdown, *at.info, *at.warning]]
    helps = [html.unescape(str(getattr(e.proto, "help", ""))) for e in at.caption]
    for text in shown:
        for term in JARGON:
            assert term not in text, (view, term, text)
    assert any(helps), view  # the terms are kept, in a tooltip
