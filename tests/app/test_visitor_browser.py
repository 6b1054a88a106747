"""What only a browser sees of issue 57's visitor items, in Debian's chromium (Playwright) on the shipped model, one
server for the module: Ablation's frozen row labels over their chart (not under it) and no swipe hint on a desktop;
How each word is built on a phone (it scrolls, its source labels stay, its columns a finger apart); button groups
that wrap keep every border; the offline page's wide table says it scrolls and keeps its first column; every control
is reached and used from the keyboard. axe-core's WCAG 2 A/AA rules are run on every view of the registry in
``test_every_view_browser``'s one walk per screen, with the page's other checks."""

from __future__ import annotations

import math

import pytest
from test_layout_browser import SHIPPED, _settled

from bench.browser import PICTURE, new_context
from transformer.network.kinds import KIND_NAMES

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TEXT = "A man in a blue shirt is riding a bike down the street."


def _open(page, server: str, query: str) -> None:
    page.goto(f"{server}/?text={TEXT.replace(' ', '+')}&{query}", wait_until="domcontentloaded")
    _settled(page)
    assert page.locator("[data-testid=stException]").count() == 0


# each chart box of the page: whether its swipe hint shows, and where its frozen row labels are against its chart
BOXES_JS = """() => [...document.querySelectorAll('[class*=st-key-wide_]')].map(box => {
  const key = [...box.classList].find(c => c.startsWith('st-key-wide_')).slice(12);
  const hint = box.querySelector(`.st-key-swipe_${key}`), band = box.querySelector(`.st-key-row_labels_${key}`);
  const chart = box.querySelector(`.st-key-${key}`), shown = e => !!e && e.getBoundingClientRect().height > 0;
  return {key, scrolls: box.scrollWidth > box.clientWidth + 1, hint: shown(hint), band: shown(band),
          bandTop: band ? band.getBoundingClientRect().top : null, chartTop: chart.getBoundingClientRect().top}; })"""


@pytest.mark.parametrize("screen", ["desktop", "phone"])
def test_ablation_keeps_its_row_labels_over_its_chart(shipped_server, browser, screen):
    """Issue 57 §1: after "Translate without them", no second, empty chart under the real one; on a desktop no
    hint to swipe (nothing scrolls), on a phone each frozen column lies over its own chart."""
    page = new_context(browser, screen).new_page()
    _open(page, shipped_server, "view=Ablation&off=cross.4.1&layer=4")
    boxes = {b["key"]: b for b in page.evaluate(BOXES_JS)}
    assert {"ablation_original_chart", "ablation_heads_off_chart"} <= set(boxes)
    for box in boxes.values():
        assert box["hint"] == box["scrolls"], box  # the hint shows exactly when the box scrolls
        assert box["band"] == box["scrolls"], box  # and so does the frozen column...
        if box["band"]:
            assert box["bandTop"] == pytest.approx(box["chartTop"], abs=1), box  # ...over its chart, not under
    if screen == "desktop":
        assert not any(b["scrolls"] for b in boxes.values())
    page.context.close()


def test_the_flow_graph_scrolls_on_a_phone_and_keeps_its_labels(shipped_server, browser):
    """Issue 57 §2: on a phone the graph keeps its width (its columns a finger apart) and scrolls, with its source
    pieces' labels kept at the left edge."""
    page = new_context(browser, "phone").new_page()
    _open(page, shipped_server, "view=How+each+word+is+built&fs=8")
    (box,) = [b for b in page.evaluate(BOXES_JS) if b["key"] == "flow_chart"]
    assert box["scrolls"] and box["hint"] and box["band"]
    gap = page.evaluate("""() => { const d = document.querySelector('.st-key-flow_chart .js-plotly-plot');
      const a = d._fullLayout.xaxis; return a.l2p(1) - a.l2p(2 / 3); }""")  # a third of a layer: two block columns
    assert gap >= 24
    page.context.close()



# the head dots of the flow graph on the screen: [x, y, customdata] of each (plotly's own axes: data to pixels), the
# smallest dot's size and the chart's hover distance
HEAD_DOTS_JS = """() => { const d = document.querySelector('.st-key-flow_chart .js-plotly-plot');
  const t = d._fullData.find(t => t.name === 'heads'), xa = d._fullLayout.xaxis, ya = d._fullLayout.yaxis;
  const r = d.querySelector('.nsewdrag').getBoundingClientRect();
  return {dots: Array.from(t.x, (x, k) => [r.left + xa.l2p(x), r.top + ya.l2p(t.y[k]), t.customdata[k]]),
          smallest: Math.min(...t.marker.size), reach: d._fullLayout.hoverdistance}; }"""
