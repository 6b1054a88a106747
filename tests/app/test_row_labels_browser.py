"""A chart that scrolls sideways on a phone keeps its row labels (issue 48 §1): in Debian's chromium at 390 x 844, the
first screen's picture and a plotly chart (Masks) are scrolled to their far end by script; their row labels are then
still inside the visible box, on top (nothing covers them), each at its row, and the swipe hint still in the box. At
1600 x 1000 nothing scrolls and no frozen column shows. Screenshots in ``test-artifacts/row-labels-*.png``."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_layout_browser import _settled
from test_overlap_browser import CAPTION

from bench.browser import new_context

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"heatmap": "heatmap_chart", "masks": "mask_causal_chart"}  # a view, and the key of a chart of it that scrolls
LINKS = {"masks": "&mask=causal"}  # the address parts that show that chart (Masks draws one mask at a time)

# The chart's scrolling box, its frozen column and their labels, read after the box is scrolled to ``to`` (a
# fraction of its scroll range). A plotly chart's column is a copy of what plotly drew for its rows
# (``app.page.frozen``: its visible tick labels); a picture's, an SVG drawn as the band's background (its labels
# placed at the band's scale). ``top``: whether the label's centre is the topmost thing there (the band is
# see-through to touches, so it is made hit-testable for the reading).
READ_JS = """([key, to]) => {
  const box = document.querySelector(`.st-key-wide_${key}, .st-key-attn_picture_${key}`);
  box.scrollLeft = to * (box.scrollWidth - box.clientWidth);
  const b = box.getBoundingClientRect(), out = {scroll: box.scrollLeft, range: box.scrollWidth - box.clientWidth,
    box: [b.left, b.right], labels: [], own: []};
  const hint = box.querySelector(`.st-key-swipe_${key}`).getBoundingClientRect();
  out.hint = [hint.left, hint.right, hint.height];  // the swipe hint, where it is drawn
  const holder = box.querySelector(`.st-key-rows_${key}`);
  if (!holder) return out;
  for (const e of holder.children) e.style.pointerEvents = 'auto';
  const hit = (r, inside) => { const e = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
    return !!e && inside(e); };
  const band = box.querySelector(`.st-key-row_labels_${key}, .attn-row-labels-${key}`);
  const seen = band && band.getBoundingClientRect().width > 0;
  if (seen && band.tagName === 'DIV' && band.className.startsWith('attn-row-labels-')) {  // a picture's band
    const url = getComputedStyle(band).backgroundImage.match(/base64,([^"')]+)/)[1];
    const svg = new DOMParser().parseFromString(new TextDecoder().decode(Uint8Array.from(atob(url),
      c => c.charCodeAt(0))), 'image/svg+xml').documentElement;
    const r = band.getBoundingClientRect(), scale = r.width / parseFloat(svg.getAttribute('width'));
    for (const t of svg.querySelectorAll('text.ytick')) {
      const y = r.top + parseFloat(t.getAttribute('y')) * scale, x = r.left + parseFloat(t.getAttribute('x')) * scale;
      const label = t.lastChild.textContent, w = label.length * 0.5 * parseFloat(t.getAttribute('font-size')) * scale;
      const cell = {left: x - w, right: x, top: y - 2, bottom: y + 2};
      out.labels.push({text: label, left: x - w, right: x, y, top: hit(cell, e => e === band)});
    }
    const img = box.querySelector('img'), i = img.getBoundingClientRect();
    const own = new DOMParser().parseFromString(new TextDecoder().decode(Uint8Array.from(
      atob(img.src.split(',')[1]), c => c.charCodeAt(0))), 'image/svg+xml').documentElement;
    const s = i.width / parseFloat(own.getAttribute('width'));
    out.own = [...own.querySelectorAll('text.ytick')].map(t => ({text: t.lastChild.textContent,
      y: i.top + parseFloat(t.getAttribute('y')) * s}));
  } else if (seen) {  // a plotly chart's band
    for (const t of band.querySelectorAll('.ytick text')) {
      const r = t.getBoundingClientRect();
      if (getComputedStyle(t).visibility !== 'visible') continue;
      out.labels.push({text: t.textContent, left: r.left, right: r.right, y: (r.top + r.bottom) / 2,
                       top: hit(r, e => band.contains(e))});
    }
    const chart = box.querySelector(`.st-key-${key} .js-plotly-plot`);
    out.own = [...chart.querySelectorAll('.subplot.xy .ytick text')].map(t => {
      const r = t.getBoundingClientRect();
      return {text: t.textContent, y: (r.top + r.bottom) / 2, visible: getComputedStyle(t).visibility === 'visible'};
    });
  }
  for (const e of holder.children) e.style.pointerEvents = '';
  return out;
}"""


# a picture's band is a background image: wait until the browser has decoded it
DECODED_JS = """async key => { const band = document.querySelector(`.attn-row-labels-${key}`);
  if (!band) return; const image = new Image();
  image.src = getComputedStyle(band).backgroundImage.slice(5, -2); await image.decode(); }"""


def _open(page, server: str, view: str) -> None:
    page.goto(f"{server}/?text={CAPTION.replace(' ', '+')}&view={view}{LINKS.get(view, '')}",
              wait_until="domcontentloaded")
    _settled(page)
    assert page.locator("[data-testid=stException]").count() == 0


def test_row_labels_stay_while_a_chart_scrolls_on_a_phone(shipped_server, browser):
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    context = new_context(browser, "phone")
    try:
        page = context.new_page()
        for view, key in PAGES.items():
            _open(page, shipped_server, view)
            box = page.locator(f".st-key-wide_{key}, .st-key-attn_picture_{key}").first
            box.scroll_into_view_if_needed()
            page.evaluate(DECODED_JS, key)  # the picture's band painted before the screenshots
            before = page.evaluate(READ_JS, [key, 0])
            page.screenshot(path=str(out / f"row-labels-phone-{view}-before.png"))
            after = page.evaluate(READ_JS, [key, 1])
            page.wait_for_timeout(300)
            page.screenshot(path=str(out / f"row-labels-phone-{view}-after.png"))
            assert after["range"] > 100, f"{view}: the chart does not scroll on a phone"
            assert after["scroll"] == pytest.approx(after["range"], abs=1)
            left, right, tall = after["hint"]  # the hint says so the whole time, in the box
            assert tall > 10 and after["box"][0] - 0.5 <= left and right <= after["box"][1] + 0.5, view
            for state in (before, after):
                labels, own = state["labels"], state["own"]
                assert len(labels) == len(own) >= 5, view
                left, right = state["box"]
                for label, mine in zip(labels, own):
                    assert label["text"] == mine["text"], view  # the right row's name...
                    assert label["y"] == pytest.approx(mine["y"], abs=1.5), (view, label["text"])  # ...at it
                    assert left - 0.5 <= label["left"] and label["right"] <= right + 0.5, (view, label)
                    assert label["top"], (view, label["text"], "covered")
                # a plotly chart's own labels, under the band, are hidden while it shows (never drawn twice)
                assert not any(o.get("visible") for o in own), view
            if view != "heatmap":  # nothing moves the rows under the frozen labels: no zoom or pan along them
                fixed = page.evaluate(f"""() => {{ const l = document.querySelector(
                    '.st-key-{key} .js-plotly-plot')._fullLayout; return [l.xaxis.fixedrange, l.yaxis.fixedrange];
                    }}""")
                assert fixed == [False, True], view  # along the columns, a zoom and a pan as before
    finally:
        context.close()


@pytest.mark.parametrize("screen", ["desktop", "laptop"])
def test_no_frozen_column_where_nothing_scrolls(shipped_server, browser, screen):
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    context = new_context(browser, screen)
    try:
        page = context.new_page()
        for view, key in PAGES.items():
            _open(page, shipped_server, view)
            page.locator(f".st-key-wide_{key}, .st-key-attn_picture_{key}").first.scroll_into_view_if_needed()
            page.screenshot(path=str(out / f"row-labels-{screen}-{view}.png"))
            state = page.evaluate(READ_JS, [key, 0])
            if screen == "desktop" or state["range"] <= 1:  # a desktop never scrolls these; a laptop may not
                assert state["range"] <= 1, view
                assert state["labels"] == [] and state["own"] == [], view  # no band: nothing read
                shown = page.evaluate(f"""() => [...document.querySelectorAll(
                    '.st-key-{key} .subplot.xy .ytick text')].filter(t => getComputedStyle(t).visibility
                    === 'visible').length""")
                assert view == "heatmap" or shown >= 5, view  # the chart's own labels show
    finally:
        context.close()


# Every full drawing of a chart after its first (plotly's ``_doPlot`` announces each with ``plotly_beforeplot``): the
# chart's key and whether it is drawn at its own width (its layout has a data revision, ``plots.plotly``). The
# listener is added once plotly has set the chart up, so the first drawing is not counted.
REPLOTS_JS = r"""
window.__replots = [];
Object.defineProperty(HTMLDivElement.prototype, 'emit', {configurable: true,
  set(fn) { const gd = this;
    Object.defineProperty(gd, 'emit', {configurable: true, writable: true, value: fn});
    queueMicrotask(() => gd.on('plotly_beforeplot', () => {
      const box = gd.closest('[class*="st-key-"]');
      window.__replots.push([box ? box.className.match(/st-key-(\S+)/)[1] : '', gd.layout.datarevision !== undefined]);
    })); },
  get() { return undefined; }});
"""
LONG = ("A man in a blue shirt and a woman in a red dress walk with their two small dogs along the busy street "
        "next to the old market while children play football in the park near the river on a sunny day")


def test_a_chart_drawn_at_its_own_width_is_drawn_once(shipped_server, browser):
    """Streamlit's chart element hands plotly the figure again after mounting (a copy, and the column's width once
    measured): a chart at its own width (``plots.plotly``) is not drawn again, while a chart that fills its
    column still is (the check sees that one, so it does see a second drawing)."""
    context = new_context(browser, "desktop")
    context.add_init_script(REPLOTS_JS)
    try:
        page = context.new_page()
        page.goto(f"{shipped_server}/?text={LONG.replace(' ', '+')}&view=training_evolution",
                  wait_until="domcontentloaded")
        _settled(page)
        assert page.locator("[data-testid=stException]").count() == 0
        charts = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].map(g =>
            [g.closest('[class*="st-key-"]').className.match(/st-key-(\\S+)/)[1],
             g.layout.datarevision !== undefined])""")
        replots = page.evaluate("window.__replots")
        own = [key for key, fixed in charts if fixed]
        assert own and len(own) < len(charts), charts  # the snapshots at their width, the history filling its column
        assert not [key for key, fixed in replots if fixed], replots
        assert {key for key, _ in replots} >= {key for key, fixed in charts if not fixed}, (charts, replots)
    finally:
        context.close()
