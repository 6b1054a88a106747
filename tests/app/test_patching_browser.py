"""What carries the change in a real browser (Debian's chromium via Playwright) on the shipped model, at the three
screens the app is made for (1600 x 1000, 1280 x 720, a 390 x 844 phone): the page drawn from a link without a
trace, the encoder chart's column of the edited piece named by both pieces, the step's pieces named, no text off
the screen or under 10 px (``test_layout_browser.CHECK_JS``), no two pieces of chart text over one another
(``test_overlap_browser``), a click (a tap) on a head's cell opens its attention. Screenshots:
``test-artifacts/patching-<screen>.png``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_layout_browser import CHECK_JS, MIN_LABEL_PX, _settled
from test_overlap_browser import BOXES_JS, problems

from bench.browser import SCREENS, new_context

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TEXT = "A man in a red shirt rides a bike."
QUERY = f"text={TEXT.replace(' ', '+')}&view=what_carries_the_change&pw=5&ps=blue"
CELL_JS = """title => { const c = [...document.querySelectorAll('[data-testid=stPlotlyChart] .js-plotly-plot')]
  .find(p => (p.querySelector('.gtitle') || {}).textContent?.startsWith(title));
  c.scrollIntoView({block: 'center'});
  const xa = c._fullLayout.xaxis, ya = c._fullLayout.yaxis, box = c.getBoundingClientRect();
  return [box.left + xa._offset + xa.l2p(2), box.top + ya._offset + ya.l2p(1)]; }"""  # layer 2, head 3
ENCODER_TICKS_JS = """() => { const c = [...document.querySelectorAll('[data-testid=stPlotlyChart] .js-plotly-plot')]
  .find(p => (p.querySelector('.gtitle') || {}).textContent?.startsWith('Encoder'));
  return c ? [...c.querySelectorAll('.xtick text')].map(e => e.textContent) : null; }"""


@pytest.mark.parametrize("screen", list(SCREENS))
def test_what_carries_the_change_reads_on_every_screen(shipped_server, browser, screen):
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    context = new_context(browser, screen)
    page = context.new_page()
    try:
        page.goto(f"{shipped_server}/?{QUERY}", wait_until="domcontentloaded")
        _settled(page)
        page.screenshot(path=str(out / f"patching-{screen}.png"), full_page=True)
        assert page.locator("[data-testid=stException]").count() == 0
        ticks = page.evaluate(ENCODER_TICKS_JS)
        assert ticks and "▁red→▁blue" in ticks, ticks  # the edited piece, named by both pieces
        assert page.get_by_text("Original:").count() and page.get_by_text("Edited:").count()
        usable = page.evaluate(CHECK_JS, MIN_LABEL_PX)
        assert not any(usable.values()), usable
        pairs, small = problems(page.evaluate(BOXES_JS))
        assert not pairs and not small, (pairs, small)
        # a click (a tap on the phone) on the cross-attention heads' cell of layer 2, head 3 opens that head
        x, y = page.evaluate(CELL_JS, "Cross-attention heads")
        if SCREENS[screen][1]:
            page.touchscreen.tap(x, y)
        else:
            page.mouse.click(x, y)
        # the address names the head once the run the tap started is over (the name itself shows sooner: the tap's
        # hover label says it too)
        page.wait_for_url(re.compile(r"[?&]ph=cross\.2\.3(&|$)"), timeout=60_000)
        page.get_by_text("Cross-attention · layer 2 · head 3").first.wait_for(timeout=60_000)
    finally:
        context.close()
