"""Where a decoding step spends its time, against the roofline of its matrix products: ``python -m bench.decode_profile
[--threads N] [--quick]``.

1. Probes of this machine: the peak of a large matrix product (GFLOP/s, float32 and bfloat16: 2048 x 2048 x 2048)
   and the memory bandwidth a matrix-vector product gets from weights that are not in cache (GB/s: a 512 MB float32
   matrix times one vector).
2. The OPUS-MT-sized model of :mod:`bench.marian` (512 wide, 6 + 6 layers, 8 heads, feed-forward 2048, 58,101 pieces;
   random weights) opened by ``transformer.load``; ``torch.profiler`` over one greedy translation of a 20-word
   sentence (20 steps) and one batch of 64 sentences at beam 4 (the bench's workload): the operators by self CPU time;
   and the same two in bfloat16 (``dtype="bfloat16"``), timed; each product class's route as measured at load
   (``transformer.network.linear``: both routes' times per row bucket).
3. Every linear layer of one decoding step at that size, timed alone (``torch.nn.functional.linear`` on the step's
   rows: 1 for greedy, 256 for a batch of 64 at beam 4): its FLOPs and bytes (weights once, plus inputs and
   outputs), the time the roofline allows (the larger of FLOPs / peak and bytes / bandwidth) and the time it takes.

Prints Markdown; ``--json`` the numbers too.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from transformer.network.routes import measured_routes

from .common import cpu_name, synthetic_sentences

D, LAYERS, HEADS, FF, VOCAB = 512, 6, 8, 2048, 58101  # OPUS-MT's sizes


def _timed(fn: Any, repeat: int, warmup: int = 2) -> float:
    """The least wall time of ``repeat`` calls (on a shared machine the least is the one the others disturbed
    least: what the hardware allows)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def probes(quick: bool = False) -> dict[str, float]:
    """Peak matrix-product GFLOP/s (float32, bfloat16) and matrix-vector GB/s of this machine, now. The products
    are the model's own (``transformer.network.linear.linear``: a bfloat16 one on a CPU without oneDNN's bfloat16
    product runs in float32 there)."""
    from transformer.network.linear import linear

    n = 1024 if quick else 2048
    out: dict[str, float] = {}
    with torch.inference_mode():
        for dtype in (torch.float32, torch.bfloat16):
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            seconds = _timed(lambda a=a, b=b: linear(a, b), 5 if quick else 20)
            out[f"peak_gflops_{str(dtype).split('.')[-1]}"] = 2 * n**3 / seconds / 1e9
        # 32768 x 4096 float32 (512 MB) is beyond the caches; 2048 x 4096 (32 MB) is what a cache can hold
        for name, rows in (("bandwidth_gbs", 8192 if quick else 32768), ("cache_bandwidth_gbs", 2048)):
            w, x = torch.randn(rows, 4096), torch.randn(1, 4096)
            seconds = _timed(lambda w=w, x=x: F.linear(x, w), 5 if quick else 20)
            out[name] = w.numel() * 4 / seconds / 1e9
    return out


def step_linears() -> list[tuple[str, int, int, int]]:
    """(name, count per step, in, out) of the linear layers one decoding step runs (the encoder's keys and values
    for cross-attention are computed once, not per step)."""
    return [("self-attention q, k, v", LAYERS * 3, D, D), ("self-attention out", LAYERS, D, D),
            ("cross-attention q", LAYERS, D, D), ("cross-attention out", LAYERS, D, D),
            ("feed-forward in", LAYERS, D, FF), ("feed-forward out", LAYERS, FF, D), ("output projection", 1, D, VOCAB)]


def roofline(peak: dict[str, float], rows: int, repeat: int) -> list[dict[str, Any]]:
    """Each linear of a step at ``rows`` rows, float32: FLOPs, bytes, roofline time and measured time (all its
    copies in the step)."""
    out = []
    gflops, gbs = peak["peak_gflops_float32"], peak["bandwidth_gbs"]
    with torch.inference_mode():
        for name, count, d_in, d_out in step_linears():
            ws = [torch.randn(d_out, d_in) * 0.02 for _ in range(min(count, 8))]  # distinct weights: not all cached
            x = torch.randn(rows, d_in)
            seconds = _timed(lambda x=x, ws=ws: [F.linear(x, w) for w in ws], repeat) / len(ws) * count
            flops = 2 * rows * d_in * d_out * count
            nbytes = 4 * (d_in * d_out + rows * (d_in + d_out)) * count
            bound = max(flops / gflops / 1e9, nbytes / gbs / 1e9)
            out.append({"linear": name, "count": count, "shape": f"{rows} x {d_in} -> {d_out}", "flops": flops,
                        "bytes": nbytes, "roofline_ms": bound * 1e3, "measured_ms": seconds * 1e3,
                        "bound_by": "compute" if flops / gflops > nbytes / gbs else "memory"})
    return out


