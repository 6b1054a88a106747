"""Each chart is drawn once (``app.drawing.layout.fit_margins``): the builders' margins already hold their tick
labels, axis titles, colour bar and legend, so plotly.js (the oracle, in Debian's chromium) pushes no margin, which
would draw the chart a second time. A 40-piece sentence's charts, as the long-sentence bench draws them."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SHIPPED

from app.drawing import contributions, figures, layout

pytestmark = [pytest.mark.browser]

SOURCE = [f"▁piece{i % 7}" if i % 3 else "▁headphones" for i in range(47)]
OUTPUT = [f"▁Wort{i % 5}" if i % 4 else "▁Zuckerwatte" for i in range(32)]
# plotly.js' margins as drawn against the layout's, for every chart on the page
DRAWN_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => {
  const m = g.layout.margin, s = g._fullLayout._size;
  return [m.l, m.r, m.t, m.b, s.l, s.r, s.t, s.b]; })"""


# at least one chart on the page drawn by plotly.js (a run that redraws a chart removes it for a moment)
ANY_DRAWN_JS = ("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                ".some(g => g._fullLayout && g._fullLayout._size)")


def drawn_charts(page) -> list:
    """:data:`DRAWN_JS` once a chart is drawn (a read mid-redraw found none: 3 charts of 4 in a loaded run)."""
    page.wait_for_function(ANY_DRAWN_JS, polling=100, timeout=120_000)
    return page.evaluate(DRAWN_JS)


def long_figures() -> list:
    rng = np.random.default_rng(0)
    cross = rng.random((32, 47))
    mask = np.tril(np.ones((33, 33), dtype=bool))
    return [figures.attention_heatmap(cross, OUTPUT, SOURCE, title="Cross-attention", query_title="output piece",
                                      key_title="source piece"),
            figures.mask_figure(mask, ["<s>", *OUTPUT], ["<s>", *OUTPUT], "Causal mask", "decoder input (query)",
                                "decoder input (key)"),
            figures.evolution_figure([(f"step {s}", cross) for s in (80, 800, 2400, 14000)], OUTPUT, SOURCE,
                                     "Cross-attention"),
            contributions.source_share_figure(rng.random(32), OUTPUT, threshold=0.4),
            contributions.attribution_share(rng.random(32), OUTPUT)]


def test_fitted_margins_hold_the_longest_label_and_the_colour_bar():
    mask, evolution = long_figures()[1:3]
    size = mask.layout.xaxis.tickfont.size
    assert mask.layout.margin.l > layout.text_px("▁Zuckerwatte", mask.layout.yaxis.tickfont.size)
    assert mask.layout.margin.b > layout.text_px("▁Zuckerwatte", size)  # turned 90 degrees
    assert evolution.layout.margin.b > layout.text_px("▁headphones", evolution.layout.xaxis.tickfont.size)
    assert evolution.layout.margin.r >= layout.COLOUR_BAR_PX and mask.layout.margin.r < layout.COLOUR_BAR_PX


@pytest.mark.slow
def test_the_page_draws_a_long_sentences_charts_with_their_own_margins(shipped_server, browser):
    """On the page (Streamlit's plotly.js, its theme) at 1600 x 1000, a 40-word sentence: every chart of Masks and
    All heads is drawn with the margins its builder set; before ``fit_margins`` the left and bottom ones were pushed
    after a first drawing. (A wide chart's colour bar may still push: its room grows with the chart's width.)"""
    from app.parts.masks import MASK_NAMES
    from bench import app_views
    from bench.browser import APP_HEATMAP, RUN_OVER_JS, SETTLED_JS, expected_ticks

    text = ("A group of men are loading cotton onto a truck and a man sleeping in a green room on a couch and a boy "
            "wearing headphones sits on a woman's shoulders and two men setting up a blue ice fishing.")
    ticks = expected_ticks(SHIPPED, [text])[0]
    page = browser.new_page(viewport={"width": 1600, "height": 1000})  # the session's server of the shipped model
    try:
        page.goto(shipped_server)
        page.locator(APP_HEATMAP).first.wait_for(timeout=120_000)
        app_views.translate(page, text, ticks, 120)
        drawn = {}
        for view in ("masks", "all_heads"):
            app_views.switch(page, view, 120)
            page.wait_for_timeout(500)
            drawn[view] = drawn_charts(page)
            for name in list(MASK_NAMES.values())[1:] if view == "masks" else ():  # one mask at a time: the others
                button = page.locator("[data-testid=stButtonGroup] button", has_text=name).first
                button.click()
                # the click's run started (the button chosen) and over, its chart drawn: a wait for "settled" alone
                # could end before that run began, and read the last mask's chart mid-change
                page.wait_for_function("b => b.getAttribute('aria-checked') === 'true'",
                                       arg=button.element_handle(), polling=100, timeout=120_000)
                page.wait_for_function(f"() => {RUN_OVER_JS} && {SETTLED_JS}", polling=100, timeout=120_000)
                page.wait_for_timeout(500)
                drawn[view] += drawn_charts(page)
    finally:
        page.context.close()
    assert len(drawn["masks"]) >= 4 and len(drawn["all_heads"]) >= 1
    for view, charts in drawn.items():
        for margins in charts:
            assert margins[4:] == pytest.approx(margins[:4], abs=0.5), (view, margins)  # the layout's own margins
