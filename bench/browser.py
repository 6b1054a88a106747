"""The browser and server helpers the app benches share: a ``streamlit run`` server on a free local port, Debian's
``chromium`` for Playwright, and the page checks (heatmap drawn, page settled, no script running).

Used by ``bench.app_browser`` (and its ``--views`` / ``--split`` modes), ``bench.app_load`` and ``bench.app_heavy``.
"""

from __future__ import annotations

import html
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .common import REPO_ROOT

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# the first server-built picture on the page (app.page.heatmaps.picture: an SVG as a Markdown image); a function from
# such an image to its SVG document (decoded from its data: address); the first picture's SVG root, or null
PICTURE = "[class*=st-key-attn_picture_] img"
SVG_OF_JS = ("(i => new DOMParser().parseFromString(new TextDecoder().decode(Uint8Array.from("
             "atob(i.getAttribute('src').split(',')[1]), c => c.charCodeAt(0))), 'image/svg+xml').documentElement)")
PICTURE_SVG_JS = f"(i => i ? {SVG_OF_JS}(i) : null)(document.querySelector('{PICTURE}'))"
# the x tick labels of the first heatmap on the page: the server-built SVG of the first screen (each label's
# tooltip holds the whole token), else the plotly chart (the Interactive switch)
HEATMAP_TICKS_JS = (f"() => {{ const s = {PICTURE_SVG_JS};"
                    " if (s) return [...s.querySelectorAll('text.xtick > title')].map(e => e.textContent);"
                    " const c = document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot');"
                    " return c ? [...c.querySelectorAll('.xtick text')].map(e => e.textContent) : []; }")
# records in window.__drawn the page's clock when the first match of the selector is drawn (an image: decoded), and
# in window.__painted the largest contentful paint so far (the browser's own "main content painted": for the app the
# picture, for the bare page its text)
DRAWN_TIMER_JS = """selector => { window.__drawn = null; window.__painted = null; const done = () => {
  if (window.__drawn === null) window.__drawn = performance.now(); };
  new PerformanceObserver(list => { for (const e of list.getEntries()) window.__painted = [e.renderTime || e.startTime,
    e.element ? e.element.tagName : null]; }).observe({type: 'largest-contentful-paint', buffered: true});
  new MutationObserver(() => { const e = window.__drawn === null && document.querySelector(selector); if (!e) return;
    if (e.tagName !== 'IMG' || (e.complete && e.naturalWidth)) done();
    else if (!e.__timed) { e.__timed = true; e.addEventListener('load', done); } })
  .observe(document, {childList: true, subtree: true}); }"""
# the page's translation panel shows the given text (it is sent after the picture: wait for it, not read it at once)
OWN_TRANSLATION_JS = ("want => [...document.querySelectorAll('[data-testid=stText]')]"
                      ".map(e => e.innerText).join(' ').includes(want)")
FIRST_HEATMAP = "[data-testid=stPlotlyChart] .heatmaplayer"  # a plotly heatmap drawn
APP_HEATMAP = f"{PICTURE}, {FIRST_HEATMAP}"  # the app's first heatmap drawn (a picture has no height until decoded)
# the page is done: nothing running, nothing stale or still loading, every chart and data grid drawn
SETTLED_JS = ("(!document.querySelector('[data-testid=stStatusWidgetRunningIcon], [data-stale=true], "
              "[data-testid=stSkeleton], [data-testid=stSpinner]')"
              " && [...document.querySelectorAll('[data-testid=stPlotlyChart]')]"
              ".every(c => c.querySelector('.main-svg'))"
              " && [...document.querySelectorAll('[data-testid=stDataFrame]')].every(d => d.querySelector('canvas')))")
# Streamlit's own state of the page (the attributes its end-to-end tests wait on): connected, and its script run
# over (before the first run the state is "initial", during one "running")
RUN_OVER_JS = ("!!document.querySelector('[data-testid=stApp][data-test-connection-state=CONNECTED]"
               "[data-test-script-state=notRunning]')")
# no script run in progress
IDLE_JS = "() => !document.querySelector('[data-testid=stStatusWidget] [data-testid=stStatusWidgetRunningIcon]')"

# true once the heatmap's labels are the new sentence's pieces (a long sentence is shown in a window from its
# start, whose labels count repeats within the window: compare without the "·position" suffixes)
SHOWS_JS = (f"expected => {{ const base = t => t.replace(/·\\d+$/, ''); const got = ({HEATMAP_TICKS_JS})();"
            " return got.length >= Math.min(expected.length, 10) && got.every((t, i) => base(t) === base(expected[i]));"
            " }")


