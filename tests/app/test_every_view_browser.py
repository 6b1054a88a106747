"""Every view of the registry (``app.views.VIEWS``: a new view is checked too) in a real browser (Debian's chromium
via Playwright) on the shipped model, walked once per screen in one session, as a visitor goes: the first view is
loaded by its address, every other view is opened by clicking its group and its pill (``bench.app_views.switch``),
and each check runs once that view's run is over, nothing stale or loading (``_settled``); the short pages below are
loaded by address. Each page must show the view asked for (its address's ``view=``, before and after the readings),
with no stack trace and no error (a view that cannot be drawn says so in one: ``app.main.render_view``); each test
below asserts one check's findings, named by page and screen.

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

from bench.app_views import URL_VIEW_JS, switch
from bench.browser import RUN_OVER_JS, SCREENS, SETTLED_JS, new_context

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_FIRST = ("heatmap", "masks")  # the first screen's views, read by axe at every size
READ = ("phone", "laptop")  # the screens whose every view is checked for usable and readable text
SWITCH_S = 120.0  # the most seconds a view may take to open by its pills (as ``_settled`` waits for a page)
TYPE_BUTTON_VIEWS = ("inside_a_head", "compare_models", "heatmap", "all_heads")  # attention-type buttons


def _axe_every() -> set[str]:
    """The screens on which axe reads every view: the phone, unless ``ATTN_AXE_SCREENS`` names others."""
    return {s for s in os.environ.get("ATTN_AXE_SCREENS", "phone").split(",") if s in SCREENS}


def _pages(screen: str) -> list[tuple[str, str, str | None, bool]]:
    """A screen's walk: (the page's name, its view's key, its address's query or ``None``: opened by its pills in the
    session of the page before, whether axe reads it). The first view and the short pages are loaded by address."""
    from app.views import VIEWS

    every = screen in _axe_every()
    views = list(VIEWS) if screen in READ or every else list(AXE_FIRST)
    first = f"text={CAPTION.replace(' ', '+')}&view={views[0]}"
    pages = [(view, view, first if i == 0 else None, every or view in AXE_FIRST) for i, view in enumerate(views)]
    if screen in READ:
        pages += [(f"{view} (short)", view.split("&")[0], f"text={SHORT.replace(' ', '+')}&att=decoder&view={view}",
                   False) for view in SHORT_PAGES]
    return pages


def _open(page, server: str, view: str, query: str | None) -> None:
    """Open ``view``: load ``query``'s address (a new session), or click its group and its pill as a visitor does
    (``bench.app_views.switch``: until the address names the view and nothing is running, stale or loading; the
    page was already quiet: settled, read, and still settled after the readings); then wait as for a page loaded
    (:func:`_settled`: the run over, no element of the view before left)."""
    if query is not None:
        page.goto(f"{server}/?{query}", wait_until="domcontentloaded")
    else:
        try:
            switch(page, view, SWITCH_S, quiet=False)
        except Exception as error:  # names the view it could not open (the walk fails each of its screen's tests)
            raise AssertionError(f"could not switch to {view} by its pills: {type(error).__name__}: {error}") from None
    _settled(page)


def _walk(browser, server: str, screen: str) -> dict[str, Any]:
    """Open each page of ``screen``'s walk (:func:`_pages`, :func:`_open`: the first view by address, every other
    view by its pills in that session, the short pages by address) and read every check on it: ``{"sidebar": its
    box on arrival, "pages": {name: {"asked", "view", "exception", "errors", "usable", "overlap", "axe"}}}``
    (a check not read there: ``None``; ``asked``: the view's key, ``view``: the view the address names before and
    after the readings)."""
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
        for i, (name, view, query, axe_reads) in enumerate(_pages(screen)):
            _open(page, server, view, query)
            if i == 0:
                readings["sidebar"] = page.locator("[data-testid=stSidebar]").bounding_box()
            found: dict[str, Any] = {"asked": view, "view": [page.evaluate(URL_VIEW_JS)],
                                     "exception": page.locator("[data-testid=stException]").count() > 0,
                                     "errors": page.locator("[data-testid=stMain] [data-testid=stAlertContentError]")
                                     .all_inner_texts(),
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
            # still that view, its run over and nothing stale: the readings were of it alone
            found["view"].append(page.evaluate(URL_VIEW_JS) if page.evaluate(f"() => {RUN_OVER_JS} && {SETTLED_JS}")
                                 else "a run began during the readings")
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
    """Each page showed the view it was opened for (its address's ``view=``, before and after the readings), with
    no stack trace and no error (``st.error``: a view that cannot be drawn shows one, ``app.main.render_view``)."""
    wrong = {name: {"asked": found["asked"], "shown": found["view"]} for name, found in readings["pages"].items()
             if any(v != found["asked"] for v in found["view"])}
    assert not wrong, f"pages read at {screen} that showed another view (the address's view=): {wrong}"
    traced = [name for name, found in readings["pages"].items() if found["exception"]]
    assert not traced, f"a stack trace on the page at {screen}: {traced}"
    errors = {name: found["errors"] for name, found in readings["pages"].items() if found["errors"]}
    assert not errors, f"an error on the page at {screen}: {errors}"


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
