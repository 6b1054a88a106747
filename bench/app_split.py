"""``python -m bench.app_browser --split``: the server's own cost, with the browsers kept off its core.

The Streamlit server runs pinned to core 0 (``os.sched_setaffinity``), this process and every Chromium it starts
to the other cores (core 1 on a 2-core machine), so the visitors' rendering never takes the server's CPU. Each
round: N pages are opened and given a new sentence each, then press Translate at the same moment; reported are
the click-to-own-heatmap times (p50, p95) and the server's CPU seconds (user + system, psutil) per Translate
click, counted from the clicks to the last heatmap. The visitors a server of this size serves at 1 s p95 is the
largest N measured whose p95 stays within 1 s; ``1 / CPU seconds`` is the interactions a core sustains per second.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from .browser import APP_HEATMAP, CHROMIUM, CHROMIUM_ARGS, SHOWS_JS, expected_ticks, pinned, server_process, split_cores
from .common import percentile


def _cpu_seconds(proc) -> float:
    times = proc.cpu_times()
    return times.user + times.system


async def _round(url: str, server, checkpoint: str | Path, texts: list[str], timeout_s: float) -> dict[str, Any]:
    """All pages press Translate at once: each page's seconds to its own heatmap, and the server's CPU seconds."""
    from playwright.async_api import async_playwright

    ticks = expected_ticks(checkpoint, texts)
    errors: list[str] = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        pages = []
        for text in texts:
            page = await (await browser.new_context(viewport={"width": 1400, "height": 1000})).new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.goto(url, wait_until="domcontentloaded")
            await page.locator(APP_HEATMAP).first.wait_for(timeout=timeout_s * 1000)
            # typed, not applied: the click applies it (Ctrl+Enter would translate it at once)
            await page.locator("[data-testid=stTextArea] textarea").fill(text)
            pages.append(page)
        await asyncio.sleep(1.5)  # the pages' first runs are over

        async def click(i: int, page) -> float:
            start = time.perf_counter()
            await page.get_by_role("button", name="Translate").click()
            await page.wait_for_function(SHOWS_JS, arg=ticks[i], polling="raf", timeout=timeout_s * 1000)
            return time.perf_counter() - start

        cpu0 = _cpu_seconds(server)
        times = await asyncio.gather(*(click(i, page) for i, page in enumerate(pages)))
        cpu = _cpu_seconds(server) - cpu0
        await browser.close()
    return {"visitors": len(texts), "seconds": list(times), "p50": percentile(times, 50),
            "p95": percentile(times, 95), "server_cpu_s": cpu, "server_cpu_s_per_click": cpu / len(texts),
            "errors": errors}


def split(checkpoint: str | Path, counts: list[int], sentences: list[str], timeout_s: float = 300.0) -> dict[str, Any]:
    """Rounds of ``counts`` visitors at once, server on core 0, browsers on the other cores."""
    import psutil

    server_cores, browser_cores = split_cores()
    rounds = []
    # this process and the Chromium it starts stay off the server's core
    with server_process(checkpoint, cpus=server_cores) as (url, proc), pinned(browser_cores):
        server = psutil.Process(proc.pid)
        used = 0
        for n in counts:
            texts = sentences[used:used + n]
            used += n
            rounds.append(asyncio.run(_round(url, server, checkpoint, texts, timeout_s)))
    cpu = sum(r["server_cpu_s"] for r in rounds) / max(sum(r["visitors"] for r in rounds), 1)
    served = [r["visitors"] for r in rounds if r["p95"] <= 1.0]
    return {"split_server_cores": sorted(server_cores), "split_browser_cores": sorted(browser_cores),
            "split_rounds": rounds, "split_server_cpu_s_per_click": cpu,
            "split_clicks_per_s_per_core": 1.0 / cpu if cpu > 0 else None,
            "split_visitors_at_1s_p95": max(served) if served else 0,
            "split_page_errors": [e for r in rounds for e in r["errors"]]}


def report(result: dict[str, Any]) -> str:
    """A few lines for the terminal: one per round, then the server's cost and the visitors served."""
    lines = [f"Server pinned to core(s) {result['split_server_cores']}, browsers to {result['split_browser_cores']}:"]
    for r in result["split_rounds"]:
        lines.append(f"  {r['visitors']} visitor(s) at once: click -> own heatmap p50 {r['p50']:.2f} s, "
                     f"p95 {r['p95']:.2f} s; server CPU {r['server_cpu_s_per_click']:.3f} s per click")
    lines.append(f"Server CPU per Translate click: {result['split_server_cpu_s_per_click']:.3f} s "
                 f"(one core sustains {result['split_clicks_per_s_per_core']:.1f} clicks/s); visitors clicking at "
                 f"once served within 1 s p95: {result['split_visitors_at_1s_p95']}")
    return "\n".join(lines)
