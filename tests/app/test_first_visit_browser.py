"""A first visit in a real browser: the heatmap is the server-built SVG (an image), no plotly.js and no raw-HTML
plugin are fetched, the first screen's scripts are asked for with the page, and the SVG's cell titles are the
model's weights. The Interactive switch then loads the plotly figure.

Debian's chromium driven by Playwright; skipped cleanly without ``/usr/bin/chromium`` or ``playwright``.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.app_browser import CHROMIUM, CHROMIUM_ARGS, FIRST_HEATMAP
from bench.browser import PICTURE, PICTURE_SVG_JS

pytestmark = pytest.mark.browser

TEXT = "A dog runs on the beach."
# the cells of the first SVG heatmap, read from the picture's own SVG: (x, y, title)
CELLS_JS = (f"() => [...{PICTURE_SVG_JS}.querySelectorAll('g.cells rect')]"
            ".map(r => [+r.getAttribute('x'), +r.getAttribute('y'), r.querySelector('title').textContent])")

# when the page's main bundle had been parsed, and when the style's (st.html) and the text box's scripts were asked
LATE_JS = ("() => ({dcl: performance.getEntriesByType('navigation')[0].domContentLoadedEventStart,"
           " style: performance.getEntriesByType('resource').filter(e => /\\/Html\\./.test(e.name))"
           ".map(e => e.startTime),"
           " box: performance.getEntriesByType('resource').filter(e => /\\/TextArea\\./.test(e.name))"
           ".map(e => e.startTime)})")


def test_first_visit_fetches_no_plotly_and_hovers_the_models_weights(tiny_server, tr):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    ref = tr.translate(TEXT, max_len_a=0.0, max_len_b=8)  # the app's other defaults: beam 4, alpha 0.6
    weights = ref.cross_attentions[-1].mean(0).numpy()  # the first screen: cross-attention, last layer, mean
    scripts: list[str] = []
    errors: list[str] = []
    url = tiny_server  # a first visit of this browser; the server may have served others
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
            page.on("request", lambda r: scripts.append(r.url) if r.resource_type == "script" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{url}/?text={TEXT.replace(' ', '+')}&a=0&b=8", wait_until="commit")
            page.locator(PICTURE).first.wait_for(timeout=90_000)
            page.wait_for_timeout(2000)  # anything loaded lazily after the first paint would show by now
            # the script of what is drawn with the picture (its style) was asked for with the page, while the browser
            # parsed the main bundle; the text box's, drawn after the picture, only once its element had arrived
            timing = page.evaluate(LATE_JS)
            assert len(timing["style"]) == 1 and timing["style"][0] < timing["dcl"], timing
            assert len(timing["box"]) == 1 and timing["box"][0] > timing["dcl"], timing
            assert scripts and any("/static/js/" in s for s in scripts)  # the listener sees the page's chunks
            assert not [s for s in scripts if "plotly" in s.lower()], "plotly.js was fetched on a first visit"
            assert not [s for s in scripts if "rehype-raw" in s], "the page shows no raw HTML: no plugin for it"
            assert page.locator("[data-testid=stPlotlyChart]").count() == 0
            cells = page.evaluate(CELLS_JS)
            xs = sorted({x for x, _, _ in cells})
            ys = sorted({y for _, y, _ in cells})
            assert (len(ys), len(xs)) == weights.shape
            shown = np.full(weights.shape, np.nan)
            for x, y, title in cells:
                i, j = ys.index(y), xs.index(x)
                assert title.startswith(f"{ref.target_tokens[i]} ({i + 1}) → {ref.source_tokens[j]} ({j + 1}): weight ")
                shown[i, j] = float(title.rsplit(" ", 1)[1])
            np.testing.assert_allclose(shown, weights, atol=5.1e-4)
            # the Interactive switch: now the plotly chunk loads and draws the same matrix
            page.get_by_text("Interactive", exact=True).first.click()
            page.locator(FIRST_HEATMAP).first.wait_for(timeout=90_000)
            assert [s for s in scripts if "PlotlyChart" in s]
            z = page.evaluate("() => Array.from(document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot')"
                              "._fullData[0].z, r => Array.from(r))")
            np.testing.assert_allclose(np.asarray(z, dtype=float), weights, atol=1e-5)
            assert page.locator("[data-testid=stException]").count() == 0
        finally:
            browser.close()
    assert not errors, errors
