"""The first screen in a real browser (Debian's chromium via Playwright): the translation and the whole first
heatmap of the default sentence on the first screen at 1280 x 720 and 1600 x 1000. Uses the shipped model (its
default sentence is what a visitor sees first). What a visitor cannot use (``CHECK_JS``: text off the screen, rows
of buttons that hide an option, chart labels under 10 px; labels keep their size and the chart scrolls sideways
instead) is read in every view on a phone by ``test_every_view_browser``, with the page's other checks."""

from __future__ import annotations

import pytest
from conftest import SHIPPED  # noqa: F401 (the shipped model, for the browser tests that import it from here)

from bench.browser import APP_HEATMAP, PICTURE, RUN_OVER_JS, SETTLED_JS, SVG_OF_JS

pytestmark = pytest.mark.browser

MIN_LABEL_PX = 9.5  # 10 px, less rounding

# What a visitor cannot use: text past the screen's edge (unless a box scrolls it sideways), rows of buttons whose
# options are hidden (a button group wider than itself), chart labels drawn under MIN_LABEL_PX (plotly's SVG is
# drawn at its size; the server-built SVG is scaled by its width).
CHECK_JS = """min => {
  const W = window.innerWidth, out = {overflow: [], clipped: [], small: []};
  const main = document.querySelector('[data-testid=stMain]');
  const scrollsX = e => { for (let a = e.parentElement; a && a !== main; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if ((o === 'auto' || o === 'scroll') && a.scrollWidth > a.clientWidth + 1) return true; } return false; };
  const visible = e => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
      return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
  const text = e => (e.textContent || '').trim().slice(0, 50);
  for (const e of main.querySelectorAll('*')) {
    if (e.closest('.modebar, svg defs, [data-testid=stTooltipContent]')) continue;
    if (![...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()) || !visible(e)) continue;
    const r = e.getBoundingClientRect();
    if ((r.right > W + 1 || r.left < -1) && !scrollsX(e)) out.overflow.push(text(e));
  }
  for (const g of main.querySelectorAll('[data-testid=stButtonGroup]'))
    for (const d of [g, ...g.querySelectorAll('*')])
      if (visible(d) && d.scrollWidth > d.clientWidth + 1 && getComputedStyle(d).overflowX !== 'visible')
        out.clipped.push(text(g));
  for (const t of main.querySelectorAll('.main-svg text')) {
    if (!visible(t) || !t.textContent.trim() || t.closest('.modebar, .hoverlayer')) continue;
    const svg = t.closest('svg'), vb = svg.viewBox && svg.viewBox.baseVal;
    const scale = vb && vb.width ? svg.getBoundingClientRect().width / vb.width : 1;
    const size = parseFloat(getComputedStyle(t).fontSize) * scale;
    if (size < min) out.small.push(text(t) + ' ' + size.toFixed(1) + 'px');
  }
  for (const img of main.querySelectorAll('PICTURE')) {  // a server-built SVG picture
    if (!visible(img)) continue;
    const svg = SVG_OF(img);
    const scale = img.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    for (const t of svg.querySelectorAll('text[font-size]')) {
      const size = parseFloat(t.getAttribute('font-size')) * scale;
      if (size < min) out.small.push(text(t) + ' ' + size.toFixed(1) + 'px');
    }
  }
  return out;
}""".replace("PICTURE", PICTURE).replace("SVG_OF", SVG_OF_JS)


def _settled(page) -> None:
    """Wait until the page's script run is over (Streamlit's ``data-test-script-state``), nothing is stale or
    loading and every chart is drawn; then once more after a pause, in case the run asked for another."""
    done = f"() => {RUN_OVER_JS} && {SETTLED_JS} && !document.querySelector('[data-testid=stStatusWidget]')"
    for _ in range(2):  # the pause after the last check too: a run an action starts may begin only then
        page.wait_for_function(done, polling=100, timeout=120_000)
        page.wait_for_timeout(300)


@pytest.mark.parametrize("size", [(1280, 720), (1600, 1000)])
def test_the_translation_and_the_whole_first_heatmap_are_on_the_first_screen(shipped_server, browser, size):
    width, height = size
    page = browser.new_page(viewport={"width": width, "height": height})
    try:
        page.goto(shipped_server, wait_until="domcontentloaded")
        page.locator(APP_HEATMAP).first.wait_for(timeout=120_000)
        _settled(page)
        heatmap = page.locator(PICTURE).first.bounding_box()
        assert heatmap is not None and heatmap["height"] > 200  # the default sentence's 17 x 15 cells
        assert heatmap["y"] >= 0 and heatmap["y"] + heatmap["height"] <= height, (size, heatmap)
        assert heatmap["x"] >= 0 and heatmap["x"] + heatmap["width"] <= width, (size, heatmap)
        translation = page.locator("[data-testid=stMain] [data-testid=stText]").first
        assert translation.inner_text().startswith("Ein Mann")
        box = translation.bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height
        scroller = page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollTop")
        assert scroller == 0  # seen without scrolling
    finally:
        page.context.close()
