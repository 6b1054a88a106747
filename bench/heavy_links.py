"""The heaviest links public mode allows (a ~3,200-character list through attribution and the beam tree at beam 16,
100 sentences at beam 16, long inputs through Training evolution), the public server that serves them as the image
does, and visitors that keep opening them: the pieces of ``bench.app_heavy``'s rounds.

Needs ``/usr/bin/chromium``, ``playwright`` and ``psutil``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from .browser import CHROMIUM, CHROMIUM_ARGS, server_process
from .common import REPO_ROOT

MODELS = "checkpoints/multi30k-en-de,checkpoints/multi30k-en-de-prenorm"  # as the Dockerfile offers them
ITEMS = ["red apples", "green pears", "two dogs", "a blue bike", "an old church", "three children", "a white boat",
         "a yellow kite", "four horses", "a wooden bench", "a tall tree", "five birds", "a small red car"]


def long_list(seed: int, chars: int = 3200) -> str:
    """A ~3,200-character comma-separated list (one 'sentence' the model truncates to its limit)."""
    parts, i = [], seed
    while len(", ".join(parts)) < chars:
        parts.append(f"{ITEMS[i % len(ITEMS)]} {i}")
        i += 7
    return ", ".join(parts)[:chars]


def hundred_sentences(seed: int) -> str:
    return " ".join(f"A man with {ITEMS[(seed + i) % len(ITEMS)]} walks past house number {seed * 100 + i}."
                    for i in range(100))


def crafted_links(seed: int = 0) -> dict[str, dict[str, str]]:
    heavy = {"beam": "16", "alpha": "5", "a": "4", "b": "200"}
    return {
        "attribution, 3,200-char list, beam 16": {"text": long_list(seed), **heavy, "view": "what_drives_each_word"},
        "beam tree, 3,200-char list, beam 16": {"text": long_list(seed + 1), **heavy, "view": "beam_tree"},
        "100 sentences, beam 16": {"text": hundred_sentences(seed), "beam": "16"},
        **{f"Training evolution, long input {k + 1}": {"text": long_list(seed + 10 + k), "a": "4", "b": "200",
                                                       "view": "training_evolution"} for k in range(5)},
    }


# a finished page: no script run in progress, and a chart drawn (or the page's message of what it could not do);
# cheapest check first, and the page's text only when there is no chart (reading it lays the whole page out)
DONE_JS = ("() => { if (document.querySelector('[data-testid=stStatusWidget] [data-testid=stStatusWidgetRunningIcon]'))"
           " return false; if (document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot, "
           "[class*=st-key-attn_picture_] img'))"
           " return true; const alerts = [...document.querySelectorAll('[data-testid=stAlert]')]"
           ".map(e => e.textContent).join(' '); return alerts.includes('could not') || "
           "alerts.includes('sentences translated so far'); }")


class RssSampler:
    """The resident memory of a process and its children, sampled in a thread."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        import psutil

        self.process, self.every, self.peak = psutil.Process(pid), every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        total = 0
        for p in [self.process, *self.process.children(recursive=True)]:
            with contextlib.suppress(Exception):  # a child that just ended
                total += p.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(self.every)

    def reset(self) -> int:
        now = self.rss()
        self.peak = now
        return now

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def public_server(env: dict[str, str], cpus: set[int] | None = None, log: str | None = None,
                  run_log: str | None = None) -> Iterator[tuple[str, int]]:
    """``streamlit run app/main.py`` in public mode as the image sets it; yields (URL, server pid). ``run_log``: serve
    it through ``bench/traced_app.py``, which writes each script run there (``server_times``)."""
    public = {"ATTN_PUBLIC": "1", "ATTN_MODELS": MODELS, "PYTHONPATH": str(REPO_ROOT), **env}
    script = None
    if run_log:
        public["BENCH_RUN_LOG"], script = run_log, REPO_ROOT / "bench" / "traced_app.py"
    with server_process(MODELS.split(",")[0], env=public, cpus=cpus, log=log, script=script) as (url, proc):
        yield url, proc.pid


def server_times(run_log: str | Path, texts: list[str], clicked_at: list[float], seconds: list[float]) -> list[float]:
    """For each visitor (its text, its click's wall time, the seconds until its browser showed the heatmap):
    seconds from the click to the end of the last script run of that text that started in between, the run
    whose page the visitor saw (infinite: none in the log)."""
    runs = [json.loads(line) for line in Path(run_log).read_text(encoding="utf-8").splitlines() if line.strip()]
    out = []
    for text, click, shown in zip(texts, clicked_at, seconds):
        ends = [r["end"] for r in runs if r["text"] == text[:200] and click - 0.05 <= r["start"] <= click + shown]
        out.append(max(ends) - click if ends else math.inf)
    return out


