"""Chart text a visitor can read, in every view of the registry (``app.views.VIEWS``: a new view is checked too),
on a phone (390 x 844, touch) and a laptop (1280 x 720), with a 16-word caption (and a short output on the first
picture and an opened head): no two pieces of chart text drawn
over one another, and no label under 10 px. Measured in a real browser (Debian's chromium via Playwright) on the
glyph boxes as drawn: each SVG text's advance by its font size (the em square its glyphs are drawn in, within
``getBBox``'s line box) through its transform to the screen (``getScreenCTM``), so
a rotated tick label is its turned rectangle, not the upright box around it; two boxes overlap when they cross by
more than ``SLACK_PX`` (the separating-axis test). Plotly's charts and the server-built SVG pictures both count.
The readings are taken in ``test_every_view_browser``'s one walk per screen, with the page's other checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_layout_browser import MIN_LABEL_PX, SHIPPED, _settled

from bench.browser import CHROMIUM, CHROMIUM_ARGS, PICTURE, SVG_OF_JS, new_context, streamlit_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CAPTION = "A young girl in a red dress is running through the green grass with her dog in the park."  # 16 words
SHORT = "Two dogs are playing in the snow."  # a short output: its axis titles and labels (issue 48 §2)
LONG_TEXT = ("A man in a red shirt and a woman with a blue hat walk their dog past the old church while two children "
             "on bicycles ride down the wet street and a man sells flowers at a small wooden stand.")  # 40 words
SHORT_PAGES = ("heatmap", "all_heads&pick=2.2")  # the first screen's picture and an opened head, decoder self-attention
SLACK_PX = 1.0  # two boxes that only touch (rounding, a shared edge) do not overlap

# Every piece of chart text in the main area as a screen polygon (its four corners), its font size on screen and
# its text. A server-built picture's SVG is put into the page over the image, at its drawn size, for the reading.
BOXES_JS = """() => {
  const main = document.querySelector('[data-testid=stMain]');
  const copies = [];
  for (const img of main.querySelectorAll('PICTURE')) {
    const r = img.getBoundingClientRect();
    if (!r.width) continue;
    const s = document.importNode(SVG_OF(img), true);
    s.style.cssText = `position:absolute;left:${r.left + scrollX}px;top:${r.top + scrollY}px;width:${r.width}px;`
      + `height:${r.height}px;pointer-events:none;opacity:0`;
    document.body.appendChild(s); copies.push(s);
  }
  const texts = [...main.querySelectorAll('.main-svg text')]
    .concat(...copies.map(s => [...s.querySelectorAll('text')]));
  const out = [];
  for (const t of texts) {
    const label = (t.textContent || '').trim();
    if (!label || t.closest('.modebar, .hoverlayer, defs, title')) continue;
    const style = getComputedStyle(t);
    if (style.display === 'none' || style.visibility === 'hidden' || style.opacity === '0') continue;
    const box = t.getBBox(), m = t.getScreenCTM(), em = parseFloat(style.fontSize);
    if (!m || box.width < 0.5 || box.height < 0.5) continue;
    // one line of text: its advance times its em square (where the glyphs' ink lies), centred in the line box
    const b = box.height > 1.6 * em ? box : {x: box.x, y: box.y + (box.height - em) / 2, width: box.width, height: em};
    const p = (x, y) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f];
    const scale = Math.sqrt(m.a * m.a + m.b * m.b);
    out.push({text: label.slice(0, 40), size: parseFloat(style.fontSize) * scale,
              corners: [p(b.x, b.y), p(b.x + b.width, b.y), p(b.x + b.width, b.y + b.height), p(b.x, b.y + b.height)]});
  }
  copies.forEach(s => s.remove());
  return out;
}""".replace("PICTURE", PICTURE).replace("SVG_OF", SVG_OF_JS)


# The page's other promises on a narrow screen: a chart wider than its box scrolls and says so (its swipe hint shows
# exactly while it scrolls), its frozen row labels (where it has them) at its rows; the buttons of a row that wraps
# are each whole (four borders, four round corners) and none lies under another.
PAGE_JS = """() => {
  const main = document.querySelector('[data-testid=stMain]'), out = {hint: [], buttons: [], frozen: [], legend: []};
  for (const box of main.querySelectorAll('[class*=st-key-wide_], [class*=st-key-attn_picture_]')) {
    const hint = box.querySelector('[class*=st-key-swipe_]');
    if (!hint) continue;
    const scrolls = box.scrollWidth > box.clientWidth + 1, shown = hint.getBoundingClientRect().height > 0;
    const name = box.className.match(/st-key-[\\w-]+/)[0];
    if (scrolls !== shown) out.hint.push(`${name}: scrolls ${scrolls}, hint ${shown}`);
  }
  // a chart that scrolls shows its legend's first entry whole before any swipe (a legend placed further right began
  // past a phone's screen: only a red dash of it showed)
  for (const box of main.querySelectorAll('[class*=st-key-wide_]')) {
    if (box.scrollWidth <= box.clientWidth + 1) continue;
    const r = box.getBoundingClientRect(), name = box.className.match(/st-key-[\\w-]+/)[0];
    for (const chart of box.querySelectorAll('.js-plotly-plot')) {
      const first = chart.querySelector('.legend .traces');
      if (!first) continue;
      const b = first.getBoundingClientRect();  // where it is in the scrolled content, against the box's width
      if (b.width && b.right - r.left + box.scrollLeft > box.clientWidth + 1)
        out.legend.push(`${name}: from ${Math.round(b.left - r.left + box.scrollLeft)} px of ${box.clientWidth}`);
    }
  }
  // a frozen column of row labels that shows (app.drawing.row_labels): each of its labels names the chart's row at
  // the same height; a picture's band is as tall as the picture and starts at its top
  for (const band of main.querySelectorAll('[class*=st-key-row_labels_], [class*=attn-row-labels-]')) {
    const r = band.getBoundingClientRect();
    if (!r.width || !r.height) continue;
    const box = band.closest('[class*=st-key-wide_], [class*=st-key-attn_picture_]');
    const name = box.className.match(/st-key-[\\w-]+/)[0], img = box.querySelector('img');
    if (img) {
      const i = img.getBoundingClientRect();
      if (Math.abs(i.top - r.top) > 1 || Math.abs(i.height - r.height) > 1) out.frozen.push(`${name}: band off`);
      continue;
    }
    const read = (root, visible) => [...root.querySelectorAll('.ytick text')]
      .filter(t => (getComputedStyle(t).visibility === 'visible') === visible)
      .map(t => { const b = t.getBoundingClientRect(); return [t.textContent, (b.top + b.bottom) / 2]; });
    const key = band.className.match(/st-key-row_labels_([\\w-]+)/)[1];
    const shown = read(band, true), chart = box.querySelector(`.st-key-${key} .js-plotly-plot`);
    const own = read(chart, false).filter(([, y]) => y >= r.top && y <= r.bottom);
    if (!shown.length || shown.length !== own.length
        || shown.some(([t, y], i) => t !== own[i][0] || Math.abs(y - own[i][1]) > 1.5))
      out.frozen.push(`${name}: ${JSON.stringify(shown.slice(0, 3))} over ${JSON.stringify(own.slice(0, 3))}`);
  }
  for (const g of main.querySelectorAll('[data-testid=stButtonGroup] [role=radiogroup]')) {
    const buttons = [...g.children].filter(b => b.tagName === 'BUTTON');
    const boxes = buttons.map(b => b.getBoundingClientRect());
    buttons.forEach((b, i) => {
      const s = getComputedStyle(b);
      const whole = ['Top', 'Right', 'Bottom', 'Left'].every(k => parseFloat(s[`border${k}Width`]) >= 1)
        && ['TopLeft', 'TopRight', 'BottomRight', 'BottomLeft'].every(k => parseFloat(s[`border${k}Radius`]) > 0);
      if (!whole) out.buttons.push(`${b.innerText} not whole`);
      for (const r of boxes.slice(i + 1)) {
        const a = boxes[i];
        if (a.left < r.right - 0.5 && r.left < a.right - 0.5 && a.top < r.bottom - 0.5 && r.top < a.bottom - 0.5)
          out.buttons.push(`${b.innerText} under a neighbour`);
      }
    });
  }
  return out;
}"""


def _crossing(a: list[list[float]], b: list[list[float]], slack: float = SLACK_PX) -> bool:
    """Whether two convex quadrilaterals (corner lists, in order) cross by more than ``slack`` px: on every edge
    normal of either (the separating-axis theorem) their shadows overlap by more than ``slack``."""
    for poly in (a, b):
        for i in range(4):
            (x0, y0), (x1, y1) = poly[i], poly[(i + 1) % 4]
            nx, ny = y0 - y1, x1 - x0
            length = (nx * nx + ny * ny) ** 0.5
            if length == 0:
                continue
            pa = [(x * nx + y * ny) / length for x, y in a]
            pb = [(x * nx + y * ny) / length for x, y in b]
            if min(max(pa), max(pb)) - max(min(pa), min(pb)) <= slack:
                return False
    return True


def problems(boxes: list[dict]) -> tuple[list[tuple[str, str]], list[str]]:
    """(the pairs of texts that cross, the labels under ``MIN_LABEL_PX``) of a page's ``BOXES_JS`` reading."""
    pairs = [(a["text"], b["text"]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
             if _crossing(a["corners"], b["corners"])]
    small = [f"{b['text']} {b['size']:.1f}px" for b in boxes if b["size"] < MIN_LABEL_PX]
    return pairs, small


def test_the_separating_axis_test_turns_with_the_text():
    """Two labels turned by 45 degrees side by side: their upright boxes overlap, the drawn rectangles do not."""
    def turned(cx: float) -> list[list[float]]:  # a 40 x 10 box turned 45 degrees about its centre (cx, 0)
        h = 0.5 ** 0.5
        return [[cx + (x * h - y * h), x * h + y * h] for x, y in ((-20, -5), (20, -5), (20, 5), (-20, 5))]
    a, b = turned(0.0), turned(16.0)
    assert not _crossing(a, b)  # 16 px apart sideways: 11.3 px across labels 10 px thick
    upright = [[min(x for x, _ in p), min(y for _, y in p), max(x for x, _ in p), max(y for _, y in p)] for p in (a, b)]
    assert upright[0][2] > upright[1][0]  # ... though their upright boxes overlap
    assert _crossing(a, turned(6.0))
    assert _crossing([[0, 0], [10, 0], [10, 10], [0, 10]], [[5, 5], [15, 5], [15, 15], [5, 15]])
    assert not _crossing([[0, 0], [10, 0], [10, 10], [0, 10]], [[9.5, 0], [20, 0], [20, 10], [9.5, 10]])


# each frame while the page's script runs: how many times the page's name and its text box show
TWICE_JS = """() => { window.__frames = []; const look = () => {
  const app = document.querySelector('[data-test-script-state]');
  const shown = e => e.getClientRects().length > 0;
  if (app && app.getAttribute('data-test-script-state') === 'running')
    window.__frames.push([
      [...document.querySelectorAll('[data-testid=stMain] [data-testid=stMarkdownContainer]')]
        .filter(e => shown(e) && e.innerText.includes('Attention explorer')).length,
      [...document.querySelectorAll('[data-testid=stMain] textarea')].filter(shown).length]);
  requestAnimationFrame(look); }; requestAnimationFrame(look); }"""


def test_a_fresh_server_says_it_is_starting():
    """``streamlit run app/main.py`` on a fresh process: while it imports PyTorch and the app, the page says so
    (not a blank page with only "Stop"); the notice is gone once the page is drawn, and the next run, which has no
    notice to show, still draws every element in its place (never a faded second title or text box meanwhile)."""
    from playwright.sync_api import sync_playwright

    if not (SHIPPED / "model.safetensors").is_file() or not CHROMIUM.exists():
        pytest.skip("needs the shipped checkpoint and chromium")
    seen = []
    with streamlit_server(SHIPPED, script=ROOT / "app" / "main.py") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = new_context(browser, "laptop").new_page()
            page.goto(url, wait_until="commit")
            for _ in range(600):
                text = page.evaluate("() => (document.querySelector('[data-testid=stMain]') || {}).innerText || ''")
                seen.append("Starting the explorer" in text)
                if page.locator(PICTURE).count():
                    break
                page.wait_for_timeout(100)
            page.wait_for_selector(PICTURE, timeout=180_000)  # a loaded machine: the first run may take longer
            _settled(page)
            final = page.locator("[data-testid=stMain]").inner_text()
            page.evaluate(TWICE_JS)  # the next run (no notice box then) draws each element where it was
            page.locator("[data-testid=stTextArea] textarea").fill(LONG_TEXT)
            page.get_by_role("button", name="Translate").click()
            page.wait_for_function("() => (new URLSearchParams(location.search).get('text') || '').length > 150",
                                   timeout=120_000)
            _settled(page)
            frames = page.evaluate("window.__frames")
        finally:
            browser.close()
    assert any(seen), "no notice while the server started"
    assert "Starting the explorer" not in final
    assert frames and all(f == [1, 1] for f in frames), frames  # one name, one text box in every frame of that run
