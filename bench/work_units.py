"""``python -m bench.work_units``: what one work unit (``app.limits.work``) costs in CPU time, per kind of job, on
the shipped model: ALTI+ (``app.limits.work.alti_work``) beside integrated gradients
(``app.limits.work.attribution_work``, the reference the unit was calibrated on: 2.7-3 ms of one core), on sentences
of 32 to 256 source pieces; with ``--patching``, What carries the change (``app.limits.work.patching_work``: one edit,
every site, the page's beam 4) on captions of ``PATCH_WORDS`` words instead.

One process, one torch thread, CPU time (``time.process_time``: on a shared machine the wall clock measures the
other tenants), the best of ``--repeats``; random token ids (the cost does not depend on them). Prints one line per
size and, with ``--json``, the rows.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from .common import DEFAULT_CHECKPOINT

SIZES = ((32, 31), (64, 63), (128, 127), (256, 255))  # (source, decoder input) positions
CAPTION = "a man in a red shirt rides a bike past a green field with his dog"  # 16 words; "red" is swapped
PATCH_WORDS = (8, 16, 32)


def best_cpu_seconds(run: Callable[[], Any], repeats: int) -> float:
    """The least CPU time of ``repeats`` runs of ``run``."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def measure(checkpoint: str, repeats: int = 3, sizes: tuple[tuple[int, int], ...] = SIZES) -> list[dict[str, Any]]:
    import torch

    from app.limits import work
    from app.models import catalog
    from transformer.interpret import attribute, contributions

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tr = catalog.load_translator(checkpoint, "cpu")
    model, vocab, params = tr.model, tr.config.tgt_vocab_size, work.parameters(tr)
    rows = []
    for s, t in sizes:
        src = torch.randint(4, vocab, (1, s))
        src[0, -1] = tr.config.eos_id
        tgt = torch.randint(4, vocab, (1, t))
        tgt[0, 0] = tr.config.bos_id
        labels = torch.randint(4, vocab, (1, t))
        with torch.no_grad():
            alti_s = best_cpu_seconds(partial(contributions, model, src, tgt, max_bytes=work.work_bytes()), repeats)
        alti_units = work.alti_work(tr, s, t)  # as its probe record counts it (source, output pieces)
        span, steps = (0, 4), 8
        ig_s = best_cpu_seconds(partial(attribute, model, src, tgt, labels, "integrated_gradients", steps,
                                        max_batch_bytes=work.work_bytes(), output_span=span), repeats)
        ig_units = work.attribution_work(params, s, t, span[1] - span[0], "integrated_gradients", steps)
        rows.append({"source": s, "target": t, "alti_s": alti_s, "alti_units": alti_units,
                     "alti_ms_per_unit": 1000 * alti_s / alti_units, "ig_s": ig_s, "ig_units": ig_units,
                     "ig_ms_per_unit": 1000 * ig_s / ig_units})
        print(f"{s:3d} x {t:3d}: ALTI+ {alti_s:.2f} s CPU for {alti_units:6.1f} units = "
              f"{1000 * alti_s / alti_units:5.2f} ms a unit; integrated gradients ({steps} steps, {span[1]} rows) "
              f"{ig_s:.2f} s for {ig_units:6.1f} units = {1000 * ig_s / ig_units:5.2f} ms a unit", flush=True)
    return rows


def measure_patching(checkpoint: str, repeats: int = 3, words: tuple[int, ...] = PATCH_WORDS) -> list[dict[str, Any]]:
    """What carries the change's probe (``app.analysis.probes.PROBES["patching"]``: the library's every site and the
    edited sentence's translation) on captions of ``words`` words, one edit, CPU time per unit
    of its record's estimate (the edit: ``red`` to its first substitute of the same piece count)."""
    import torch

    from app import report
    from app.analysis import patching, probes
    from app.analysis.inference import DecodeSettings
    from app.models import catalog

    torch.set_num_threads(1)
    tr = catalog.load_translator(checkpoint, "cpu")
    probe, rows = probes.PROBES["patching"], []
    for n in words:
        text = " ".join((CAPTION.split() * (n // 16 + 1))[:n])
        settings = DecodeSettings(beam_size=4, alpha=tr.default_alpha)
        a = report.analysis_for(tr.translate(text, settings, return_attention=True), tr, text, settings)
        red = [w for _, _, w in patching.words(text)].index("red")
        swap = next(iter(patching.substitutes(tr, text, red, 1)), "blue")
        args = (patching.edited_text(text, red, swap), None, None, "denoise")
        seconds, units = best_cpu_seconds(partial(probe.run, tr, a, *args), repeats), probe.cost(tr, a, *args)
        rows.append({"words": n, "source": len(a.source_ids), "target": len(a.target_ids), "patching_s": seconds,
                     "patching_units": units, "patching_ms_per_unit": 1000 * seconds / units})
        print(f"{n:3d} words ({len(a.source_ids)} x {len(a.target_ids)} pieces): patching {seconds:.2f} s CPU for "
              f"{units:6.1f} units = {1000 * seconds / units:5.2f} ms a unit", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.work_units", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--patching", action="store_true", help="What carries the change's patching instead")
    args = p.parse_args(argv)
    rows = (measure_patching if args.patching else measure)(args.checkpoint, args.repeats)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
