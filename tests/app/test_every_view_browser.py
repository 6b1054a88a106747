"""Every view of the registry (``app.views.VIEWS``: a new view is checked too) in a real browser (Debian's chromium
via Playwright) on the shipped model, walked once per screen: each page is loaded once and every check runs on that
loaded page; each test below asserts one check's findings, named by page and screen.

- Usable (``test_layout_browser.CHECK_JS``): no text runs off the screen or hides in a row of buttons, no chart label
  is drawn under 10 px; on a phone the sidebar starts closed. Asserted for every view on the phone and for the
  attention-type buttons at 1280 wide.
- Readable chart text (``test_overlap_browser``): no two pieces of chart text over one another, no label under 10 px;
  a chart that scrolls says so, its frozen row labels at its rows; the buttons of a row that wraps are whole. On the
  phone and the laptop.
- axe-core's WCAG 2 A/AA rules (contrast, names, focusable scrolling regions...) find nothing: every view on the
  phone (where charts scroll and rows of buttons wrap), the first screen (Heatmap, Masks) on the desktop and the
  laptop; ``ATTN_AXE_SCREENS=desktop,laptop,phone`` runs every view at each of those sizes.

The phone's and the laptop's walks open every view with a 16-word caption, then the first picture and an opened
head with a short output (its axis titles and labels, issue 48 §2); the desktop's opens what axe reads there.
Screenshots of the pages whose chart text overlaps go to ``test-artifacts/overlap-*.png``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from test_layout_browser import CHECK_JS, MIN_LABEL_PX, _settled
from test_overlap_browser import BOXES_JS, CAPTION, PAGE_JS, SHORT, SHORT_PAGES, problems

from bench.browser import SCREENS, new_context

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_FIRST = ("heatmap", "masks")  # the first screen's views, read by axe at every size
READ = ("phone", "laptop")  # the screens whose every view is checked for usable and readable text
TYPE_BUTTON_VIEWS = ("inside_a_head", "compare_models", "heatmap", "all_heads")  # attention-type buttons


def _axe_every() -> set[str]:
    """The screens on which axe reads every view: the phone, unless ``ATTN_AXE_SCREENS`` names others."""
    return {s for s in os.environ.get("ATTN_AXE_SCREENS", "phone").split(",") if s in SCREENS}


def _pages(screen: str) -> list[tuple[str, str, bool]]:
    """A screen's walk: (the page's name, its address's query, whether axe reads it)."""
    from app.views import VIEWS

    every = screen in _axe_every()
    views = list(VIEWS) if screen in READ or every else list(AXE_FIRST)
    pages = [(view, f"text={CAPTION.replace(' ', '+')}&view={view}", every or view in AXE_FIRST) for view in views]
    if screen in READ:
        pages += [(f"{view} (short)", f"text={SHORT.replace(' ', '+')}&att=decoder&view={view}", False)
                  for view in SHORT_PAGES]
    return pages


