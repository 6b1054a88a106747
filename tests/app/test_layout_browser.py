"""The first screen and every view on a laptop and a phone, in a real browser (Debian's chromium via Playwright):
the translation and the whole first heatmap of the default sentence on the first screen at 1280 x 720 and
1600 x 1000; on a 390 x 844 phone the sidebar starts closed, and in every view no text runs off the screen or
hides in a row of buttons, and no chart label is drawn under 10 px (labels keep their size and the chart scrolls
sideways instead). Uses the shipped model (its default sentence is what a visitor sees first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.browser import APP_HEATMAP, CHROMIUM, CHROMIUM_ARGS, PICTURE, SETTLED_JS, SVG_OF_JS, streamlit_server

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "multi30k-en-de"
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


@pytest.fixture(scope="module")
def shipped_server():
    if not (SHIPPED / "model.safetensors").is_file():
        pytest.skip("the shipped checkpoint is not here")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    with streamlit_server(SHIPPED) as url:
        yield url


def _settled(page) -> None:
    page.wait_for_timeout(1000)
    page.wait_for_function(f"() => {SETTLED_JS} && !document.querySelector('[data-testid=stStatusWidget]')",
                           timeout=120_000)
    page.wait_for_timeout(800)


@pytest.mark.parametrize("size", [(1280, 720), (1600, 1000)])
def test_the_translation_and_the_whole_first_heatmap_are_on_the_first_screen(shipped_server, size):
    from playwright.sync_api import sync_playwright

    width, height = size
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
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
            browser.close()


def test_every_view_is_usable_on_a_phone(shipped_server):
    from playwright.sync_api import sync_playwright

    from app.views import VIEWS

    problems: dict[str, dict] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
            page = context.new_page()
            page.goto(shipped_server, wait_until="domcontentloaded")
            page.locator(APP_HEATMAP).first.wait_for(timeout=120_000)
            _settled(page)
            sidebar = page.locator("[data-testid=stSidebar]").bounding_box()
            assert sidebar is None or sidebar["x"] + sidebar["width"] <= 1, sidebar  # closed on arrival
            for view in VIEWS:
                page.goto(f"{shipped_server}/?view={view}", wait_until="domcontentloaded")
                _settled(page)
                assert page.locator("[data-testid=stException]").count() == 0, view
                found = page.evaluate(CHECK_JS, MIN_LABEL_PX)
                if any(found.values()):
                    problems[view] = {k: v[:5] for k, v in found.items() if v}
        finally:
            browser.close()
    assert not problems, problems


def test_attention_type_buttons_are_whole_on_a_laptop(shipped_server):
    """Inside a head and Compare models at 1280 wide: no attention-type option hidden ("r self-attention")."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            for view in ("inside_a_head", "compare_models", "heatmap", "all_heads"):
                page.goto(f"{shipped_server}/?view={view}", wait_until="domcontentloaded")
                _settled(page)
                found = page.evaluate(CHECK_JS, MIN_LABEL_PX)
                assert not found["clipped"] and not found["overflow"], (view, found)
        finally:
            browser.close()
