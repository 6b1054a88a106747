"""``python -m bench.app_browser``: the app's answer time in a real browser.

Starts ``streamlit run app/serve.py`` (the page, warmed before its health check) on a free local port with a
checkpoint, opens it in Debian's ``chromium`` driven by Playwright, and for each of ``--repeat`` different 20-word
sentences types it, clicks Translate and times the wait until the heatmap of the new sentence is drawn (the
translation is drawn above it, before it). Then, on a server of its own, the server process's CPU per Translate
click and per view-control change (the heatmap's attention type), all its threads included.
Needs ``/usr/bin/chromium`` (``apt-get install chromium``) and ``playwright``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from .browser import (  # noqa: F401  (the helpers' old home: still importable from here)
    APP_HEATMAP,
    CHROMIUM,
    CHROMIUM_ARGS,
    DRAWN_TIMER_JS,
    FIRST_HEATMAP,
    HEATMAP_TICKS_JS,
    IDLE_JS,
    SCREENS,
    SETTLED_JS,
    SHOWS_JS,
    app_page,
    click_until,
    expected_ticks,
    free_port,
    new_context,
    server_process,
    streamlit_server,
    wait_healthy,
)
from .common import DEFAULT_CHECKPOINT, DEFAULT_DATA_DIR, machine_info, percentile, process_cpu_s, read_sentences


def twenty_word_sentences(n: int, data_dir: str | Path | None) -> list[str]:
    """``n`` different sentences of 20 words: from test_2016_flickr.en when present, else built."""
    lines = [s for s in read_sentences(data_dir) or [] if len(s.split()) == 20]
    words = "A man in a {} shirt and a woman with a {} hat walk their dog past the old church."
    colours = ["red", "blue", "green", "white", "black", "yellow", "brown", "grey", "pink", "orange"]
    built = [words.format(colours[i % 10], colours[(i // 10 + i + 1) % 10]) for i in range(100)]
    return (lines + [s for s in built if s not in lines])[:n]


LONG_WORDS = 40  # ``--long``: the long sentence


def long_sentences(n: int, data_dir: str | Path | None, words: int = LONG_WORDS) -> list[str]:
    """``n`` different sentences of ``words`` words, one sentence each (the app would split two): consecutive lines
    of val.en joined by "and" (each line's full stop dropped, the next one's first letter lower case), cut at
    ``words`` words and ended with a full stop; the i-th starts at val line ``1 + 10 i``. Without the data, built
    from ``twenty_word_sentences``' captions the same way."""
    lines = read_sentences(data_dir, "val") or twenty_word_sentences(100, None)
    out = []
    for start in range(0, 10 * n, 10):
        joined: list[str] = []
        for line in lines[start % len(lines):] + lines:
            line = line.strip().rstrip(".").strip()
            joined.extend(["and", line[:1].lower() + line[1:]] if joined else [line])
            if len(" ".join(joined).split()) >= words:
                break
        out.append(" ".join(" ".join(joined).split()[:words]).rstrip(",;") + ".")
    return out


def measure(checkpoint: str | Path, sentences: list[str], timeout_s: float = 120.0,
            screen: str = "desktop") -> dict[str, Any]:
    """Seconds from the Translate click that applies a newly typed sentence to its heatmap, one per sentence (none
    cached), on one of ``SCREENS``."""
    labels = expected_ticks(checkpoint, sentences)
    reclicks = 0
    times: list[float] = []
    with app_page(checkpoint, 0, 0, timeout_s, screen=screen) as (page, errors):
        box = page.locator("[data-testid=stTextArea] textarea")
        button = page.get_by_role("button", name="Translate")
        for text, ticks in zip(sentences, labels):
            page.wait_for_function(IDLE_JS, polling=100, timeout=timeout_s * 1000)  # the last run is over
            page.wait_for_function(f"() => {SETTLED_JS}", polling=100, timeout=timeout_s * 1000)
            page.wait_for_timeout(250)
            box.fill(text)  # typed, not applied: the click applies it (Ctrl+Enter would translate at once)
            t0 = time.perf_counter()
            reclicks += click_until(page, button, SHOWS_JS, ticks, timeout_s)
            times.append(time.perf_counter() - t0)
        if page.locator("[data-testid=stException]").count():
            errors.append("a stack trace is on the page")
    return {"app_translate_s_p50": percentile(times, 50), "app_translate_s_p95": percentile(times, 95),
            "app_translate_s_max": max(times), "app_translate_s": times, "app_sentences": len(times),
            "app_source_words": [len(s.split()) for s in sentences], "app_reclicks": reclicks,
            "app_page_errors": errors}


KINDS_SHOWN = ("Encoder self-attention", "Decoder self-attention", "Cross-attention")


