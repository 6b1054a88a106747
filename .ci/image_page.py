"""What ``.ci/image_check`` has Chromium look for on the started image: the half of the check that reads the page.

A visitor of the image sees a translation and, before anything else, a picture of its attention. The check waits for
what the visitor sees, not for how it is drawn: the translation's text, and a picture *named for this sentence*: an
image, an inline SVG, a plotly chart or a canvas in the page's main area whose name (``alt``, ``aria-label``,
``title``) or labels (the text drawn in it: an SVG image's own text read from its source, a chart's tick labels) hold
the sentence, its translation, or every word-piece of either. So drawing the picture another way does not break the
check, and a page without it, or with a picture of another sentence, fails it.

Then the image's other promises: Whole test set says why the source text is missing while ``ATTN_DATA_DIR`` has no
copy of the split (and shows it once it has one), the second model of ``ATTN_MODELS`` opens in public mode, and no
page shows a stack trace (``Traceback`` in its text, or Streamlit's exception element).
"""

from __future__ import annotations

import re
import time
from pathlib import PurePosixPath
from typing import Any, TypedDict
from urllib.parse import urlencode

from image_dockerfile import CheckFailed

PICTURE_SELECTOR = "img, svg, canvas, [role=img], .js-plotly-plot"
# Every picture drawn in the page's main area, in page order, that is not part of another (a plotly chart's own SVG
# layers, an SVG inside an SVG) and not stale (Streamlit's element of a run that is being replaced): how it is drawn,
# its name and its text. An SVG image's text is read from its own source (a data: address); a picture elsewhere
# (an image file) has its name only.
PICTURES_JS = """sel => {
  const main = document.querySelector('[data-testid=stMain]') || document.body;
  const ofSvg = src => {
    const data = src.slice(src.indexOf(',') + 1);
    const text = /;base64,/.test(src.slice(0, src.indexOf(',') + 1))
      ? new TextDecoder().decode(Uint8Array.from(atob(data), c => c.charCodeAt(0))) : decodeURIComponent(data);
    const svg = new DOMParser().parseFromString(text, 'image/svg+xml').documentElement;
    return [svg.getAttribute('aria-label') || '', svg.textContent || ''];
  };
  const nameOf = e => e.getAttribute('alt') || e.getAttribute('aria-label') || e.getAttribute('title') ||
    (e.querySelector('.gtitle') || {}).textContent || '';
  return [...main.querySelectorAll(sel)]
    .filter(e => !(e.parentElement && e.parentElement.closest(sel)) && !e.closest('[data-stale=true]'))
    .filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; })
    .map(e => {
      const tag = e.tagName.toLowerCase(), src = tag === 'img' ? (e.getAttribute('src') || '') : '';
      if (src.startsWith('data:image/svg+xml')) {
        const [label, text] = ofSvg(src);
        return {how: 'an SVG image', name: [...new Set([nameOf(e), label].filter(Boolean))].join(' / '), text};
      }
      const how = e.classList.contains('js-plotly-plot') ? 'a plotly chart'
        : tag === 'img' ? 'an image' : tag === 'svg' ? 'an inline SVG' : tag === 'canvas' ? 'a canvas' : tag;
      return {how, name: nameOf(e), text: tag === 'img' ? '' : e.textContent || ''};
    });
}"""
PROBLEMS_JS = "() => [document.body.innerText, document.querySelectorAll('[data-testid=stException]').length]"
NOTICE_SELECTOR = "[data-testid^=stAlert]"  # st.info, st.warning, st.error
BUSY = "[data-stale=true], [data-testid=stStatusWidgetRunningIcon]"  # a run not finished yet
SPECIAL = re.compile(r"<[^<>]*>")  # </s>, <unk>: a picture may leave them out


class Expected(TypedDict):
    """What a sentence's page must show: ``translations`` (any of them: beam or greedy search), and a picture named
    for the sentence: ``sentence``, a translation, or all of one of ``pieces`` (the source's and each
    translation's word-pieces, as ``transformer.load(...).translate`` gives them)."""

    sentence: str
    translations: list[str]
    pieces: list[list[str]]


