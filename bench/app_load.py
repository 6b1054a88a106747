"""``python -m bench.app_load``: the hosted demo under load.

1. Visitors at once: N Chromium pages (one server) each type a different sentence and press Translate at the
   same moment; each must see its own translation and heatmap, none another's, no error element. Reported:
   click-to-heatmap p50 / p95 at 1, 4 and 8 visitors; also a round where one visitor runs an ablation meanwhile
   (head masks must never change the shared model for the others).
   Then 4 ordinary visitors beside 4 that keep opening the heaviest links public mode allows (attribution and the
   beam tree of a ~3,200-character list at beam 16, 100 sentences at beam 16), against the same 4 alone
   (``bench.app_heavy.alone_and_mixed``; ``--heavy 0`` skips it).
2. Soak: 500 distinct inputs of mixed length through the cached analysis path (``app.analysis.cached``) under a small
   ``ATTN_CACHE_MB``: resident memory after each, its peak, and the cache's bytes. Then the heavy soak
   (``bench.app_heavy.soak_heavy``): long inputs through Training evolution, attribution and the beam tree at
   beam 16, and 100 sentences at beam 16, under public mode's work limit.

Needs ``/usr/bin/chromium`` and ``playwright`` for part 1, ``psutil`` for part 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from .browser import streamlit_server
from .common import DEFAULT_CHECKPOINT, DEFAULT_DATA_DIR, machine_info, read_sentences
from .visitors import sentences_for, visitors_round


def soak(checkpoint: str, n: int = 500, cache_mb: float = 150.0, data_dir: str | Path | None = None) -> dict:
    """``n`` distinct inputs of mixed length through ``app.analysis.cached.Model.analysis`` (``ATTN_CACHE_MB``)."""
    import psutil

    os.environ["ATTN_CACHE_MB"] = str(cache_mb)
    from app.analysis import cached
    from app.analysis.inference import DecodeSettings

    process = psutil.Process()
    base = [s for s in (read_sentences(data_dir) or []) if s] or ["A man rides a bike down the street."]
    model = cached.Model(checkpoint, "cpu")
    tr = model.tr
    limit = tr.max_source_tokens
    rss, cache_bytes = [], []
    start_rss = process.memory_info().rss
    for i in range(n):
        words = " ".join(base[(i * 7 + k) % len(base)] for k in range(1 + i % 12))  # 1 to 12 sentences long
        text = f"{i}. {words}"[: 5000]
        model.analysis(text, DecodeSettings(beam_size=1, max_len_a=1.0, max_len_b=10), ())
        rss.append(process.memory_info().rss / 1e6)
        cache_bytes.append(cached.RESULTS.nbytes / 1e6)
    models_mb = sum(p.numel() * p.element_size() for p in tr.model.parameters()) / 1e6
    growth = max(rss) - start_rss / 1e6
    return {"soak_inputs": n, "soak_cache_mb": cache_mb, "soak_models_mb": round(models_mb, 1),
            "soak_reserved_mb": round(sum(cached.MODEL_BYTES.values()) / 1e6, 1),
            "soak_peak_growth_mb": round(growth, 1), "soak_within_budget": growth <= cache_mb + models_mb,
            "soak_start_rss_mb": round(start_rss / 1e6, 1), "soak_peak_rss_mb": round(max(rss), 1),
            "soak_final_rss_mb": round(rss[-1], 1), "soak_peak_cache_mb": round(max(cache_bytes), 1),
            "soak_cache_entries": len(cached.RESULTS), "soak_longest_source_pieces": limit,
            "soak_rss_curve_mb": [round(r, 1) for r in rss[:: max(1, n // 50)]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.app_load", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    p.add_argument("--visitors", default="1,4,8", help="concurrent visitor counts")
    p.add_argument("--soak", type=int, default=500, help="inputs for the soak (0: skip)")
    p.add_argument("--cache-mb", type=float, default=150.0, help="ATTN_CACHE_MB during the soak")
    p.add_argument("--heavy-soak", type=int, default=30, help="long inputs through the heavy views (0: skip; "
                   "bench.app_heavy.soak_heavy)")
    p.add_argument("--heavy", type=int, default=4, help="heavy visitors beside 4 ordinary ones (0: skip)")
    p.add_argument("--heavy-rounds", type=int, default=1, help="alone / mixed pairs, alternating")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    result: dict[str, Any] = {"machine": machine_info(), "rounds": []}
    failed = False
    if args.visitors:
        with streamlit_server(args.checkpoint, env={"ATTN_PUBLIC": "1"}) as url:
            counts = [int(c) for c in args.visitors.split(",") if c.strip()]
            for k, n in enumerate(counts):
                texts = sentences_for(n, args.data_dir, offset=10 * k)
                r = asyncio.run(visitors_round(url, args.checkpoint, texts))
                result["rounds"].append(r)
                print(f"{n} visitors at once: click -> own heatmap p50 {r['p50']:.2f} s, p95 {r['p95']:.2f} s; "
                      f"each saw its own: {r['all_saw_their_own']}, any saw another's: {r['any_saw_another']}, "
                      f"errors: {len(r['errors'])}")
                failed |= not r["all_saw_their_own"] or r["any_saw_another"] or bool(r["errors"])
            n = counts[-1]
            r = asyncio.run(visitors_round(url, args.checkpoint, sentences_for(n, args.data_dir, offset=100), True))
            result["rounds"].append(r)
            print(f"{n} visitors, one of them ablating: others p50 {r['p50']:.2f} s, p95 {r['p95']:.2f} s; each saw "
                  f"its own (unablated) translation: {r['all_saw_their_own']}, errors: {len(r['errors'])}")
            failed |= not r["all_saw_their_own"] or bool(r["errors"])
            if args.heavy:
                from .app_heavy import alone_and_mixed

                mixed = alone_and_mixed(url, args.checkpoint, args.data_dir, args.heavy_rounds, heavy=args.heavy)
                result["heavy_rounds"] = mixed["rounds"]
                result.update({k: v for k, v in mixed.items() if k.startswith("ordinary_")})
                failed |= any(not r["all_saw_their_own"] or r["errors"] for r in mixed["rounds"])
    if args.soak:
        s = soak(args.checkpoint, args.soak, args.cache_mb, args.data_dir)
        result.update(s)
        print(f"soak, {s['soak_inputs']} inputs, ATTN_CACHE_MB={s['soak_cache_mb']:g}: RSS {s['soak_start_rss_mb']} "
              f"-> peak {s['soak_peak_rss_mb']} MB, growth {s['soak_peak_growth_mb']} MB "
              f"({'within' if s['soak_within_budget'] else 'OVER'} the budget plus the model's "
              f"{s['soak_models_mb']} MB; "
              f"cache peak {s['soak_peak_cache_mb']} MB, reserved for the model and one analysis in flight "
              f"{s['soak_reserved_mb']} MB, {s['soak_cache_entries']} entries kept)")
    if args.heavy_soak:
        from .app_heavy import soak_heavy

        h = soak_heavy(args.checkpoint, args.heavy_soak, args.cache_mb)
        result.update(h)
        failed |= not h["heavy_soak_within_budget"]
        print(f"heavy soak, {h['heavy_soak_inputs']} long inputs through Training evolution, attribution and the "
              f"beam tree at beam 16 (+100 sentences every tenth), ATTN_CACHE_MB={h['heavy_soak_cache_mb']:g}: RSS "
              f"{h['heavy_soak_start_rss_mb']} -> peak {h['heavy_soak_peak_rss_mb']} -> "
              f"{h['heavy_soak_final_rss_mb']} MB ({'within' if h['heavy_soak_within_budget'] else 'OVER'} the "
              "budget + model + ATTN_WORK_MB)")
    if args.json:
        print(json.dumps(result))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
