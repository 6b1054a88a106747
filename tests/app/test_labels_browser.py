"""Labels only a browser can measure: on a short sentence the query axis' title must not run into the chart's title
(the opened head of All heads, drawn by plotly, and the first screen's SVG heatmap). Screenshots land in
``test-artifacts/``."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from bench.browser import CHROMIUM, CHROMIUM_ARGS, IDLE_JS, PICTURE, PICTURE_SVG_JS

ROOT = Path(__file__).resolve().parents[2]
# the first picture's SVG put into the page at the size it is drawn: [the title's box, the query axis title's box,
# that axis title's text]
LAID_OUT_JS = (f"() => {{ const img = document.querySelector('{PICTURE}');"
               f" const s = document.importNode({PICTURE_SVG_JS}, true);"
               " s.style.cssText = `position:absolute;left:0;top:0;width:${img.getBoundingClientRect().width}px`;"
               " document.body.appendChild(s);"
               " const box = e => { const r = e.getBoundingClientRect();"
               " return {x: r.x, y: r.y, width: r.width, height: r.height}; };"
               " const axis = s.querySelectorAll('text.axis-title')[1];"
               " const out = [box(s.querySelector('text.title')), box(axis), axis.textContent];"
               " s.remove(); return out; }")

pytestmark = pytest.mark.browser


@pytest.fixture()
def server(tiny_server):
    return tiny_server  # one server for the session (tests/conftest.py)


def _overlap(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and \
        a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


def test_short_sentence_axis_titles_stay_clear_of_the_chart_titles(server):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            # a two-piece output: the rows are far shorter than "output token (query = the step producing it)"
            page.goto(server + "/?text=A+dog.&a=0&b=2&att=cross", wait_until="domcontentloaded")
            page.locator(PICTURE).first.wait_for(timeout=90_000)
            # the picture's SVG laid out in the page as it is drawn: the chart's title and the query axis' (rotated)
            # title
            title, axis, name = page.evaluate(LAID_OUT_JS)
            assert "query" in name
            assert not _overlap(title, axis), (title, axis)
            page.goto(server + "/?text=A+dog.&a=0&b=2&att=cross&view=all_heads&pick=2.2",
                      wait_until="domcontentloaded")
            chart = page.locator(".js-plotly-plot", has_text="layer 2 · head 2").first
            chart.locator(".g-ytitle").wait_for(timeout=90_000)
            page.wait_for_function(IDLE_JS, timeout=60_000)
            chart.scroll_into_view_if_needed()
            page.screenshot(path=str(out / "opened-head-short.png"))
            title = chart.locator(".g-gtitle").bounding_box()
            axis = chart.locator(".g-ytitle").bounding_box()
            assert not _overlap(title, axis), (title, axis)
        finally:
            browser.close()


# a 40-word val-like caption: 47 source pieces on the shipped model, more keys than 600 px held labelled
LONG = ("A group of men are loading cotton onto a truck and a man sleeping in a green room on a couch and a boy "
        "wearing headphones sits on a woman's shoulders and two men setting up a blue ice fishing.")


def test_inside_a_head_labels_every_key_of_a_long_sentence_on_a_phone(shipped_server):
    """The softmax weights' chart names each key's bar: none of its row labels left out (plotly leaves out those
    that would touch, as it did for every other key of this sentence in a chart capped at 600 px)."""
    from urllib.parse import quote

    from bench.browser import SETTLED_JS

    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                       has_touch=True).new_page()
            page.goto(f"{shipped_server}/?text={quote(LONG)}&view=inside_a_head", wait_until="domcontentloaded")
            chart = page.locator(".js-plotly-plot", has_text="Softmax weights").first
            chart.locator(".ytick").first.wait_for(timeout=90_000)
            page.wait_for_function(f"() => {IDLE_JS} && {SETTLED_JS}", polling=100, timeout=90_000)
            keys = [html.unescape(k) for k in chart.evaluate("d => d.data[0].y")]  # as drawn: "</s>"
            labels = chart.evaluate("d => [...d.querySelectorAll('.yaxislayer-above .ytick text')]"
                                    ".map(t => t.textContent)")
            assert len(keys) > 30, len(keys)  # long enough that the old height left labels out
            assert sorted(labels) == sorted(keys), (len(labels), len(keys), labels[:6])  # each key once
        finally:
            browser.close()