def _flat(text: str) -> str:
    return " ".join(text.replace("\u2581", " ").split())


def names_sentence(picture: dict[str, str], expected: Expected) -> bool:
    """Whether ``picture`` (one of :data:`PICTURES_JS`'s) is named for the sentence: its name or its text holds the
    sentence or one of its translations, or every piece of the source or of a translation (the longer pieces when a
    sentence has any of 3 characters or more: "a", "." and "in" are in every caption's picture)."""
    text = picture.get("name", "") + "\n" + picture.get("text", "")
    flat = _flat(text)
    if any(_flat(t) and _flat(t) in flat for t in [expected["sentence"], *expected["translations"]]):
        return True
    bare = text.replace("\u2581", "")
    for pieces in expected["pieces"]:
        words = {p.replace("\u2581", "").strip() for p in pieces if not SPECIAL.fullmatch(p.strip())} - {""}
        long = {w for w in words if len(w) >= 3} or words
        if long and all(w in bare for w in long):
            return True
    return False


def pictures(page: Any) -> list[dict[str, str]]:
    """The pictures on ``page`` (a Playwright page), in page order: ``{how, name, text}``."""
    return page.evaluate(PICTURES_JS, PICTURE_SELECTOR)


def problems(page: Any, errors: list[str] | None = None) -> list[str]:
    """What must never be on a page: a stack trace (``Traceback`` in its text, Streamlit's exception element) and
    the page's own script errors (``errors``, as a ``pageerror`` listener collected them)."""
    text, exceptions = page.evaluate(PROBLEMS_JS)
    out = []
    if "Traceback" in text:
        line = next(x for x in text.splitlines() if "Traceback" in x)
        out.append(f"a stack trace is on the page: {line.strip()[:120]!r}")
    if exceptions:
        out.append(f"a stack trace is on the page: {exceptions} exception element(s) (stException)")
    out += [f"an error in the page's scripts: {e}" for e in errors or []]
    return out


def settled(page: Any, errors: list[str] | None = None, timeout_s: float = 30) -> None:
    """Once what was waited for shows: let the page's run finish (``timeout_s`` at the most), then fail if anything
    on it shows a stack trace (a part drawn after the one waited for, too)."""
    deadline = time.monotonic() + timeout_s
    while page.locator(BUSY).count() and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    if trouble := problems(page, errors):
        raise CheckFailed("; ".join(trouble))


def _described(found: list[dict[str, str]]) -> str:
    if not found:
        return "no picture is on the page"
    return "the page's pictures: " + "; ".join(f"{p['how']} named {p['name'][:80]!r}" for p in found[:4])