def server_cpu(checkpoint: str | Path, sentences: list[str], changes: int = 6,
               timeout_s: float = 120.0, screen: str = "desktop") -> dict[str, Any]:
    """The server process's CPU seconds per Translate click (each a new sentence) and per view-control change (the
    heatmap's attention type, cycled ``changes`` times), each counted from the click until the page has settled
    (all of the server's work for it, its threads and Streamlit's post-run garbage collection included)."""
    from playwright.sync_api import sync_playwright

    def settle(page) -> None:
        page.wait_for_timeout(300)
        page.wait_for_function(f"() => {SETTLED_JS}", polling=100, timeout=timeout_s * 1000)
        page.wait_for_function(IDLE_JS, polling=100, timeout=timeout_s * 1000)

    clicks: list[float] = []
    controls: list[float] = []
    with server_process(checkpoint) as (url, proc), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = new_context(browser, screen).new_page()
            page.goto(url, wait_until="domcontentloaded")
            page.locator(APP_HEATMAP).first.wait_for(timeout=timeout_s * 1000)
            settle(page)
            box = page.locator("[data-testid=stTextArea] textarea")
            for text in sentences:
                box.fill(text)
                before = process_cpu_s(proc.pid)
                page.get_by_role("button", name="Translate").click()
                page.wait_for_function("t => new URLSearchParams(location.search).get('text') === t", arg=text,
                                       timeout=timeout_s * 1000)
                settle(page)
                clicks.append(process_cpu_s(proc.pid) - before)
            for i in range(changes):
                before = process_cpu_s(proc.pid)
                page.locator("[data-testid=stButtonGroup] button", has_text=KINDS_SHOWN[i % 3]).first.click()
                settle(page)
                controls.append(process_cpu_s(proc.pid) - before)
        finally:
            browser.close()
    return {"app_server_cpu_per_translate_s_p50": percentile(clicks, 50),
            "app_server_cpu_per_view_control_s_p50": percentile(controls, 50),
            "app_server_cpu_per_translate_s": clicks, "app_server_cpu_per_view_control_s": controls}


# the floors a first visit cannot beat, timed the same way: a bare Streamlit page with a text box and one plotly
# heatmap, and one with a text box and a line of text (no plotly.js to load)
FLOOR_PAGES = {
    "plotly": ("import numpy as np, plotly.graph_objects as go, streamlit as st\n"
               "st.text_area('Text', 'A man rides a bike.')\n"
               "st.plotly_chart(go.Figure(go.Heatmap(z=np.random.default_rng(0).random((24, 24)))))\n",
               FIRST_HEATMAP),
    "streamlit": ("import streamlit as st\nst.text_area('Text', 'A man rides a bike.')\nst.markdown('A line.')\n",
                  "[data-testid=stMarkdown]"),
}


