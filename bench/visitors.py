"""Ordinary visitors of the app, shared by ``bench.app_load`` and ``bench.app_heavy``: caption sentences, and a
round of Chromium pages that press Translate at the same moment, each checked for its own translation and heatmap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .browser import APP_HEATMAP, CHROMIUM, CHROMIUM_ARGS, OWN_TRANSLATION_JS, SHOWS_JS, expected_ticks
from .common import percentile, read_sentences


def sentences_for(n: int, data_dir: str | Path | None, offset: int = 0) -> list[str]:
    """``n`` different caption sentences (from test_2016_flickr.en when present, else built)."""
    lines = read_sentences(data_dir) or []
    built = [f"A man in a {c} shirt walks {n_} dogs past the old church." for n_ in ("two", "three", "four")
             for c in ("red", "blue", "green", "white", "black", "yellow")]
    pool = list(dict.fromkeys(lines + built))
    return pool[offset:offset + n]


def expectations(checkpoint: str, texts: list[str]) -> tuple[list[str], list[list[str]]]:
    """Each text's translation and its heatmap's labels, as the page must show them. Call it before any visitor
    starts: model work inside the event loop would stall every other visitor's page checks meanwhile."""
    import torch

    import transformer

    torch.set_num_threads(1)  # this process shares its core with the browsers
    tr = transformer.load(checkpoint, device="cpu")
    return [tr.translate(t).text for t in texts], expected_ticks(checkpoint, texts)


async def visitors_round(url: str, checkpoint: str, texts: list[str], ablate: bool = False,
                         timeout_s: float = 180.0,
                         expect: tuple[list[str], list[list[str]]] | None = None) -> dict[str, Any]:
    """All pages type their sentence, then press Translate at once (the click applies the typed text); returns each
    page's seconds from the click to its own heatmap and what it showed. ``expect``: :func:`expectations` of
    ``texts``, made before the round (else here)."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout
    from playwright.async_api import async_playwright

    expected, ticks = expect or expectations(checkpoint, texts)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        pages, errors = [], []
        for i in range(len(texts)):
            context = await browser.new_context(viewport={"width": 1400, "height": 1200})
            page = await context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            query = ""
            if ablate and i == 0:  # this visitor switches every cross head of layer 1 off meanwhile
                n_heads = json.loads((Path(checkpoint) / "config.json").read_text(encoding="utf-8"))["n_heads"]
                heads = ",".join(f"cross.1.{h}" for h in range(1, n_heads + 1))
                query = f"?text={quote(texts[0])}&view=ablation&off={heads}"
            await page.goto(url + query, wait_until="domcontentloaded")
            await page.locator(APP_HEATMAP).first.wait_for(timeout=timeout_s * 1000)
            pages.append(page)
        for page, text in zip(pages, texts):  # typed, not yet applied (Ctrl+Enter would translate it at once)
            await page.locator("[data-testid=stTextArea] textarea").fill(text)
        await asyncio.sleep(1.0)

        async def click_and_wait(i: int, page) -> tuple[float, float]:
            """The click's wall time, and seconds from it to the visitor's own heatmap (infinite: not within
            ``timeout_s``)."""
            start, clicked = time.perf_counter(), time.time()
            try:
                if ablate and i == 0:
                    await page.get_by_role("button", name="Translate without them").click()
                    await page.get_by_text(re.compile(r"^With \d+ head\(s\) off$")).first.wait_for(
                        timeout=timeout_s * 1000)
                else:
                    await page.get_by_role("button", name="Translate").click()
                    await page.wait_for_function(SHOWS_JS, arg=ticks[i], polling="raf", timeout=timeout_s * 1000)
            except PlaywrightTimeout:
                errors.append(f"visitor {i}: no heatmap of its own within {timeout_s:g} s")
                return clicked, math.inf
            return clicked, time.perf_counter() - start

        clicked_at, times = zip(*await asyncio.gather(*(click_and_wait(i, page) for i, page in enumerate(pages))))
        own, others = [], []
        for i, page in enumerate(pages):
            with contextlib.suppress(PlaywrightTimeout):  # the translation comes after the picture
                await page.wait_for_function(OWN_TRANSLATION_JS, arg=expected[i], polling=100, timeout=10_000)
            shown = " ".join(await page.locator("[data-testid=stText]").all_inner_texts())
            if ablate and i == 0:
                continue
            own.append(expected[i] in shown)
            others.append(any(e in shown for j, e in enumerate(expected) if j != i and e != expected[i]))
            if await page.locator("[data-testid=stException], [data-testid=stAlertContentError]").count():
                errors.append(f"visitor {i}: an error element is on the page")
        await browser.close()
    measured = [t for i, t in enumerate(times) if not (ablate and i == 0)]
    clicked_at = [c for i, c in enumerate(clicked_at) if not (ablate and i == 0)]  # aligned with "seconds"
    return {"visitors": len(texts), "ablation": ablate, "seconds": measured, "p50": percentile(measured, 50),
            "p95": percentile(measured, 95), "all_saw_their_own": all(own), "any_saw_another": any(others),
            "errors": errors, "clicked_at": clicked_at}  # wall times, for a server log