def wait_for_translation(page: Any, expected: Expected, timeout_s: float, errors: list[str] | None = None,
                         ) -> tuple[str, dict[str, str]]:
    """Wait until ``page`` shows one of the sentence's translations and a picture named for it; ``(translation,
    picture)``. Fails at once when the page shows a stack trace, after ``timeout_s`` without both."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = page.evaluate("() => document.body.innerText")
        shown = next((t for t in expected["translations"] if t in text), None)
        found = pictures(page)
        picture = next((p for p in found if names_sentence(p, expected)), None)
        if shown and picture:
            settled(page, errors)
            return shown, picture
        if trouble := problems(page, errors):
            raise CheckFailed("; ".join(trouble))
        if time.monotonic() > deadline:
            missing = ("neither the translation nor a picture named for the sentence" if not shown and not picture
                       else "no translation" if not shown else "no picture named for the sentence")
            raise CheckFailed(f"{expected['sentence']!r}: {missing} after {timeout_s:.0f} s (translation "
                              f"{' or '.join(map(repr, expected['translations']))}; {_described(found)})")
        page.wait_for_timeout(250)


def notices(page: Any) -> list[str]:
    """The text of every notice on ``page`` (``st.info``, ``st.warning``, ``st.error``; without its icon's name)."""
    return page.locator(f"{NOTICE_SELECTOR} [data-testid=stMarkdownContainer]").all_inner_texts()


# ---------------------------------------------------------------------------------------------- the visits

def first_screen(page: Any, url: str, expected: dict[str, Expected], timeout_s: float,
                 errors: list[str]) -> tuple[Expected, str, dict[str, str]]:
    """A new visitor: the first screen, then a sentence typed (one whose picture is not on it yet) and Translate
    pressed; ``(expected, translation, picture)``."""
    page.goto(url, wait_until="domcontentloaded")
    box = page.locator("textarea").first
    box.wait_for(timeout=timeout_s * 1000)
    page.wait_for_timeout(2000)  # let a first screen finish
    shown, found = page.evaluate("() => document.body.innerText"), pictures(page)
    want = next((e for e in expected.values() if not any(t in shown for t in e["translations"])
                 and not any(names_sentence(p, e) for p in found)), None)
    if want is None:
        raise CheckFailed("every test sentence's translation or picture is already on the first screen")
    box.fill(want["sentence"])
    box.press("Control+Enter")
    page.wait_for_timeout(500)
    page.get_by_role("button", name="Translate").first.click()
    translation, picture = wait_for_translation(page, want, timeout_s, errors)
    return want, translation, picture


def link(url: str, **params: str) -> str:
    """The app's address with ``params`` (``text``, ``model``, ``view``)."""
    return f"{url.rstrip('/')}/?{urlencode(params)}"


def open_model(page: Any, url: str, model: str, expected: Expected, timeout_s: float,
               errors: list[str]) -> tuple[str, dict[str, str]]:
    """A link to a sentence with another allow-listed model: the page shows that model's translation and its
    picture, and the sidebar names the model (not the public server's refusal)."""
    page.goto(link(url, text=expected["sentence"], model=model), wait_until="domcontentloaded")
    translation, picture = wait_for_translation(page, expected, timeout_s, errors)
    refused = [n for n in notices(page) if "not offered" in n]
    if refused:
        raise CheckFailed(f"{model}: {refused[0]}")
    picker = page.evaluate("() => (document.querySelector('[data-testid=stSidebar]') || {}).textContent || ''")
    if PurePosixPath(model).name not in picker:
        raise CheckFailed(f"a link with model={model} shows a translation, but the sidebar does not name that model")
    return translation, picture


WHOLE_TEST_SET = "Whole test set"
MISSING_TEXT = re.compile(r"source.*(not|missing)|missing.*source", re.IGNORECASE | re.DOTALL)  # saying why
TABLE = "[data-testid=stDataFrame]"


def whole_test_set(page: Any, url: str, has_data: bool, timeout_s: float, line: str | None = None) -> str:
    """Whole test set with no copy of the split where the app looks (``has_data=False``): a notice says why the
    source text is missing (returned), and the table does not show ``line`` (the split's first source line, when
    known). With one: the table shows ``line``, with no such notice."""
    page.goto(link(url, view=WHOLE_TEST_SET), wait_until="domcontentloaded")
    deadline = time.monotonic() + timeout_s
    while True:
        said = next((n for n in notices(page) if MISSING_TEXT.search(n)), None)
        table = page.locator(TABLE)
        shown = table.first.evaluate("e => e.textContent") if table.count() else ""
        if not has_data and said:
            if line and line in shown:
                raise CheckFailed(f"{WHOLE_TEST_SET} says {said!r} but shows the source line {line!r}")
            settled(page)
            return said
        if has_data and shown and not said and (line is None or line in shown) and not page.locator(BUSY).count():
            settled(page)
            return ""
        if trouble := problems(page):
            raise CheckFailed(f"{WHOLE_TEST_SET}: " + "; ".join(trouble))
        if time.monotonic() > deadline:
            raise CheckFailed(f"{WHOLE_TEST_SET}, after {timeout_s:.0f} s: " + (
                f"no notice says why the source text is missing (notices: {notices(page)})" if not has_data
                else f"still the notice {said!r}" if said else f"no table showing the source line {line!r}"))
        page.wait_for_timeout(250)