def first_visits(checkpoint: str | Path, visitors: int = 5, timeout_s: float = 120.0, script: Path | None = None,
                 selector: str = APP_HEATMAP, screen: str = "desktop") -> dict[str, Any]:
    """Seconds from a new visitor's navigation (a fresh browser context: empty cache, new session) to the first
    heatmap drawn (``selector``; a picture: decoded), on the page's own clock (``performance.now()``): Playwright's
    own waits check an element at most every 500 ms once it has waited a while, too coarse for a second's page. The
    first visitor meets a cold server (model not loaded, nothing cached); the others a warm one. ``script``: another
    Streamlit page instead of the app; ``screen``: one of ``SCREENS``."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise FileNotFoundError(f"{CHROMIUM} not found (apt-get install chromium)")
    times: list[float] = []
    errors: list[str] = []
    with streamlit_server(checkpoint, script=script) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for _ in range(visitors):
                context = new_context(browser, screen)
                page = context.new_page()
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.add_init_script(f"({DRAWN_TIMER_JS})({json.dumps(selector)})")
                page.goto(url, wait_until="commit")
                page.wait_for_function("() => window.__drawn !== null", polling="raf", timeout=timeout_s * 1000)
                times.append(page.evaluate("() => window.__drawn") / 1000)  # ms from the navigation's start
                context.close()
        finally:
            browser.close()
    warm = times[1:] or times
    return {"app_first_visit_cold_s": times[0], "app_first_visit_warm_s_p50": percentile(warm, 50),
            "app_first_visit_warm_s_max": max(warm), "app_first_visit_s": times, "app_page_errors": errors}


def view_keys(text: str) -> list[str]:
    """``--only``'s value: view keys separated by commas, each a key of ``app.views.VIEWS`` (an old short name of
    ``app.registry.ALIASES``: its key)."""
    from app.registry import ALIASES, VIEWS

    keys = [ALIASES.get(k.strip(), k.strip()) for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in VIEWS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(f"not a view key: {', '.join(unknown) or repr(text)} "
                                         f"(the keys: {', '.join(VIEWS)})")
    return keys


def other_mode(args: argparse.Namespace) -> int:
    """``--views`` or ``--split``: print the table or the lines, and the JSON with ``--json``."""
    from . import app_split, app_views

    if args.views:
        words = LONG_WORDS if args.long else 20
        sentences = (long_sentences if args.long else twenty_word_sentences)(args.repeat, args.data_dir)
        result = app_views.view_times(args.checkpoint, sentences, only=args.only, base=args.base)
        print(f"Each view switched to on a warm page, {result['views_sentences']} sentences of {words} words (p50 of "
              f"{result['views_sentences']}):")
        print(app_views.table(result, app_views.LONG_GOALS if args.long else app_views.GOALS))
        errors = result["views_page_errors"]
    else:
        counts = [int(c) for c in args.split.split(",") if c.strip()]
        result = app_split.split(args.checkpoint, counts, twenty_word_sentences(sum(counts), args.data_dir))
        print(app_split.report(result))
        errors = result["split_page_errors"]
    result["machine"] = machine_info()
    if errors:
        print("page errors:", *errors, sep="\n  ")
    if args.json:
        print(json.dumps(result))
    return 1 if errors else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.app_browser", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help="20-word sentences from test_2016_flickr.en")
    p.add_argument("--repeat", type=int, default=10, help="sentences to translate, each a new one")
    p.add_argument("--visitors", type=int, default=6, help="new visitors timed from request to first heatmap "
                   "(the first meets a cold server)")
    p.add_argument("--floor", action="store_true", help="also time bare Streamlit pages the same way (one "
                   "plotly heatmap; no plotly): what a first visit cannot beat on this machine")
    p.add_argument("--views", action="store_true", help="instead: each view's time to drawn, switched to on a "
                   "warm page after each of --repeat new 20-word sentences (a table; see bench/app_views.py)")
    p.add_argument("--only", type=view_keys, metavar="KEYS", help="with --views: time only these views, view keys "
                   "separated by commas (e.g. all_heads,what_drives_each_word); Heatmap, where each walk ends, too")
    p.add_argument("--long", action="store_true", help=f"with --views: {LONG_WORDS}-word sentences instead, each "
                   f"of consecutive lines of val.en joined by 'and', cut at {LONG_WORDS} words")
    p.add_argument("--base", metavar="DIR", help="with --views: also walk another checkout (e.g. main's), on a "
                   "server of its own, each sentence on both in turn; its times in a column of their own")
    p.add_argument("--split", metavar="COUNTS", help="instead: visitors at once (e.g. 1,2,4,8) with the server "
                   "pinned to core 0 and the browsers to the others; the server's CPU per click (bench/app_split.py)")
    p.add_argument("--screen", choices=list(SCREENS), default="desktop", help="the screen of every page (desktop "
                   "1600x1000, laptop 1280x720, phone 390x844 with touch) for the first visits, the floors and the "
                   "clicks")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = p.parse_args(argv)
    for flag in ("only", "long", "base"):
        if getattr(args, flag) and not args.views:
            p.error(f"--{flag} goes with --views")
    if args.views or args.split:
        return other_mode(args)
    floors = {}
    if args.floor and args.visitors > 0:
        with tempfile.TemporaryDirectory() as tmp:
            for name, (code, selector) in FLOOR_PAGES.items():
                page = Path(tmp) / f"floor_{name}.py"
                page.write_text(code, encoding="utf-8")
                warm = first_visits(args.checkpoint, args.visitors, script=page, selector=selector, screen=args.screen)
                floors[f"app_first_visit_floor_{name}_s_p50"] = warm["app_first_visit_warm_s_p50"]
                print(f"Floor, a bare Streamlit page ({name}): warm server p50 "
                      f"{warm['app_first_visit_warm_s_p50']:.2f} s, max {warm['app_first_visit_warm_s_max']:.2f} s")
    visits = first_visits(args.checkpoint, args.visitors, screen=args.screen) if args.visitors > 0 else \
        {"app_page_errors": []}
    if args.visitors > 0:
        print(f"New visitor -> first heatmap on screen: cold server {visits['app_first_visit_cold_s']:.2f} s; "
              f"warm server p50 {visits['app_first_visit_warm_s_p50']:.2f} s, "
              f"max {visits['app_first_visit_warm_s_max']:.2f} s ({args.visitors - 1} visitors)")
    sentences = twenty_word_sentences(args.repeat, args.data_dir)
    result = measure(args.checkpoint, sentences, screen=args.screen) if args.repeat > 0 else \
        {"app_page_errors": [], "app_sentences": 0}
    cpu = server_cpu(args.checkpoint, sentences[:5], screen=args.screen) if args.repeat > 0 else {}
    if cpu:
        print(f"Server CPU (the whole process, all threads): per Translate click p50 "
              f"{cpu['app_server_cpu_per_translate_s_p50']:.3f} s; per view-control change (attention type) p50 "
              f"{cpu['app_server_cpu_per_view_control_s_p50']:.3f} s")
    result = {**visits, **floors, **result, **cpu,
              "app_page_errors": visits["app_page_errors"] + result["app_page_errors"]}
    result["machine"], result["screen"] = machine_info(), args.screen
    if result["app_sentences"]:
        print(f"Translate click -> translation and heatmap on screen, {result['app_sentences']} sentences of 20 "
              f"words: p50 {result['app_translate_s_p50']:.2f} s, p95 {result['app_translate_s_p95']:.2f} s, "
              f"max {result['app_translate_s_max']:.2f} s")
    if result["app_page_errors"]:
        print("page errors:", *result["app_page_errors"], sep="\n  ")
    if args.json:
        print(json.dumps(result))
    return 1 if result["app_page_errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
