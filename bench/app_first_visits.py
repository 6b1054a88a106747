"""``python -m bench.app_first_visits``: a new visitor's first heatmap against a bare Streamlit page, in turns.

The first-visit goal is a ratio to a bare Streamlit page measured in the same run. Timed one server after the
other (``bench.app_browser --floor``), the ratio carries whatever the machine did in between; here every server
runs at once (the bare page, this checkout's app and, with ``--base DIR``, another checkout's), and new visitors
(each a fresh browser context: empty cache, new session) take turns on them, the order rotated every round, so
that each server meets the same machine. A visit is timed by the page's own clock (``performance.now()``, from
the navigation's start) up to the moment the first heatmap is drawn: the picture decoded (``img.complete``), or
the SVG's first cell, or the plotly heatmap; the bare page's line. Also reported: when the browser says it painted
the page's main content (its largest contentful paint: the app's picture, the bare page's text), which can come
well after the picture was decoded when the browser is busy building the rest of the page. The first round (cold
servers, cold browser) is left out. Needs ``/usr/bin/chromium`` and ``playwright``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from .app_browser import FLOOR_PAGES
from .browser import APP_HEATMAP, CHROMIUM, CHROMIUM_ARGS, DRAWN_TIMER_JS, SCREENS, new_context, streamlit_server
from .common import DEFAULT_CHECKPOINT, machine_info

PAINT_WAIT_MS = 1500  # after the first heatmap is drawn: its paint (and the bare page's) has been reported by then
BARE_PAGE, BARE_LINE = FLOOR_PAGES["streamlit"]  # a text box and a line of text, as ``bench.app_browser --floor``
# what each server's first heatmap is (the app before the picture was an image: an inline SVG)
DRAWN = f"{APP_HEATMAP}, [data-testid=stMarkdown] svg.attn-heatmap rect"


def first_visits(checkpoint: str | Path, rounds: int, base: str | Path | None = None, screen: str = "desktop",
                 timeout_s: float = 120.0) -> dict[str, Any]:
    """Milliseconds from navigation to the first heatmap (the bare page: its line) for ``rounds`` new visitors on
    each server, in turns; their medians and the ratios to the bare page's."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise FileNotFoundError(f"{CHROMIUM} not found (apt-get install chromium)")
    times: dict[str, list[float]] = {"bare": [], "app": []}
    if base:
        times["base"] = []
    painted: dict[str, list[float]] = {name: [] for name in times}
    largest: dict[str, list[str | None]] = {name: [] for name in times}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack, sync_playwright() as p:
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE_PAGE, encoding="utf-8")
        urls = {"bare": (stack.enter_context(streamlit_server(checkpoint, script=bare)), BARE_LINE),
                "app": (stack.enter_context(streamlit_server(checkpoint)), DRAWN)}
        if base:
            urls["base"] = (stack.enter_context(streamlit_server(checkpoint, cwd=base)), DRAWN)
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        names = list(urls)
        for r in range(rounds + 1):
            for name in names[r % len(names):] + names[:r % len(names)]:
                url, selector = urls[name]
                context = new_context(browser, screen)
                page = context.new_page()
                page.add_init_script(f"({DRAWN_TIMER_JS})({json.dumps(selector)})")
                page.goto(url, wait_until="commit")
                page.wait_for_function("() => window.__drawn !== null", timeout=timeout_s * 1000)
                page.wait_for_timeout(PAINT_WAIT_MS)  # the paint of what was drawn has been reported by then
                if r:  # the first round meets cold servers
                    times[name].append(page.evaluate("() => window.__drawn"))
                    at, element = page.evaluate("() => window.__painted") or (math.nan, None)
                    painted[name].append(at)
                    largest[name].append(element)
                context.close()
        browser.close()
    p50 = {name: statistics.median(t) for name, t in times.items()}
    # each round's visit against the bare page's visit of the same round (the machine's drift cancels), their median
    paired = {name: statistics.median(a / b for a, b in zip(t, times["bare"])) for name, t in times.items()
              if name != "bare"}
    painted_p50 = {name: statistics.median(t) for name, t in painted.items()}
    return {"first_visit_ms": times, "first_visit_ms_p50": p50,
            "first_visit_ratio_to_bare": {name: p50[name] / p50["bare"] for name in p50 if name != "bare"},
            "first_visit_paired_ratio_p50": paired, "painted_ms": painted, "painted_ms_p50": painted_p50,
            "painted_ratio_to_bare": {name: painted_p50[name] / painted_p50["bare"] for name in painted_p50
                                      if name != "bare"},
            "painted_elements": {name: sorted({str(e) for e in els}) for name, els in largest.items()},
            "screen": screen, "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.app_first_visits", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--rounds", type=int, default=10, help="new visitors on each server (after a first, cold round)")
    p.add_argument("--base", help="another checkout (e.g. a git worktree of main) served beside this one")
    p.add_argument("--screen", choices=list(SCREENS), default="desktop")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = p.parse_args(argv)
    result = first_visits(args.checkpoint, args.rounds, args.base, args.screen)
    for name, ms in result["first_visit_ms_p50"].items():
        ratio = result["first_visit_ratio_to_bare"].get(name)
        print(f"{name:5s} first {'line' if name == 'bare' else 'heatmap'} p50 {ms:6.0f} ms"
              + (f" ({ratio:.2f}x the bare page; the same round's visits paired: "
                 f"{result['first_visit_paired_ratio_p50'][name]:.2f}x)" if ratio else "")
              + f"; all {sorted(round(t) for t in result['first_visit_ms'][name])}")
    for name, ms in result["painted_ms_p50"].items():
        ratio = result["painted_ratio_to_bare"].get(name)
        print(f"{name:5s} painted (largest contentful paint: {', '.join(result['painted_elements'][name])}) p50 "
              f"{ms:6.0f} ms" + (f" ({ratio:.2f}x the bare page)" if ratio else ""))
    result["machine"] = machine_info()
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
