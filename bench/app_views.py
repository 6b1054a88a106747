"""``python -m bench.app_browser --views``: each view's time to drawn, switched to on a warm page.

One Chromium page on one server. Warm-up: every view is opened once (every JavaScript chunk loaded, plotly.js
included). Then for each of ``--repeat`` different 20-word sentences: translate it on the Heatmap view and switch
to every view in turn (Heatmap last), timing the click until the view is drawn: the address names the view (the
app writes it at the end of its run), no run in progress, no stale element, no element still loading, every plotly
chart and data grid drawn. The sentence is new to the server, so each view computes what it needs afresh (as
for a visitor who just translated). On the attribution view the other method is timed too. Beside each time, the
CPU seconds spent meanwhile by the browser's renderer and GPU processes (the DevTools protocol's
``SystemInfo.getProcessInfo``) and by the server's process (``/proc``): on a shared machine they swing less than
the wall seconds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from .browser import (
    APP_HEATMAP,
    CHROMIUM,
    CHROMIUM_ARGS,
    IDLE_JS,
    SETTLED_JS,
    SHOWS_JS,
    click_until,
    expected_ticks,
    server_process,
)
from .common import percentile, process_cpu_s

ATTRIBUTION_VIEW = "what_drives_each_word"  # a view key
METHOD_NAMES = {"integrated_gradients": "Integrated gradients", "input_x_gradient": "Input × gradient"}
# the goals (seconds, p50): every view 1 s, attribution by input × gradient 1.5 s, integrated gradients 3 s
GOALS = {"*": 1.0, f"{ATTRIBUTION_VIEW}: {METHOD_NAMES['input_x_gradient']}": 1.5,
         f"{ATTRIBUTION_VIEW}: {METHOD_NAMES['integrated_gradients']}": 3.0}
# issue 68's goals at 40 words (``--long``): every view 1 s warm on a quiet 2-core machine, integrated gradients 2 s
LONG_GOALS = {"*": 1.0, f"{ATTRIBUTION_VIEW}: {METHOD_NAMES['integrated_gradients']}": 2.0}
# the view the address names; none: the first view (the app leaves defaults out of its address)
URL_VIEW_JS = "() => new URLSearchParams(location.search).get('view') || 'heatmap'"
VIEW_DONE_JS = f"view => ({URL_VIEW_JS})() === view && {SETTLED_JS}"
# the first attribution chart's numbers, to see them change when the method changes
ATTRIBUTION_JS = ("() => { const c = document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot');"
                  " return c && c._fullData ? Array.from(c._fullData[0].z, r => Array.from(r).join()).join(';')"
                  " : ''; }")


def _quiet(page, timeout_s: float) -> None:
    """Wait until no script runs and the page has settled, then a short pause (no click lands mid-run)."""
    page.wait_for_function(IDLE_JS, polling=100, timeout=timeout_s * 1000)
    page.wait_for_function(f"() => {SETTLED_JS}", polling=100, timeout=timeout_s * 1000)
    page.wait_for_timeout(250)


def _button(page, text: str):
    """The button of a segmented control whose label ends with ``text`` (a view or a group of views)."""
    return page.locator("[data-testid=stButtonGroup] button", has_text=re.compile(rf"{re.escape(text)}$")).first


Meter = Callable[[], tuple[float, float]]  # CPU seconds so far: (the browser's renderer and GPU, the server)


def switch(page, view: str, timeout_s: float, meter: Meter | None = None,
           quiet: bool = True) -> tuple[float, tuple[float, float]]:
    """Seconds from the click that opens ``view`` (its key) to the view drawn, and the CPU seconds ``meter`` saw
    spent meanwhile (browser, server; zeros without one). The views come in groups: another group's view takes a
    click on its group first, untimed (a group shows its views and opens none), unless the group opened that very
    view itself (as an older page's did, ``--base``): then timed from the group's click. ``quiet``: first wait until
    the page is quiet (:func:`_quiet`); False where the caller has just waited at least as long."""
    from app.views import VIEWS

    meter = meter or (lambda: (0.0, 0.0))
    if quiet:
        _quiet(page, timeout_s)
    group, title = VIEWS[view].group, VIEWS[view].title

    def spent(t0: float, cpu0: tuple[float, float]) -> tuple[float, tuple[float, float]]:
        cpu = meter()
        return time.perf_counter() - t0, (cpu[0] - cpu0[0], cpu[1] - cpu0[1])

    if not _button(page, title).is_visible():  # another group is open
        t0, cpu0 = time.perf_counter(), meter()
        _button(page, group).click()
        _button(page, title).wait_for(state="visible", timeout=timeout_s * 1000)
        _quiet(page, timeout_s)
        if page.evaluate(URL_VIEW_JS) == view:
            return spent(t0, cpu0)
    button = _button(page, title)
    t0, cpu0 = time.perf_counter(), meter()
    click_until(page, button, VIEW_DONE_JS, view, timeout_s)
    return spent(t0, cpu0)


def shown_method(page) -> str:
    """The attribution method selected on the page."""
    group = page.locator("[data-testid=stButtonGroup]", has_text=METHOD_NAMES["input_x_gradient"]).first
    shown = group.locator("button[aria-checked=true]").first.inner_text()
    return next(m for m, label in METHOD_NAMES.items() if label in shown)


def other_method(page, timeout_s: float, meter: Meter | None = None) -> tuple[str, float, tuple[float, float]]:
    """On the attribution view: click the method not shown; (its name, seconds until its charts are drawn, the CPU
    seconds ``meter`` saw spent meanwhile)."""
    meter = meter or (lambda: (0.0, 0.0))
    _quiet(page, timeout_s)
    before = page.evaluate(ATTRIBUTION_JS)
    group = page.locator("[data-testid=stButtonGroup]", has_text=METHOD_NAMES["input_x_gradient"]).first
    name = next(m for m in METHOD_NAMES if m != shown_method(page))
    t0, cpu0 = time.perf_counter(), meter()
    group.locator("button", has_text=METHOD_NAMES[name]).first.click()
    page.wait_for_function(f"before => ({ATTRIBUTION_JS})() !== before && {SETTLED_JS}", arg=before, polling="raf",
                           timeout=timeout_s * 1000)
    cpu = meter()
    return name, time.perf_counter() - t0, (cpu[0] - cpu0[0], cpu[1] - cpu0[1])


def translate(page, text: str, ticks: list[str], timeout_s: float) -> None:
    """Type ``text``, press Translate, wait for its heatmap."""
    _quiet(page, timeout_s)
    box = page.locator("[data-testid=stTextArea] textarea")
    box.fill(text)
    box.press("Control+Enter")
    page.wait_for_timeout(300)
    _quiet(page, timeout_s)
    click_until(page, page.get_by_role("button", name="Translate"), SHOWS_JS, ticks, timeout_s)


def walk_order(only: list[str] | None = None) -> list[str]:
    """The views a walk switches to, by key: from Heatmap (the first view) through every view (or those of
    ``only``) and back to Heatmap."""
    from app.views import VIEWS

    names = list(VIEWS)
    order = names[1:] + names[:1]
    return order if only is None else [name for name in order if name in only or name == names[0]]


def view_times(checkpoint: str | Path, sentences: list[str], timeout_s: float = 300.0,
               only: list[str] | None = None, base: str | Path | None = None) -> dict[str, Any]:
    """Per view: seconds from the click to the view drawn, one per sentence; and the attribution methods.
    ``only``: these view keys (and Heatmap, the view each walk returns to) instead of every view. ``base``: another
    checkout walked too, on a server and page of its own, each sentence there first and then here (its times in
    ``views_base_s``). The CPU seconds of each switch, ``[browser, server]``, in ``views_cpu_s`` (and
    ``views_base_cpu_s``)."""
    order = walk_order(only)
    labels = expected_ticks(checkpoint, sentences)
    checkouts = {"base": base, "here": None} if base else {"here": None}
    times: dict[str, dict[str, list[float]]] = {k: {name: [] for name in order if name != ATTRIBUTION_VIEW}
                                                for k in checkouts}
    cpus: dict[str, dict[str, list[tuple[float, float]]]] = {k: {} for k in checkouts}
    errors: list[str] = []
    with ExitStack() as stack:  # one browser; a server and a page for each checkout
        from playwright.sync_api import sync_playwright

        browser = stack.enter_context(sync_playwright()).chromium.launch(executable_path=str(CHROMIUM),
                                                                        args=CHROMIUM_ARGS)
        stack.callback(browser.close)
        cdp = browser.new_browser_cdp_session()

        def browser_cpu_s() -> float:
            info = cdp.send("SystemInfo.getProcessInfo")["processInfo"]
            return sum(p["cpuTime"] for p in info if p["type"] in ("renderer", "GPU"))

        pages, meters = {}, {}
        for k, cwd in checkouts.items():
            url, proc = stack.enter_context(server_process(checkpoint, cwd=cwd))
            meters[k] = lambda pid=proc.pid: (browser_cpu_s(), process_cpu_s(pid))
            page = pages[k] = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
            page.on("pageerror", lambda e, k=k: errors.append(f"{e} ({k})"))
            page.goto(url, wait_until="domcontentloaded")
            page.locator(APP_HEATMAP).first.wait_for(timeout=timeout_s * 1000)
            for name in order:  # warm-up: every chunk loaded
                switch(page, name, timeout_s)
        for text, ticks in zip(sentences, labels):
            for k, page in pages.items():
                walk(page, text, ticks, order, times[k], timeout_s, meters[k], cpus[k])
                if page.locator("[data-testid=stException]").count():
                    errors.append(f"a stack trace is on the page ({k})")
    out = {"views_s": times["here"], "views_s_p50": {n: percentile(t, 50) for n, t in times["here"].items()},
           "views_cpu_s": cpus["here"], "views_sentences": len(sentences),
           "views_source_words": [len(s.split()) for s in sentences],
           "views_page_errors": errors}
    if base:
        out["views_base_s"] = times["base"]
        out["views_base_cpu_s"] = cpus["base"]
    return out


def walk(page, text: str, ticks: list[str], order: list[str], times: dict[str, list[float]],
         timeout_s: float, meter: Meter | None = None,
         cpus: dict[str, list[tuple[float, float]]] | None = None) -> None:
    """Translate ``text`` and switch to every view of ``order``, each time added to ``times`` (and the CPU seconds
    ``meter`` saw, to ``cpus``)."""
    cpus = {} if cpus is None else cpus
    translate(page, text, ticks, timeout_s)
    for name in order:
        seconds, cpu = switch(page, name, timeout_s, meter)
        if name != ATTRIBUTION_VIEW:
            times[name].append(seconds)
            cpus.setdefault(name, []).append(cpu)
            continue
        # one time per method: the view opens on the method picked last, then the other is picked
        key = f"{name}: {METHOD_NAMES[shown_method(page)]}"
        times.setdefault(key, []).append(seconds)
        cpus.setdefault(key, []).append(cpu)
        method, seconds, cpu = other_method(page, timeout_s, meter)
        times.setdefault(f"{name}: {METHOD_NAMES[method]}", []).append(seconds)
        cpus.setdefault(f"{name}: {METHOD_NAMES[method]}", []).append(cpu)


def table(result: dict[str, Any], goals: dict[str, float] | None = None) -> str:
    """A Markdown table: view (its title, as people read it), p50 and max seconds, the p50 CPU seconds of the
    browser and of the server, and the goal when one is given; with a base checkout walked too, its p50 seconds and
    CPU seconds and the ratio base / here first."""
    from app.registry import VIEWS

    goals = goals or {}
    base, base_cpu = result.get("views_base_s"), result.get("views_base_cpu_s", {})

    def cpu(cpus: dict[str, list], name: str) -> str:
        pairs = cpus.get(name) or []
        if not pairs:
            return " | "
        return f"{percentile([b for b, _ in pairs], 50):.2f} | {percentile([s for _, s in pairs], 50):.2f}"

    lines = ["| view | " + ("base p50 s | base browser CPU s | base server CPU s | base / here | " if base else "")
             + "p50 s | browser CPU s | server CPU s | max s | goal s |",
             "|---|" + ("---:|---:|---:|---:|" if base else "") + "---:|---:|---:|---:|---:|"]
    for name, values in result["views_s"].items():
        goal = goals.get(name, goals.get("*"))
        title = VIEWS[name].title if name in VIEWS else name
        here = percentile(values, 50)
        before = ""
        if base and base.get(name):
            was = percentile(base[name], 50)
            before = f"{was:.2f} | {cpu(base_cpu, name)} | {was / here:.1f}x | "
        elif base:
            before = " |  |  |  | "
        lines.append(f"| {title} | {before}{here:.2f} | {cpu(result.get('views_cpu_s', {}), name)} | "
                     f"{max(values):.2f} | {'' if goal is None else f'{goal:g}'} |")
    return "\n".join(lines)
