"""One real-browser run: the Streamlit server on a free port, Debian's chromium driven by Playwright.

Skipped cleanly without ``/usr/bin/chromium`` (``apt-get install chromium``) or the ``playwright`` package.
The screenshot lands in ``test-artifacts/browser.png``.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from bench.browser import (
    APP_HEATMAP,
    CHROMIUM,
    IDLE_JS,
    PICTURE,
    PICTURE_SVG_JS,
    RUN_OVER_JS,
)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.browser


@pytest.fixture()
def server(tiny_server):
    return tiny_server  # one server for the session (tests/conftest.py)


@pytest.fixture(scope="module")
def chromium(request):
    """Debian's chromium, launched once for the module (tests/conftest.py's ``browser``); each test opens its own
    pages, each in a fresh context."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    return request.getfixturevalue("browser")


def test_translate_in_a_real_browser(server, chromium):
    console_errors: list[str] = []
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    page = chromium.new_page(viewport={"width": 1400, "height": 1800})
    try:
        page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: console_errors.append(str(e)))
        page.goto(server, wait_until="domcontentloaded")
        box = page.locator("[data-testid=stTextArea] textarea")
        box.wait_for(timeout=90_000)
        text = "A man <b>rides</b> a red bike & a dog runs in the park."
        box.fill(text)
        box.press("Control+Enter")  # commit the text
        page.get_by_role("button", name="Translate").click()
        # the heatmap of the new sentence: '<' is not in the tiny vocabulary, so its pieces include <unk>,
        # which must show as typed (an unescaped label would vanish as an unknown tag)
        page.wait_for_function(
            f"(() => {{ const s = {PICTURE_SVG_JS}; return !!s && [...s.querySelectorAll('text.xtick')]"
            ".some(e => e.lastChild.textContent.startsWith('<unk>')); })()", timeout=90_000)
        page.locator(APP_HEATMAP).first.wait_for(timeout=30_000)
        page.screenshot(path=str(out / "browser.png"))
        # the translation is on the page, markup in the input stays text
        assert page.locator("[data-testid=stText]").count() >= 1
        assert page.locator("b", has_text="rides").count() == 0
        assert page.locator("[data-testid=stException]").count() == 0
        assert page.locator("[data-testid=stAlertContentError]").count() == 0
        # another view, no model run needed
        page.locator("[data-testid=stButtonGroup] button", has_text="All heads").first.click()
        page.get_by_text("every head (rows = layers").first.wait_for(timeout=60_000)
        assert page.locator("[data-testid=stException]").count() == 0
        # a click on a cell of the grid (layer 2, head 2) opens that head large
        grid = page.locator(".js-plotly-plot", has_text="every head (rows = layers").first
        grid.locator(".scatterlayer .point").first.wait_for(state="attached", timeout=30_000)
        x, y = grid.evaluate("""gd => {
            const cells = gd._fullData[1], xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const i = cells.customdata.findIndex(c => c[0] === 2 && c[1] === 2);
            const box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.l2p(cells.x[i]), box.top + ya._offset + ya.l2p(cells.y[i])];
        }""")
        page.mouse.move(x, y)
        page.mouse.click(x, y)
        page.mouse.move(5, 5)  # away from the grid: no hover label in the way
        page.get_by_text(re.compile(r"attention · layer 2 · head 2$")).first.wait_for(timeout=60_000)
        assert page.locator("[data-testid=stButtonGroup] button[aria-pressed=true]", has_text="L2 · H2").count() \
            + page.locator("[data-testid=stButtonGroup] [aria-checked=true]", has_text="L2 · H2").count() >= 1
        assert page.locator("[data-testid=stException]").count() == 0
        assert "text=" in page.url  # the address carries the input
    finally:
        page.context.close()
    assert not console_errors, console_errors


def _open(chromium, server: str, width: int = 1600, height: int = 1000, query: str = ""):
    """A page in a fresh context, its first heatmap drawn (close its ``context`` when done)."""
    page = chromium.new_page(viewport={"width": width, "height": height})
    page.goto(server + query, wait_until="domcontentloaded")
    page.locator(APP_HEATMAP).first.wait_for(timeout=90_000)
    return page


def _translate(page, text: str) -> None:
    """Type, Ctrl+Enter and click Translate at once, as a quick visitor does: the click leaves before the address
    of the Ctrl+Enter run has arrived."""
    box = page.locator("[data-testid=stTextArea] textarea")
    box.fill(text)
    box.press("Control+Enter")
    page.get_by_role("button", name="Translate").click()
    page.wait_for_function("t => new URLSearchParams(location.search).get('text') === t", arg=text, timeout=60_000)


def _settled(page) -> None:
    """Once no run is in progress, twice 0.5 s apart: Ctrl+Enter then Translate queue two runs, and between them
    the page says no run for a moment. (What Back does to a run still in flight is not what these tests ask.)"""
    for _ in range(2):
        page.wait_for_function(f"() => {RUN_OVER_JS}", polling=100, timeout=120_000)
        page.wait_for_timeout(500)


