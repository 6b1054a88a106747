"""``python -m bench.bf16``: bfloat16 against float32 on the OPUS-MT-sized model, each dtype in a process of its own.

The model is ``bench.paired``'s ``MARIAN_SIZES`` (512 wide, 6 + 6 layers, 58,101 pieces; random weights, seed 0, no
download), laid out for decoding (``weights.decoding_layout``: each product's route measured at load). Two
workloads, 20 steps each (random weights ramble: every run stops at the length limit): greedy search of one
20-piece sentence, and beam 4 over 16 such sentences. Each dtype runs in its own process (``--worker``), each
workload the least of ``--repeat`` runs in the process's CPU time (a shared machine's waits are not counted), with
``--threads`` threads (1 by default); ``--rounds`` such pairs of processes in turns, the least of every round kept
(a shared machine's load changes from minute to minute). Printed: each dtype's seconds, bfloat16's speed against
float32's (float32 seconds / bfloat16 seconds: above 1 faster), whether the tokens agree, and the routes the bfloat16
model's products took. For a CPU without bfloat16 instructions, emulated on one with them, run it under
``ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2`` (set before Python starts; the
workers inherit them).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch

from .common import in_own_process, machine_info, worker_main
from .paired import MARIAN_SIZES

DTYPES = ("float32", "bfloat16")
STEPS = 20
BEAM_SENTENCES = 16


def worker(job: dict[str, Any]) -> dict[str, Any]:
    """One dtype's timings (the least CPU seconds of ``repeat`` runs of each workload) and its tokens."""
    import transformer
    from transformer.network import routes
    from transformer.network.weights import decoding_layout

    torch.set_num_threads(job["threads"])
    torch.manual_seed(0)
    model = transformer.Transformer(transformer.TransformerConfig(**MARIAN_SIZES)).eval()
    model = decoding_layout(model.to(getattr(torch, job["dtype"])))
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(1, 58000, (BEAM_SENTENCES, STEPS), generator=gen)  # (B, S): 20 pieces, the last </s>
    src[:, -1] = MARIAN_SIZES["eos_id"]
    kw = dict(max_len_a=0.0, max_len_b=STEPS)
    runs = {"greedy": lambda: transformer.greedy_decode(model, src[:1], **kw),
            "beam4": lambda: transformer.beam_search(model, src, 4, **kw)}
    out: dict[str, Any] = {}
    for name, fn in runs.items():
        fn()  # warm
        times = []
        for _ in range(job["repeat"]):
            start = time.process_time()
            hyp = fn()
            times.append(time.process_time() - start)
        out[f"{name}_s"] = min(times)
        out[f"{name}_tokens"] = hyp.tokens.tolist()
    out["routes"] = [m.line() for m in routes.measured_routes() if m.dtype == job["dtype"]]
    return out


def main(argv: list[str] | None = None) -> int:
    if worker_main(worker, argv):
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.bf16", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3, help="runs of each workload; the least is kept")
    p.add_argument("--rounds", type=int, default=1, help="processes of each dtype, in turns; the least is kept")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    got: dict[str, dict[str, Any]] = {}
    for _ in range(args.rounds):
        for d in DTYPES:
            new = in_own_process("bench.bf16", dict(side=d, dtype=d, threads=args.threads, repeat=args.repeat))
            old = got.setdefault(d, new)
            for key in ("greedy_s", "beam4_s"):
                old[key] = min(old[key], new[key])
    result: dict[str, Any] = {"machine": machine_info(), "threads": args.threads, "rounds": args.rounds}
    for name, label in (("greedy", "greedy, 1 sentence"), ("beam4", f"beam 4, {BEAM_SENTENCES} sentences")):
        f32, bf16 = got["float32"][f"{name}_s"], got["bfloat16"][f"{name}_s"]
        result[name] = {"float32_s": round(f32, 3), "bfloat16_s": round(bf16, 3), "speed": round(f32 / bf16, 2),
                        "same_tokens": got["float32"][f"{name}_tokens"] == got["bfloat16"][f"{name}_tokens"]}
        print(f"{label}, {STEPS} steps: float32 {f32:.3f} s, bfloat16 {bf16:.3f} s: bfloat16 at {f32 / bf16:.2f}x "
              f"float32's speed; same tokens: {result[name]['same_tokens']}")
    result["bfloat16_routes"] = got["bfloat16"]["routes"]
    for line in result["bfloat16_routes"]:
        print("  " + line)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
