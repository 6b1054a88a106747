"""What issue 68's visitor meets, in Debian's chromium (Playwright) on the shipped model, at the size where each item
was seen: on a phone, a 40-word sentence whole in the text box, a group's tap that opens nothing and a view's tap
that brings the view into sight; on a desktop, the Model card toggle that stays put whatever the group, arrow keys
that select a view, Ablation's chart where heads are off, the test set's histogram labels apart and its legend
uncovered, Training evolution's labels readable on a 47-piece sentence, the weights' dtype beside the device, and
what waits for a long run dimmed in one step (the lens' probabilities, in a data grid drawn on a canvas, are read
in ``test_words``)."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, quote, urlparse

import pytest
from test_layout_browser import _settled

from bench.browser import new_context

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# 40 words, one sentence (a caption of Multi30k's kind, written here: the test needs no data set)
LONG = ("A man in a red shirt and a woman with a blue hat walk their dog past the old church while two "
        "children on bicycles ride down the wet street and a man sells flowers at a small wooden stand.")
SHORT = "A man in a blue shirt is riding a bike down the street."


def _view(page) -> str:
    return parse_qs(urlparse(page.url).query).get("view", ["heatmap"])[0]


def _pill(page, title: str):
    return page.locator("[data-testid=stButtonGroup] button", has_text=re.compile(rf"{re.escape(title)}$")).first


def _open(page, server: str, text: str, query: str = "") -> None:
    page.goto(f"{server}/?text={quote(text)}{'&' + query if query else ''}", wait_until="domcontentloaded")
    _settled(page)
    assert page.locator("[data-testid=stException]").count() == 0


VIEW_TOP_JS = "() => document.querySelector('.st-key-view_top').getBoundingClientRect().top"


def test_on_a_phone_the_text_shows_whole_and_a_tap_on_a_view_brings_it_into_sight(shipped_server, browser):
    """Issue 68 §1, §2 on a phone (390 x 844, touch)."""
    assert len(LONG.split()) == 40
    page = new_context(browser, "phone").new_page()
    _open(page, shipped_server, LONG)
    box = page.locator("[data-testid=stTextArea] textarea")
    box.click()
    page.keyboard.press("Control+End")  # the caret at the end: the box must not have scrolled its first line away
    assert box.evaluate("t => [t.scrollTop, t.scrollHeight - t.clientHeight]") == [0, 0]
    far = 844 * 0.75  # below three quarters of the screen: where a view just picked is brought into sight
    assert page.evaluate(VIEW_TOP_JS) > far  # the view starts far down; a first visit stays at the top
    _pill(page, "Inside the model").tap()  # a group: its views show, none opens (no work)
    _pill(page, "Masks").wait_for(state="visible")
    _settled(page)
    assert _view(page) == "heatmap" and page.evaluate(VIEW_TOP_JS) > far  # nothing moved, nothing ran
    _pill(page, "Masks").tap()
    page.wait_for_function("() => new URLSearchParams(location.search).get('view') === 'masks'", timeout=120_000)
    _settled(page)
    page.wait_for_timeout(500)
    top = page.evaluate(VIEW_TOP_JS)
    assert 0 <= top <= 844 * 0.25, top  # the view just picked is in sight, near the top
    page.context.close()


@pytest.mark.parametrize("screen", ["laptop", "desktop"])
def test_on_a_wider_screen_too_the_text_shows_whole_in_its_box(shipped_server, browser, screen):
    """A 40-word sentence takes three lines of the text box on a laptop: the box grows to show them all (up to four
    lines), as on a phone, where it had shown two and a half (the third cut at its edge); the heatmap stays on the
    laptop's first screen."""
    page = new_context(browser, screen).new_page()
    _open(page, shipped_server, LONG)
    box = page.locator("[data-testid=stTextArea] textarea")
    assert box.evaluate("t => t.scrollHeight - t.clientHeight") == 0  # no line hidden or cut
    top = page.locator(".st-key-view_top").first.evaluate("e => e.getBoundingClientRect().top")
    assert top < page.viewport_size["height"] * 0.5, top  # the view starts in the upper half of the first screen
    page.context.close()


TOGGLE_JS = ("() => { const r = document.querySelector('.st-key-show_card').getBoundingClientRect();"
             " return [r.x, r.y]; }")


def test_on_a_desktop_the_page_keeps_its_place_and_says_what_it_shows(shipped_server, browser):
    """Issue 68 §5-§8 at 1600 x 1000."""
    page = new_context(browser, "desktop").new_page()
    _open(page, shipped_server, SHORT)
    assert "Weights in float32; attention weights" in page.locator("[data-testid=stSidebar]").inner_text()
    where = page.evaluate(TOGGLE_JS)
    for group in ("Across data", "Attention"):  # §6: the toggle stays put whatever the group's pills
        _pill(page, group).click()
        _settled(page)
        assert page.evaluate(TOGGLE_JS) == pytest.approx(where, abs=1), group
    heatmap = page.locator(".st-key-view [role=radio][aria-checked=true]")  # §8: an arrow selects, as in any radio
    heatmap.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => new URLSearchParams(location.search).get('view') === 'all_heads'", timeout=120_000)
    _settled(page)
    # §5: Ablation opens its heads-off chart where heads are off
    _open(page, shipped_server, SHORT, "view=ablation&off=encoder.4.2,encoder.4.4,decoder.1.2,cross.1.2")
    titles = page.locator(".st-key-ablation_heads_off_chart .gtitle").all_text_contents()
    assert any(t.startswith("heads off: Encoder self-attention · layer 4 · mean over the 2 heads") for t in titles)
    # §7: the histogram's threshold and open-line labels apart; no toolbar over the legends
    _open(page, shipped_server, SHORT, "view=whole_test_set&line=983&signal=flag_score")
    labels = page.locator(".st-key-testset_histogram .annotation").all()
    boxes = [label.bounding_box() for label in labels]
    assert len(boxes) == 2, boxes
    a, b = boxes
    assert a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"] or \
        a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"], boxes
    page.locator(".st-key-testset_histogram .js-plotly-plot").hover()
    assert page.locator(".st-key-testset_histogram .modebar, .st-key-testset_scatter .modebar").count() == 0
    # §7: Training evolution on a 47-piece sentence: each row label its own line, no column label past the chart
    _open(page, shipped_server, LONG, "view=training_evolution")
    chart = page.locator(".st-key-evolution_chart .js-plotly-plot").first
    pitch, size = chart.evaluate("d => { const a = d._fullLayout.yaxis; return [Math.abs(a.l2p(1) - a.l2p(0)),"
                                 " a.tickfont.size]; }")
    assert pitch >= size, (pitch, size)
    right = chart.bounding_box()
    ticks = [t.bounding_box() for t in chart.locator(".xtick text").all()]
    assert ticks and max(t["x"] + t["width"] for t in ticks) <= right["x"] + right["width"] + 1
    page.context.close()


