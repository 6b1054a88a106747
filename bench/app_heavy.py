"""``python -m bench.app_heavy``: the crafted heavy links of issue #30 through a real ``streamlit run`` server in
public mode, and ordinary visitors beside heavy ones.

1. Crafted links, one after another, each in a new Chromium page: integrated gradients over a ~3,200-character
   list at beam 16 (a=4, b=200, alpha=5); the beam tree of that text; 100 sentences at beam 16; long inputs through
   Training evolution. Reported per link: seconds to a finished page (the view's chart drawn and no script run in
   progress), the server's resident memory before / peak / after (psutil, the server and its children, sampled
   every 50 ms) and the notices of what was capped.
2. Mixed round: 4 ordinary visitors translate captions at once (``bench.visitors.visitors_round``: click to their
   own heatmap) while 4 others keep opening the heaviest allowed links; against the same 4 alone, alternating.
   The server runs through ``bench/traced_app.py``, so the server's part of each click (click to the end of that
   visitor's script run) is reported beside the browser's click-to-heatmap: on one small machine the 8 browsers
   compete with the server for the same cores, which the visitors of a hosted demo do not.
3. ``--crowd`` (issue #37's goals, instead of 2): one ordinary visitor types captions of 1, 2 and 3 short sentences
   in turn and presses Translate (``--clicks`` times, click to the heatmap of its first sentence, with its own
   translation), while ``--heavy`` visitors keep opening the heaviest links. Reported: the ordinary visitor's p50 /
   p95 (browser and the server's part) and every heavy link's duration (the longest, and any still running when
   the round ended), against the goals: p95 < 2 s and every link within 60 s. Run it with ``--pin``. With
   ``--downloads N`` (issue #49) N more visitors keep clicking "Download JSON" on long inputs meanwhile (each
   file's seconds reported); ``--heavy 0 --downloads 3`` isolates what the downloads cost the ordinary visitor.

Needs ``/usr/bin/chromium``, ``playwright`` and ``psutil``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from .browser import (
    APP_HEATMAP,
    CHROMIUM,
    CHROMIUM_ARGS,
    OWN_TRANSLATION_JS,
    SHOWS_JS,
    pinned,
    split_cores,
)
from .common import DEFAULT_DATA_DIR, REPO_ROOT, machine_info, percentile, read_sentences, synthetic_sentences
from .heavy_links import (
    MODELS,
    RssSampler,
    crafted_links,
    download_visitors,
    heavy_visitors,
    hundred_sentences,
    long_list,
    open_link,
    public_server,
    server_times,
)
from .visitors import expectations, sentences_for, visitors_round


async def crafted_round(url: str, pid: int, seed: int = 0) -> list[dict[str, Any]]:
    from playwright.async_api import async_playwright

    rows = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        await open_link(browser, url, {"text": "A dog runs on the beach."})  # warm: models loaded, first page drawn
        with RssSampler(pid) as rss:
            for name, query in crafted_links(seed).items():
                await asyncio.sleep(2.0)
                before = rss.reset()
                row = await open_link(browser, url, query)
                await asyncio.sleep(1.0)
                row.update(link=name, rss_before_mb=round(before / 1e6), rss_peak_mb=round(rss.peak / 1e6),
                           rss_after_mb=round(rss.rss() / 1e6))
                rows.append(row)
                print(f"  {name}: {row['seconds']:.1f} s, RSS {row['rss_before_mb']} -> peak {row['rss_peak_mb']} "
                      f"-> {row['rss_after_mb']} MB, capped: {len(row['capped'])} notice(s), errors: {row['errors']}",
                      flush=True)
        await browser.close()
    return rows


def crowd_captions(n: int, data_dir: str | None, offset: int = 0) -> list[str]:
    """``n`` distinct captions of 1, 2 and 3 caption sentences in turn (Multi30k's when present, else built)."""
    pool = (read_sentences(data_dir) or [])[offset:offset + 2 * n] or synthetic_sentences(2 * n, seed=offset)
    pool = [s.rstrip() if s.rstrip().endswith((".", "!", "?")) else s.rstrip() + "." for s in pool]
    out, i = [], 0
    for k in range(n):
        size = 1 + k % 3
        out.append(" ".join(pool[i:i + size]))
        i += size
    return out


def first_sentences(texts: list[str]) -> list[str]:
    """The sentence of each text the page explores (its first)."""
    from app.analysis.inference import split_sentences

    return [split_sentences(t, "en")[0] for t in texts]


async def ordinary_visitor(url: str, checkpoint: str, texts: list[str], pause: float = 2.0,
                           timeout_s: float = 120.0,
                           expect: tuple[list[str], list[list[str]]] | None = None) -> dict[str, Any]:
    """One visitor: for each text, type it, press Translate, wait for the heatmap of its first sentence (the one
    the page explores), and check the page shows that sentence's own translation; ``pause`` s between clicks.
    ``expect``: :func:`bench.visitors.expectations` of the first sentences, made before the round (else here)."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout
    from playwright.async_api import async_playwright

    from app.analysis.inference import split_sentences

    expected, ticks = expect or expectations(checkpoint, first_sentences(texts))
    seconds, clicked_at, own, errors = [], [], [], []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = await (await browser.new_context(viewport={"width": 1400, "height": 1200})).new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(url, wait_until="domcontentloaded")
        await page.locator(APP_HEATMAP).first.wait_for(timeout=timeout_s * 1000)
        for text, tick, want in zip(texts, ticks, expected):
            await page.locator("[data-testid=stTextArea] textarea").fill(text)
            await asyncio.sleep(0.3)
            start, clicked = time.perf_counter(), time.time()
            try:
                await page.get_by_role("button", name="Translate").click()
                await page.wait_for_function(SHOWS_JS, arg=tick, polling="raf", timeout=timeout_s * 1000)
                seconds.append(time.perf_counter() - start)
            except PlaywrightTimeout:
                errors.append(f"no heatmap of its own within {timeout_s:g} s: {text[:60]}")
                seconds.append(math.inf)
            clicked_at.append(clicked)
            try:  # the translation is sent after the picture: its own, once the run has sent it (never another's)
                await page.wait_for_function(OWN_TRANSLATION_JS, arg=want, polling=100, timeout=10_000)
                own.append(True)
            except PlaywrightTimeout:
                own.append(False)
                errors.append(f"not its own translation: {text[:60]}")
            await asyncio.sleep(pause)
        await browser.close()
    return {"texts": texts, "sentences": [len(split_sentences(t, "en")) for t in texts], "seconds": seconds,
            "clicked_at": clicked_at, "p50": percentile(seconds, 50), "p95": percentile(seconds, 95),
            "all_saw_their_own": all(own), "errors": errors}


async def crowd_round_async(url: str, checkpoint: str, texts: list[str], heavy: int, seed: int,
                            downloads: int = 0) -> dict[str, Any]:
    stop, durations, unfinished, kinds, files = asyncio.Event(), [], [], [], []
    expect = expectations(checkpoint, first_sentences(texts))  # before any visitor: no model work in the event loop
    runner = asyncio.create_task(heavy_visitors(url, heavy, stop, seed, durations, unfinished, kinds))
    fetcher = asyncio.create_task(download_visitors(url, downloads, stop, seed + 500, files))
    await asyncio.sleep(8.0 if heavy or downloads else 0.0)  # the heavy work is in flight before the visitor clicks
    result = await ordinary_visitor(url, checkpoint, texts, expect=expect)
    stop.set()
    await runner
    await fetcher
    return {**result, "heavy_visitors": heavy, "heavy_seconds": durations, "heavy_links": kinds,
            "heavy_unfinished_seconds": unfinished, "download_visitors": downloads, "download_seconds": files}


def crowd(url: str, checkpoint: str, data_dir: str | None, clicks: int, heavy: int,
          run_log: str | Path | None = None, downloads: int = 0) -> dict[str, Any]:
    """Issue #37's measurement: one ordinary visitor with captions of 1-3 sentences beside ``heavy`` visitors
    opening the heaviest links (and ``downloads`` visitors downloading long inputs' JSON); its p50 / p95 (and the
    server's part), the heavy links' durations, the goals."""
    texts = crowd_captions(clicks, data_dir, offset=500)
    res = asyncio.run(crowd_round_async(url, checkpoint, texts, heavy, seed=37, downloads=downloads))
    out: dict[str, Any] = {"crowd": res}
    line = f"1 ordinary visitor (captions of 1-3 sentences) + {heavy} heavy + {downloads} downloading: click -> " \
           f"own heatmap p50 " \
           f"{res['p50']:.2f} s, p95 {res['p95']:.2f} s"
    if run_log:
        res["server_seconds"] = server_times(run_log, texts, res["clicked_at"], res["seconds"])
        res["server_p50"], res["server_p95"] = (percentile(res["server_seconds"], q) for q in (50, 95))
        line += f"; the server's part p50 {res['server_p50']:.2f} s, p95 {res['server_p95']:.2f} s"
    longest = max([*res["heavy_seconds"], *res["heavy_unfinished_seconds"]], default=0.0)
    res["heavy_max_s"] = longest
    res["goals_met"] = res["p95"] < 2.0 and longest <= 60.0 and res["all_saw_their_own"] and not res["errors"]
    print(f"{line}; each saw its own: {res['all_saw_their_own']}, errors: {len(res['errors'])}", flush=True)
    print(f"heavy links: {len(res['heavy_seconds'])} finished, the longest {longest:.1f} s (still running at the "
          f"end: {res['heavy_unfinished_seconds']}); goals (p95 < 2 s, every link within 60 s): {res['goals_met']}",
          flush=True)
    if downloads:
        print(f"  JSON downloads: {len(res['download_seconds'])}, " + ", ".join(
            f"{s:.1f}" for s in res["download_seconds"]) + " s", flush=True)
    for name in dict.fromkeys(res["heavy_links"]):
        took = sorted(s for s, k in zip(res["heavy_seconds"], res["heavy_links"]) if k == name)
        print(f"  {name}: " + ", ".join(f"{s:.1f}" for s in took) + " s", flush=True)
    return out


async def mixed_round(url: str, checkpoint: str, texts: list[str], heavy: int, seed: int) -> dict[str, Any]:
    stop = asyncio.Event()
    if not heavy:
        return {**await visitors_round(url, checkpoint, texts), "heavy_visitors": 0}
    expect = expectations(checkpoint, texts)  # before any visitor: no model work in the event loop
    runner = asyncio.create_task(heavy_visitors(url, heavy, stop, seed))
    await asyncio.sleep(8.0)  # the heavy links are in flight before the ordinary visitors click
    result = await visitors_round(url, checkpoint, texts, expect=expect)
    stop.set()
    return {**result, "heavy_visitors": heavy, "heavy_links_finished": await runner}


def alone_and_mixed(url: str, checkpoint: str, data_dir: str | None, rounds: int, heavy: int = 4,
                    visitors: int = 4, run_log: str | Path | None = None) -> dict[str, Any]:
    """``visitors`` ordinary visitors alone, then beside ``heavy`` visitors opening heavy links, ``rounds`` times
    (alternating, new captions each time): every round, and the ordinary visitors' click-to-heatmap p50 / p95 alone
    and mixed (a visitor that got no heatmap within the round's timeout counts as infinite). With ``run_log`` (the
    server's :mod:`bench.traced_app` log) also the server's part: click to the end of that visitor's script run."""
    out: dict[str, Any] = {"rounds": []}
    for r in range(rounds):
        for h in (0, heavy):
            texts = sentences_for(visitors, data_dir, offset=40 * r + 8 * (h > 0))
            res = asyncio.run(mixed_round(url, checkpoint, texts, h, seed=100 * r + h))
            server = ""
            if run_log:
                res["server_seconds"] = server_times(run_log, texts, res["clicked_at"], res["seconds"])
                server = (f"; the server's part (click -> run done) p50 {percentile(res['server_seconds'], 50):.2f} s, "
                          f"p95 {percentile(res['server_seconds'], 95):.2f} s")
            out["rounds"].append(res)
            print(f"{visitors} ordinary visitors{f' + {h} heavy' if h else ' alone'} (round {r + 1}): click -> own "
                  f"heatmap p50 {res['p50']:.2f} s, p95 {res['p95']:.2f} s{server}; each saw its own: "
                  f"{res['all_saw_their_own']}, errors: {len(res['errors'])}"
                  + (f", heavy links finished meanwhile: {res['heavy_links_finished']}" if h else ""), flush=True)
    for h in (0, heavy):
        for field, name in (("seconds", "ordinary"), ("server_seconds", "ordinary_server")):
            times = [t for res in out["rounds"] if res["heavy_visitors"] == h for t in res.get(field, [])]
            if times:
                out[f"{name}_{'mixed' if h else 'alone'}"] = {"p50": percentile(times, 50),
                                                             "p95": percentile(times, 95), "n": len(times)}
    return out


def soak_heavy(checkpoint: str, n: int = 30, cache_mb: float = 150.0) -> dict[str, Any]:
    """In process, as ``bench.app_load``'s soak: ``n`` long inputs, each through Training evolution (every
    snapshot), attribution (the plan public mode allows) and the beam tree at beam 16, plus 100 sentences at beam 16
    every tenth, under ``ATTN_CACHE_MB=cache_mb`` and public mode's work limit; resident memory after each."""
    import psutil

    os.environ.update(ATTN_CACHE_MB=f"{cache_mb:g}", ATTN_MAX_WORK=os.environ.get("ATTN_MAX_WORK", "1000"))
    from app.analysis import cached, inference, probes
    from app.analysis.inference import DecodeSettings
    from app.limits import work

    process = psutil.Process()
    model = cached.Model(checkpoint, "cpu")
    tr = model.tr
    settings = DecodeSettings(beam_size=16, alpha=5.0, max_len_a=4.0, max_len_b=200)
    start, rss = process.memory_info().rss / 1e6, []
    for i in range(n):
        text = long_list(1000 + i)
        analysis = model.analysis(text, settings)
        for snap in probes.list_snapshots(tr):
            model.snapshot_attentions(str(snap), tuple(analysis.source_ids), tuple(analysis.target_ids))
        plan = work.plan_attribution(tr, len(analysis.source_ids), len(analysis.target_ids), "integrated_gradients")
        model.beyond("attributions", analysis, plan.method, plan.steps, plan.span, work.work_bytes())
        model.beyond("beam_tree", analysis)
        if i % 10 == 0:
            sentences = [inference.sentence(tr, s) for s in hundred_sentences(i).replace(". ", ".\n").splitlines()]
            plan = work.plan_text(tr, [len(s.pieces) for s in sentences], 0, settings)
            model.sentence_translations(sentences, plan, 1)  # the first group, as the page does
        rss.append(process.memory_info().rss / 1e6)
    models_mb = sum(p.numel() * p.element_size() for p in tr.model.parameters()) / 1e6
    return {"heavy_soak_inputs": n, "heavy_soak_cache_mb": cache_mb, "heavy_soak_start_rss_mb": round(start),
            "heavy_soak_peak_rss_mb": round(max(rss)), "heavy_soak_final_rss_mb": round(rss[-1]),
            "heavy_soak_within_budget": max(rss) - start <= cache_mb + models_mb + work.work_bytes() / 1e6,
            "heavy_soak_rss_curve_mb": [round(r) for r in rss]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.app_heavy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    p.add_argument("--cache-mb", type=float, default=300.0, help="ATTN_CACHE_MB of the server")
    p.add_argument("--work-mb", type=float, default=512.0, help="ATTN_WORK_MB of the server")
    p.add_argument("--rounds", type=int, default=2, help="alone / mixed pairs, alternating")
    p.add_argument("--skip-crafted", action="store_true")
    p.add_argument("--crowd", action="store_true",
                   help="issue #37's round instead of the mixed rounds: one ordinary visitor with captions of 1-3 "
                        "sentences beside --heavy visitors (with --pin)")
    p.add_argument("--clicks", type=int, default=30, help="--crowd: the ordinary visitor's captions")
    p.add_argument("--heavy", type=int, default=4, help="visitors opening the heaviest links")
    p.add_argument("--downloads", type=int, default=0,
                   help="--crowd: visitors clicking Download JSON on long inputs meanwhile (issue #49)")
    p.add_argument("--pin", action="store_true",
                   help="server on core 0, this process and every Chromium on the other cores (as --split does)")
    p.add_argument("--log", default=None, help="append the server's output to this file")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    args.skip_crafted = args.skip_crafted or args.crowd
    checkpoint = str(REPO_ROOT / MODELS.split(",")[0])
    env = {"ATTN_CACHE_MB": f"{args.cache_mb:g}", "ATTN_WORK_MB": f"{args.work_mb:g}"}
    out: dict[str, Any] = {"machine": machine_info(), "env": env, "crafted": [], "rounds": []}
    models_mb = sum(os.path.getsize(os.path.join(REPO_ROOT, m, "model.safetensors")) for m in MODELS.split(",")) / 1e6
    if not args.skip_crafted:
        print(f"crafted links, public mode, ATTN_CACHE_MB={args.cache_mb:g}, ATTN_WORK_MB={args.work_mb:g}:")
        with public_server(env, log=args.log) as (url, pid):
            out["crafted"] = asyncio.run(crafted_round(url, pid))
        start = min(r["rss_before_mb"] for r in out["crafted"])
        bound = start + args.cache_mb + models_mb + args.work_mb
        out["crafted_bound_mb"] = round(bound)
        out["crafted_ok"] = all(r["seconds"] < 60 and r["rss_peak_mb"] <= bound and not r["errors"]
                                for r in out["crafted"])
        print(f"  every link under 60 s and under {bound:.0f} MB (first RSS + ATTN_CACHE_MB + models + "
              f"ATTN_WORK_MB), no error: {out['crafted_ok']}")
    server_cores = browser_cores = None
    if args.pin:
        server_cores, browser_cores = split_cores()
        out["pinned"] = {"server": sorted(server_cores), "browsers": sorted(browser_cores)}
    with tempfile.TemporaryDirectory() as tmp, \
            public_server(env, cpus=server_cores, log=args.log, run_log=f"{tmp}/runs.jsonl") as (url, _), \
            pinned(browser_cores):  # this process and the Chromium it starts stay off the server
        if args.crowd:
            out.update(crowd(url, checkpoint, args.data_dir, args.clicks, args.heavy, run_log=f"{tmp}/runs.jsonl",
                             downloads=args.downloads))
        else:
            out.update(alone_and_mixed(url, checkpoint, args.data_dir, args.rounds, heavy=args.heavy,
                                       run_log=f"{tmp}/runs.jsonl"))
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