async def open_link(browser, url: str, query: dict[str, str], timeout_s: float = 300.0) -> dict[str, Any]:
    """Open one link in a new page; seconds to a finished page, the notices of what was capped, any error."""
    context = await browser.new_context(viewport={"width": 1400, "height": 1200})
    page = await context.new_page()
    start = time.perf_counter()
    await page.goto(f"{url}/?{urlencode(query)}", wait_until="domcontentloaded")
    await page.wait_for_timeout(1500)  # the first script run starts
    await page.wait_for_function(DONE_JS, polling=200, timeout=timeout_s * 1000)
    seconds = time.perf_counter() - start
    alerts = await page.locator("[data-testid=stAlert]").all_inner_texts()
    errors = await page.locator("[data-testid=stException], [data-testid=stAlertContentError]").count()
    await context.close()
    notices = [a.strip() for a in alerts if "ATTN_MAX_WORK" in a]
    return {"seconds": round(seconds, 2), "capped": notices, "errors": errors}


async def heavy_visitors(url: str, n: int, stop: asyncio.Event, seed: int,
                         durations: list[float] | None = None, unfinished: list[float] | None = None,
                         kinds: list[str] | None = None) -> int:
    """``n`` visitors opening heavy links (attribution, beam tree, 100 sentences at beam 16) one after another until
    ``stop``; returns how many links they finished. ``durations``: each finished link's seconds (infinite: it did
    not finish within ``open_link``'s timeout) are appended; ``unfinished``: the seconds of the links still running
    at ``stop``; ``kinds``: which link each duration is (its name in :func:`crafted_links`)."""
    from playwright.async_api import async_playwright

    done = [0]
    started: dict[int, float] = {}
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)

        async def visitor(k: int) -> None:
            i = 0
            while not stop.is_set():
                name, query = list(crafted_links(seed + 1000 * k + 10 * i).items())[(k + i) % 3]
                started[k] = time.perf_counter()
                try:
                    row = await open_link(browser, url, query)  # attribution, beam tree, 100 sentences
                    seconds = row["seconds"]
                except asyncio.CancelledError:
                    raise
                except Exception:  # a link that never finished counts as infinite
                    seconds = math.inf
                started.pop(k, None)
                if durations is not None:
                    durations.append(seconds)
                if kinds is not None:
                    kinds.append(name)
                done[0] += 1
                i += 1

        tasks = [asyncio.create_task(visitor(k)) for k in range(n)]
        await stop.wait()
        now = time.perf_counter()
        if unfinished is not None:
            unfinished.extend(round(now - t, 2) for t in started.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await browser.close()
    return done[0]


def download_link(seed: int) -> dict[str, str]:
    """The Export view of a ~3,200-character list at beam 16 (a=4, b=200): its JSON is tens of MB."""
    return {"text": long_list(seed), "beam": "16", "alpha": "5", "a": "4", "b": "200", "view": "export"}


async def download_visitors(url: str, n: int, stop: asyncio.Event, seed: int,
                            durations: list[float] | None = None, timeout_s: float = 300.0) -> int:
    """``n`` visitors that each open the Export view of a long input and click "Download JSON", a new input each
    time, until ``stop`` (issue #49: three such downloads made an ordinary visitor's click 3-4 s on the server);
    returns how many files came. ``durations``: each click's seconds to the whole file (infinite: none came)."""
    from playwright.async_api import async_playwright

    done = [0]
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)

        async def visitor(k: int) -> None:
            i = 0
            while not stop.is_set():
                context = await browser.new_context(viewport={"width": 1400, "height": 1200}, accept_downloads=True)
                page = await context.new_page()
                try:
                    await page.goto(f"{url}/?{urlencode(download_link(seed + 1000 * k + i))}",
                                    wait_until="domcontentloaded")
                    button = page.get_by_role("button", name="Download JSON")
                    await button.wait_for(timeout=timeout_s * 1000)
                    await page.wait_for_function(DONE_JS.replace("[data-testid=stPlotlyChart] .js-plotly-plot, "
                                                                 "[class*=st-key-attn_picture_] img",
                                                                 "[data-testid=stDownloadButton]"),
                                                 polling=200, timeout=timeout_s * 1000)
                    start = time.perf_counter()
                    async with page.expect_download(timeout=timeout_s * 1000) as info:
                        await button.click()
                    await (await info.value).path()  # the whole file
                    seconds = time.perf_counter() - start
                    done[0] += 1
                except asyncio.CancelledError:
                    raise
                except Exception:  # no file within the timeout counts as infinite
                    seconds = math.inf
                finally:
                    await context.close()
                if durations is not None:
                    durations.append(seconds)
                i += 1

        tasks = [asyncio.create_task(visitor(k)) for k in range(n)]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await browser.close()
    return done[0]