def _walk(browser, server: str, screen: str) -> dict[str, Any]:
    """Open each page of ``screen``'s walk once and read every check on it: ``{"sidebar": its box on arrival,
    "pages": {name: {"exception", "usable", "overlap", "axe"}}}`` (a check not read there: ``None``)."""
    try:
        from axe_playwright_python.sync_playwright import Axe
    except ImportError:  # the dev extras without axe: its test skips
        Axe = None  # noqa: N806
    axe = Axe() if Axe else None
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    context = new_context(browser, screen)
    page = context.new_page()
    readings: dict[str, Any] = {"sidebar": None, "pages": {}}
    try:
        for i, (name, query, axe_reads) in enumerate(_pages(screen)):
            page.goto(f"{server}/?{query}", wait_until="domcontentloaded")
            _settled(page)
            if i == 0:
                readings["sidebar"] = page.locator("[data-testid=stSidebar]").bounding_box()
            found: dict[str, Any] = {"exception": page.locator("[data-testid=stException]").count() > 0,
                                     "usable": None, "overlap": None, "axe": None}
            if screen in READ:
                found["usable"] = page.evaluate(CHECK_JS, MIN_LABEL_PX)
                pairs, small = problems(page.evaluate(BOXES_JS))
                found["overlap"] = {"pairs": pairs, "small": small,
                                    **{k: v for k, v in page.evaluate(PAGE_JS).items() if v}}
                if pairs or small or len(found["overlap"]) > 2:
                    page.screenshot(path=str(out / f"overlap-{screen}-{name.replace(' ', '-')}.png"))
            if axe_reads and axe is not None:
                result = axe.run(page, options={"runOnly": {"type": "tag", "values": AXE_TAGS},
                                                "resultTypes": ["violations"]})
                found["axe"] = [(v["id"], [n["target"] for n in v["nodes"][:3]])
                                for v in result.response["violations"]]
            readings["pages"][name] = found
    finally:
        context.close()
    return readings


@pytest.fixture(scope="module")
def walked(shipped_server, browser):
    """``walked(screen)``: that screen's readings (:func:`_walk`), walked once for the module."""
    done: dict[str, Any] = {}

    def walk(screen: str) -> dict[str, Any]:
        if screen not in done:
            try:
                done[screen] = _walk(browser, shipped_server, screen)
            except Exception as error:  # a walk that broke fails each of its tests, without walking again
                done[screen] = error
        if isinstance(done[screen], Exception):
            raise done[screen]
        return done[screen]

    return walk


def _no_trace(readings: dict[str, Any], screen: str) -> None:
    traced = [name for name, found in readings["pages"].items() if found["exception"]]
    assert not traced, f"a stack trace on the page at {screen}: {traced}"


def test_every_view_is_usable_on_a_phone(walked):
    readings = walked("phone")
    sidebar = readings["sidebar"]
    assert sidebar is None or sidebar["x"] + sidebar["width"] <= 1, sidebar  # closed on arrival
    _no_trace(readings, "phone")
    problems_found = {name: {k: v[:5] for k, v in found["usable"].items() if v}
                      for name, found in readings["pages"].items() if any(found["usable"].values())}
    assert not problems_found, ("phone", problems_found)


def test_attention_type_buttons_are_whole_on_a_laptop(walked):
    """Inside a head and Compare models at 1280 wide: no attention-type option hidden ("r self-attention")."""
    readings = walked("laptop")
    _no_trace(readings, "laptop")
    for view in TYPE_BUTTON_VIEWS:
        found = readings["pages"][view]["usable"]
        assert not found["clipped"] and not found["overflow"], ("laptop", view, found)


@pytest.mark.parametrize("screen", READ)
def test_no_chart_text_overlaps_in_any_view(walked, screen):
    readings = walked(screen)
    _no_trace(readings, screen)
    found = {}
    for name, reading in readings["pages"].items():
        pairs, small = reading["overlap"]["pairs"], reading["overlap"]["small"]
        rest = {k: v for k, v in reading["overlap"].items() if k not in ("pairs", "small")}
        if pairs or small or rest:
            found[name] = {"pairs": len(pairs), "first": pairs[:4], "small": small[:4], **rest}
    assert not found, (screen, found)


@pytest.mark.parametrize("screen", list(SCREENS))
def test_axe_finds_no_wcag_violation_in_any_view(walked, screen):
    """Issue 57 §20: axe-core's WCAG 2 A and AA rules find nothing in each view of the registry."""
    pytest.importorskip("axe_playwright_python")
    readings = walked(screen)
    _no_trace(readings, screen)
    read = {name: found["axe"] for name, found in readings["pages"].items() if found["axe"] is not None}
    assert set(AXE_FIRST) <= set(read), (screen, sorted(read))
    found = {name: violations for name, violations in read.items() if violations}
    assert not found, (screen, found)