# the chart the element at a point belongs to (its key), so a tap there reaches the graph, not a label over it
AT_POINT_JS = """([x, y]) => { const e = document.elementFromPoint(x, y);
  return e && e.matches('.nsewdrag') ? [...e.closest('[class*=st-key-flow_chart]').classList]
    .find(c => c.startsWith('st-key-')) : null; }"""


def test_a_tap_on_a_head_dot_opens_that_head_on_a_phone(shipped_server, browser):
    """Issue 57 §2: on a phone (touch, 390 x 844) a tap on a head's dot opens that head, as a click does on a
    desktop: the address names it, the picker shows it and its panel is drawn. The tap lands 12 px off the dot's
    centre: a target at least 24 px across."""
    page = new_context(browser, "phone").new_page()
    _open(page, shipped_server, "view=how_each_word_is_built&fs=8")
    assert "fh=" not in page.url
    page.locator(".st-key-flow_chart").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    found = page.evaluate(HEAD_DOTS_JS)
    assert found["smallest"] / 2 + found["reach"] >= 12  # a dot's radius and plotly's reach around it: 24 px across
    width, height = page.viewport_size["width"], page.viewport_size["height"]
    head = lambda c: f"{c[0]}.{c[1] + 1}.{c[2] + 1}@{c[3] + 1}"  # noqa: E731 (the address's fh, as flow.head_text)
    # a dot on the screen, over the graph (not under the frozen labels), with no other head's dot within 40 px
    alone = [(x, y, c) for x, y, c in found["dots"] if 20 < x < width - 20 and 80 < y < height - 20
             and page.evaluate(AT_POINT_JS, [x + 12, y]) == "st-key-flow_chart"
             and all(head(o) == head(c) or math.dist((x, y), (ox, oy)) > 40 for ox, oy, o in found["dots"])]
    assert alone, found
    x, y, custom = alone[0]
    page.touchscreen.tap(x + 12, y)
    page.wait_for_function("() => location.search.includes('fh=')", polling=100, timeout=120_000)  # its rerun
    _settled(page)
    opened = head(custom)
    assert f"fh={opened.replace('@', '%40')}" in page.url
    kind, layer, number = KIND_NAMES[custom[0]], custom[1] + 1, custom[2] + 1
    assert f"L{layer} · H{number}" in page.locator(".st-key-flow_head input").input_value()  # the picker agrees
    panel = page.locator(".st-key-flow_head_row .gtitle").first
    assert f"{kind} · layer {layer} · head {number}" in panel.text_content()
    assert page.get_by_text("has no edge in the graph").count() == 0  # it was tapped on its edge
    page.context.close()

BORDERS_JS = """() => [...document.querySelectorAll('[data-testid=stMain] [role=radiogroup] > button')]
  .filter(b => !b.hasAttribute('data-selected') && b.getBoundingClientRect().width > 0).map(b => {
    const s = getComputedStyle(b);
    return [b.textContent, s.borderTopColor, s.borderLeftColor, s.borderRightColor]; })"""


@pytest.mark.parametrize("screen", ["laptop", "phone"])
def test_buttons_that_wrap_keep_every_border(shipped_server, browser, screen):
    """Issue 57 §9: no button of a row that wraps loses a side (Streamlit hides the side a button shares with its
    chosen neighbour; here they stand apart)."""
    page = new_context(browser, screen).new_page()
    _open(page, shipped_server, "view=Inside+a+head")
    buttons = page.evaluate(BORDERS_JS)
    assert len(buttons) >= 8
    for text, top, left, right in buttons:
        assert left == top and right == top, (text, top, left, right)
    page.context.close()


