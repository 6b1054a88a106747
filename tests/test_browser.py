"""One real-browser run: the Streamlit server on a free port, Debian's chromium driven by Playwright.

Skipped cleanly without ``/usr/bin/chromium`` (``apt-get install chromium``) or the ``playwright`` package.
The screenshot lands in ``test-artifacts/browser.png``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.browser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
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


@pytest.fixture()
def server(tiny_checkpoint):
    port = free_port()
    env = {**os.environ, "ATTN_CHECKPOINT": str(tiny_checkpoint), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"), "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_translate_in_a_real_browser(server):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    console_errors: list[str] = []
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
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
                "[...document.querySelectorAll('[data-testid=stPlotlyChart] .xtick text')]"
                ".some(e => e.textContent.startsWith('<unk>'))", timeout=90_000)
            page.locator("[data-testid=stPlotlyChart] .heatmaplayer").first.wait_for(timeout=30_000)
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
            browser.close()
    assert not console_errors, console_errors