# Each frame while the page's script runs: whether the page shows the view being drawn (``NEW``, text of its own)
# beside a chart of the view the visitor left (``OLD``, a chart box's key), and how many charts the view area holds.
WATCH_JS = """([old, fresh]) => { window.__frames = []; const main = document.querySelector('[data-testid=stMain]');
  const look = () => {
    const app = document.querySelector('[data-test-script-state]');
    if (app && app.getAttribute('data-test-script-state') === 'running')
      window.__frames.push({both: main.textContent.includes(fresh) && !!main.querySelector(`.st-key-${old}`),
                            charts: main.querySelectorAll('.js-plotly-plot').length});
    requestAnimationFrame(look);
  };
  requestAnimationFrame(look); }"""
NEW = "how much each source piece and each earlier output piece pushed"  # What drives each word's own words


def test_a_view_just_picked_shows_nothing_of_the_last_one_while_it_works(shipped_server, browser):
    """While a view just picked computes (integrated gradients on 40 words: a second or more), the page shows its
    title and progress and nothing of the view left, whose charts would sit under the new view's name; the same
    view run again (another method) keeps its charts in place until the new ones come (no blank, no jump)."""
    page = new_context(browser, "desktop").new_page()
    _open(page, shipped_server, LONG, "view=source_or_prefix")
    assert page.locator(".st-key-source_prefix_share .js-plotly-plot").count() == 1
    page.evaluate(WATCH_JS, ["source_prefix_share", NEW])
    _pill(page, "What drives each word").click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('view') === 'what_drives_each_word'",
                           timeout=120_000)
    _settled(page)
    frames = page.evaluate("window.__frames")
    assert frames, "no frame seen while the view was drawn"
    assert not any(f["both"] for f in frames), sum(f["both"] for f in frames)  # never both views' pieces at once
    assert page.locator(".st-key-source_prefix_share").count() == 0
    page.evaluate(WATCH_JS, ["source_prefix_share", NEW])
    page.locator("[data-testid=stButtonGroup] button", has_text="Input × gradient").first.click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('method') === 'input_x_gradient'",
                           timeout=120_000)
    _settled(page)
    frames = page.evaluate("window.__frames")
    assert frames and min(f["charts"] for f in frames) > 0, frames[:5]  # the charts stayed while it ran
    page.context.close()


# Each frame while the page's script runs: how many fades are running on what waits for the run (an element the run
# has not sent again yet, or an expander, which Streamlit fades on its own), and how many waiting elements are dimmed
WAITING_JS = """() => { window.__waiting = []; const look = () => {
    const app = document.querySelector('[data-test-script-state]');
    if (app && app.getAttribute('data-test-script-state') === 'running') {
      const fading = document.getAnimations().filter(a => a instanceof CSSTransition && a.playState === 'running'
        && a.effect.getTiming().duration > 0 && a.effect.target.closest('[data-stale=true], [data-testid=stExpander]'));
      const dimmed = [...document.querySelectorAll('[data-stale=true]')]
        .filter(e => parseFloat(getComputedStyle(e).opacity) < 0.5);
      window.__waiting.push({fading: fading.length, dimmed: dimmed.length});
    }
    requestAnimationFrame(look);
  };
  requestAnimationFrame(look); }"""


def test_while_a_view_works_what_waits_is_dimmed_in_one_step_not_faded(shipped_server, browser):
    """While integrated gradients run on 40 words (a second or more), what the run has not sent again yet (the input
    area, the sidebar, the last charts) is dimmed after half a second, as Streamlit does, but in one step: Streamlit's
    one-second fade drew the whole page again at every frame, on the cores the run needs. Before: fades running in
    the frames of the run's second half-second."""
    page = new_context(browser, "desktop").new_page()
    _open(page, shipped_server, LONG, "view=what_drives_each_word&method=input_x_gradient")
    page.evaluate(WAITING_JS)
    page.locator("[data-testid=stButtonGroup] button", has_text="Integrated gradients").first.click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('method') === 'integrated_gradients'",
                           timeout=120_000)
    _settled(page)
    frames = page.evaluate("window.__waiting")
    assert frames, "no frame seen while the run lasted"
    assert max(f["fading"] for f in frames) == 0, [f["fading"] for f in frames]
    assert max(f["dimmed"] for f in frames) > 0, "nothing dimmed while the run lasted"  # the sign of work kept
    page.context.close()