def test_the_offline_page_says_its_wide_table_scrolls(browser, tmp_path):
    """Issue 57 §12: at 390 px Layer by layer's table is wider than the screen: a line above it says it scrolls,
    and its first column (the output piece) stays while it does."""
    if not (SHIPPED / "model.safetensors").is_file():
        pytest.skip("the shipped checkpoint is not here")
    import transformer
    from app import report

    tr = transformer.load(SHIPPED, device="cpu")
    out = tmp_path / "page.html"
    out.write_text(report.build_page(tr.translate(TEXT, return_attention=True), tr, ("layer_by_layer",), text=TEXT))
    page = new_context(browser, "phone").new_page()
    page.goto(out.as_uri())
    page.wait_for_function("document.querySelectorAll('section.view[data-drawn]').length === 1", timeout=60_000)
    state = page.evaluate("""() => { const box = document.querySelector('#layer_by_layer .scroll:has(> table.values)');
      const hint = box.previousElementSibling, first = box.querySelector('tr > :first-child');
      box.scrollLeft = box.scrollWidth; const b = box.getBoundingClientRect(), f = first.getBoundingClientRect();
      return {wide: box.scrollWidth > box.clientWidth, hint: hint.classList.contains('hint') && !hint.hidden
              && hint.getBoundingClientRect().height > 0, scrolled: box.scrollLeft, kept: f.left - b.left}; }""")
    assert state["wide"] and state["hint"] and state["scrolled"] > 5
    assert abs(state["kept"]) <= 1  # the first column stays at the box's left edge
    page.context.close()


FOCUSABLE_JS = """() => { const seen = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0
    && getComputedStyle(e).visibility !== 'hidden' && !e.disabled && e.getAttribute('aria-disabled') !== 'true'; };
  const all = [...document.querySelectorAll('[data-testid=stMain] :is(button, input, textarea, a[href], '
    + '[role=slider], [role=switch], [role=checkbox], [role=combobox], [tabindex="0"])')].filter(seen)
    .filter(e => !e.closest('.modebar, [data-testid=stDataFrame], [data-testid=stElementToolbar]'))
    // a picker's chevron is part of its box (the box takes the focus), and a group of radios is one stop (the arrow
    // keys move within it): the group is the control
    .filter(e => !(e.tabIndex < 0 && e.closest('[data-testid=stSelectbox], [data-testid=stMultiSelect]')))
    .map(e => e.getAttribute('role') === 'radio' ? e.closest('[role=radiogroup]') : e);
  return [...new Set(all)].map((e, i) => { e.dataset.kb = i;
    return (e.getAttribute('aria-label') || e.textContent || e.tagName).trim().slice(0, 40); }); }"""
# the control that has the focus (a radio: its group)
FOCUSED_JS = "() => { const e = document.activeElement && document.activeElement.closest('[data-kb]'); " \
             "return e ? e.dataset.kb : null; }"


def test_every_control_is_reached_and_used_from_the_keyboard(shipped_server, browser):
    """Issue 57 §20: Tab reaches every control of the first screen; the arrow keys pick another group of views;
    on a phone, Tab reaches a wide chart's hint, from which the arrow keys scroll the chart. The first picture's
    alt text names its sentence and its head."""
    page = new_context(browser, "laptop").new_page()
    _open(page, shipped_server, "view=Heatmap&att=cross&layer=4&head=2")
    alt = page.locator(PICTURE).first.get_attribute("alt")
    assert TEXT in alt and "Cross-attention · layer 4 · head 2" in alt
    controls = page.evaluate(FOCUSABLE_JS)
    assert len(controls) >= 8
    page.locator("[data-testid=stMain] textarea").first.focus()
    reached = set()
    for _ in range(3 * len(controls) + 20):
        mark = page.evaluate(FOCUSED_JS)
        if mark is not None:
            reached.add(int(mark))
        page.keyboard.press("Tab")
    missed = [c for i, c in enumerate(controls) if i not in reached]
    assert not missed, missed
    group = page.locator(".st-key-view_group [role=radio][aria-checked=true]")
    group.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Space")
    _settled(page)
    assert page.locator(".st-key-view_group [role=radio][aria-checked=true]").inner_text() != "Attention"
    page.context.close()
    phone = new_context(browser, "phone").new_page()
    _open(phone, shipped_server, "view=Masks")
    hint = phone.locator("[class*=st-key-swipe_] .attn-swipe >> visible=true").first
    hint.focus()
    assert phone.evaluate("() => document.activeElement.classList.contains('attn-swipe')")
    for _ in range(6):
        phone.keyboard.press("ArrowRight")
    phone.wait_for_timeout(400)
    scrolled = phone.evaluate("() => document.activeElement.closest('[class*=st-key-wide_]').scrollLeft")
    assert scrolled > 20
    phone.context.close()