def _shown_after(page, text: str) -> tuple[str, str]:
    """(the address's text, the box's text) once both say ``text`` (or after 30 s) and 1.5 s more: on a busy
    machine the address arrives late, but a page that undoes the visitor's input shows the undoing by then."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function("t => new URLSearchParams(location.search).get('text') === t && "
                               "document.querySelector('[data-testid=stTextArea] textarea').value === t",
                               arg=text, timeout=30_000)
    page.wait_for_function(IDLE_JS, timeout=60_000)
    page.wait_for_timeout(1500)
    return (page.evaluate("() => new URLSearchParams(location.search).get('text')"),
            page.locator("[data-testid=stTextArea] textarea").input_value())


def test_ctrl_enter_then_translate_keeps_what_was_typed(server, tiny_checkpoint, chromium):
    """Each new sentence stays in the box, the address and the translation: a click that carries the address of
    the run before must not bring the previous sentence back (before the fix, 8 of 12 such submissions showed the
    previous sentence in the box or the address)."""
    import transformer

    tr = transformer.load(tiny_checkpoint, device="cpu")
    texts = ["A man rides a red bike.", "Two dogs play in the park.", "A girl walks on the beach.",
             "The boy kicks a blue ball.", "A woman sings on a stage.", "Three men climb a rock."]
    page = _open(chromium, server)
    try:
        box = page.locator("[data-testid=stTextArea] textarea")
        wrong = []
        for text in texts:
            box.fill(text)
            box.press("Control+Enter")
            page.get_by_role("button", name="Translate").click()
            shown = _shown_after(page, text)
            if shown != (text, text):
                wrong.append((text, shown))
        assert not wrong, wrong
        page.get_by_text(tr.translate(texts[-1]).text, exact=True).first.wait_for(timeout=60_000)
        assert page.locator("[data-testid=stException]").count() == 0
    finally:
        page.context.close()


def test_back_and_forward_move_between_sentences(server, tiny_checkpoint, chromium):
    import transformer

    tr = transformer.load(tiny_checkpoint, device="cpu")
    first, second = "A man rides a red bike.", "Two dogs play in the park."
    page = _open(chromium, server)
    try:
        _translate(page, first)
        _settled(page)
        _translate(page, second)
        page.get_by_text(tr.translate(second).text, exact=True).first.wait_for(timeout=60_000)
        _settled(page)
        page.go_back(wait_until="commit", timeout=60_000)
        page.wait_for_function("t => new URLSearchParams(location.search).get('text') === t", arg=first,
                               timeout=60_000)
        page.get_by_text(tr.translate(first).text, exact=True).first.wait_for(timeout=60_000)
        page.wait_for_timeout(1500)  # the app must not write the newer state back over the address
        assert "Two+dogs" not in page.url and "Two%20dogs" not in page.url
        assert page.locator("[data-testid=stTextArea] textarea").input_value() == first
        _settled(page)
        page.go_forward(wait_until="commit", timeout=60_000)
        page.get_by_text(tr.translate(second).text, exact=True).first.wait_for(timeout=60_000)
        assert page.locator("[data-testid=stException]").count() == 0
    finally:
        page.context.close()


def test_back_from_a_link_leaves_it_at_once(server, chromium):
    """A link opened (without the decoding settings the page fills in) stays as it was in the address bar, so the
    browser's Back goes to the page before it, not to the same link again."""
    page = chromium.new_page()
    try:
        before, link = f"{server}/?text=A+dog+runs.&view=heatmap", f"{server}/?text=Two+men+talk.&view=masks"
        for url in (before, link):
            page.goto(url)
            page.wait_for_selector("[data-testid=stPlotlyChart], [class*=st-key-attn_picture_] img",
                                   timeout=120_000)
            # the run's end, when the page writes its address
            page.wait_for_function(f"() => {RUN_OVER_JS}", polling=100, timeout=120_000)
            page.wait_for_timeout(300)
            assert page.url == url
        page.go_back()
        page.wait_for_function("t => new URLSearchParams(location.search).get('text') === t",
                               arg="A dog runs.", timeout=60_000)
        page.wait_for_timeout(1500)
        assert page.url == before
    finally:
        page.context.close()


def test_first_screen_shows_the_heatmap_and_the_view_selector(server, chromium):
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    # a caption-length output, as the shipped model gives (the tiny random model would ramble to the limit)
    page = _open(chromium, server, query="/?text=A+dog+runs+on+the+beach.&a=0&b=14")
    try:
        page.wait_for_timeout(500)
        page.screenshot(path=str(out / "first-screen.png"))
        heatmap = page.locator(PICTURE).first.bounding_box()
        selector = page.locator("[data-testid=stButtonGroup]", has_text="All heads").first.bounding_box()
        assert selector is not None and 0 <= selector["y"] < 1000 - selector["height"]
        assert heatmap is not None and heatmap["y"] < 1000 - 150  # the chart starts above the fold
    finally:
        page.context.close()


def test_views_beyond_weights_in_a_real_browser(server, chromium):
    """Inside a head, What drives each word, Layer by layer and Beam tree open from links and draw their charts."""
    errors: list[str] = []
    context = chromium.new_context(viewport={"width": 1600, "height": 1000})  # one cache: the page's code loaded once
    try:
        # links naming the views by their titles (as links were written before the keys): they still open, each
        # in a new page (a session of its own)
        for view, title in (("Inside+a+head&head=2", "Softmax weights"),
                            ("What+drives+each+word", "Attribution to the source"),
                            ("Layer+by+layer", "Probability of the piece"), ("Beam+tree", "Beam search tree")):
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(f"{server}/?text=A+dog+runs+on+the+beach.&a=0&b=8&view={view}", wait_until="domcontentloaded")
            page.get_by_text(title).first.wait_for(timeout=90_000)
            assert page.locator("[data-testid=stException]").count() == 0
            assert page.locator("[data-testid=stAlertContentError]").count() == 0
            page.close()
    finally:
        context.close()
    assert not errors, errors