def profile(threads: int, quick: bool) -> dict[str, Any]:
    """torch.profiler over ours: one greedy sentence, and one batch at beam 4 (the operators by self CPU time)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    import transformer

    from .marian import marian_dir

    sentences = synthetic_sentences(64 if not quick else 8)
    sentence = next((s for s in synthetic_sentences(200) if len(s.split()) == 20), sentences[0])
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        path = marian_dir(Path(tmp), synthetic_sentences(2000), quick)
        tr, half = (transformer.load(path, device="cpu", dtype=d) for d in ("float32", "bfloat16"))

        def runs(t: Any) -> dict[str, Any]:
            return {"greedy, 1 sentence, 20 steps": lambda: t.translate(sentence, beam_size=1, max_len_a=0.0,
                                                                         max_len_b=20),
                    "beam 4, 64 sentences, 20 steps": lambda: t.translate_batch(sentences, beam_size=4,
                                                                                  max_len_a=0.0, max_len_b=20)}

        for (name, fn), bf16 in zip(runs(tr).items(), runs(half).values()):
            wall = _timed(fn, 3, warmup=1)
            wall_bf16 = _timed(bf16, 3, warmup=1)
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                fn()
            events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
            total = sum(e.self_cpu_time_total for e in events) or 1
            out[name] = {"wall_ms": wall * 1e3, "bf16_wall_ms": wall_bf16 * 1e3, "ops": [
                {"op": e.key, "calls": e.count, "self_ms": e.self_cpu_time_total / 1e3,
                 "share": e.self_cpu_time_total / total} for e in events[:8]]}
    return out


def report(result: dict[str, Any]) -> str:
    p = result["probes"]
    out = [f"{result['cpu']}, {result['threads']} threads, torch {torch.__version__}. Probes: matrix product "
           f"{p['peak_gflops_float32']:.0f} GFLOP/s float32, {p['peak_gflops_bfloat16']:.0f} GFLOP/s bfloat16; "
           f"matrix-vector {p['bandwidth_gbs']:.1f} GB/s from memory (512 MB of weights), "
           f"{p['cache_bandwidth_gbs']:.1f} GB/s from 32 MB (cache). Times: the least of the repeats.", ""]
    for name, prof in result["profile"].items():
        out += [f"`torch.profiler`, ours, {name} ({prof['wall_ms']:.0f} ms unprofiled, float32; the same in "
                f"bfloat16: {prof['bf16_wall_ms']:.0f} ms, {prof['wall_ms'] / prof['bf16_wall_ms']:.2f}x):", "",
                "| operator | calls | self ms | share |", "|---|---:|---:|---:|"]
        out += [f"| `{o['op']}` | {o['calls']} | {o['self_ms']:.1f} | {o['share']:.0%} |" for o in prof["ops"]]
        out.append("")
    for rows, lines in result["roofline"].items():
        total_r = sum(r["roofline_ms"] for r in lines)
        total_m = sum(r["measured_ms"] for r in lines)
        out += [f"The linear layers of one decoding step, {rows} row(s), float32 (roofline: the larger of FLOPs / "
                f"peak and bytes / bandwidth): {total_m:.2f} ms measured against {total_r:.2f} ms "
                f"({total_r / total_m:.0%} of the roofline)", "",
                "| linear (per step) | shape | MFLOP | MB | bound by | roofline ms | measured ms | of roofline |",
                "|---|---|---:|---:|---|---:|---:|---:|"]
        out += [f"| {r['linear']} (x{r['count']}) | {r['shape']} | {r['flops'] / 1e6:.1f} | {r['bytes'] / 1e6:.1f} | "
                f"{r['bound_by']} | {r['roofline_ms']:.3f} | {r['measured_ms']:.3f} | "
                f"{r['roofline_ms'] / r['measured_ms']:.0%} |" for r in lines]
        out.append("")
    if result.get("gemm"):
        out += ["Each product class's route, timed once at load in this process (both routes' least time per row "
                "bucket, and the one kept):", ""] + [f"- {line}" for line in result["gemm"]] + [""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decode_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smaller probes and model: seconds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    peak = probes(args.quick)
    result = {"cpu": cpu_name(), "threads": args.threads, "probes": peak,
              "roofline": {rows: roofline(peak, rows, 5 if args.quick else 20) for rows in (1, 256)},
              "profile": profile(args.threads, args.quick),
              "gemm": [m.line() for m in measured_routes()]}
    print(report(result))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