# the screens the app is made for (as docs/screenshots.py takes them): viewport and whether it is a phone
SCREENS = {"desktop": ({"width": 1600, "height": 1000}, False), "laptop": ({"width": 1280, "height": 720}, False),
           "phone": ({"width": 390, "height": 844}, True)}


def new_context(browser, screen: str = "desktop"):
    """A fresh browser context (empty cache, new session) of one of ``SCREENS`` (a phone: touch, mobile viewport)."""
    viewport, phone = SCREENS[screen]
    return browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait for the Streamlit server's health endpoint; raise if it exits or never answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError("the streamlit server did not come up")


@contextmanager
def streamlit_server(checkpoint: str | Path, env: dict[str, str] | None = None,
                     script: str | Path | None = None, cwd: str | Path | None = None) -> Iterator[str]:
    """``streamlit run app/serve.py`` (the page of ``app/main.py``, warmed before the server answers its health check,
    as the image serves it; or ``script``) on a free local port with ``ATTN_CHECKPOINT=checkpoint``; yields its URL.
    ``cwd``: another checkout to serve (its ``app/serve.py``, its code first on the path)."""
    with server_process(checkpoint, env, script, cwd=cwd) as (url, _):
        yield url


@contextmanager
def server_process(checkpoint: str | Path, env: dict[str, str] | None = None, script: str | Path | None = None,
                   cpus: set[int] | None = None, log: str | Path | None = None, cwd: str | Path | None = None
                   ) -> Iterator[tuple[str, subprocess.Popen]]:
    """As :func:`streamlit_server`, yielding (URL, process); ``cpus``: the cores the server may run on; ``log``: a
    file for the server's output (else discarded); ``cwd``: another checkout to serve."""
    port = free_port()
    root = Path(cwd) if cwd else REPO_ROOT
    full_env = {**os.environ, "ATTN_CHECKPOINT": str(checkpoint), "OMP_NUM_THREADS": "1",
                **({"PYTHONPATH": str(root)} if cwd else {}), **(env or {})}
    script = script or root / "app" / "serve.py"
    cmd = [sys.executable, "-m", "streamlit", "run", str(script), "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, cwd=root, env=full_env, stdout=out, stderr=subprocess.STDOUT if log else out,
                            preexec_fn=pin)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log:
            out.close()


def split_cores() -> tuple[set[int], set[int]]:
    """(the server's cores, the browsers' cores): the first core this process may use for the server, the rest
    for this process and every Chromium it starts (``--split``, ``--pin``)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise RuntimeError("needs 2 cores: one for the server, one for the browsers")
    return {cores[0]}, set(cores[1:])


@contextmanager
def pinned(cores: set[int] | None) -> Iterator[None]:
    """This process (and what it starts meanwhile) on ``cores`` for the block (None: as it is)."""
    before = os.sched_getaffinity(0)
    if cores:
        os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextmanager
def app_page(checkpoint: str | Path, width: int, height: int, timeout_s: float,
             screen: str | None = None) -> Iterator[tuple[Any, list[str]]]:
    """A ``streamlit run`` server on ``checkpoint`` and one Chromium page open on it (``width`` x ``height``, or one
    of ``SCREENS``), its first heatmap drawn; yields (the Playwright page, the page's errors as they come)."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise FileNotFoundError(f"{CHROMIUM} not found (apt-get install chromium)")
    errors: list[str] = []
    with streamlit_server(checkpoint) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = (new_context(browser, screen) if screen else
                    browser.new_context(viewport={"width": width, "height": height})).new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, wait_until="domcontentloaded")
            page.locator(APP_HEATMAP).first.wait_for(timeout=timeout_s * 1000)
            yield page, errors
        finally:
            browser.close()


def expected_ticks(checkpoint: str | Path, texts: list[str]) -> list[list[str]]:
    """The heatmap's x labels for each text as the page shows them: the source pieces, EOS last."""
    import transformer
    from app.drawing.analysis import unique_labels

    tr = transformer.load(checkpoint, device="cpu")
    return [[html.unescape(label) for label in unique_labels(tr.tokenizer.pieces(tr.encode_source(text)[0]))]
            for text in texts]


def click_until(page, button, done_js: str, arg: Any, timeout_s: float, tries: int = 3) -> int:
    """Click ``button`` and wait until ``done_js(arg)``; a click that lands as a rerun starts can be lost, so after
    a third of the timeout click again (the caller's clock keeps running from the first click). Returns the extra
    clicks."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    button.click()
    for attempt in range(tries):
        try:
            page.wait_for_function(done_js, arg=arg, polling="raf", timeout=timeout_s * 1000 / tries)
            return attempt
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise
            page.wait_for_function(IDLE_JS, polling=100, timeout=timeout_s * 1000)
            button.click()
    return tries
