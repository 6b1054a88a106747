"""The app's cost: model load time and peak resident memory while translating a 200-token input.

Run in a fresh process (``python -m bench.app_cost --checkpoint DIR``) so that the peak belongs to
loading and translating alone; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import REPO_ROOT, peak_rss_mb


def long_input(translator: Any, n_tokens: int, sentences: list[str]) -> str:
    """Text of about ``n_tokens`` sentencepiece tokens (within the model's limit), from real sentences."""
    n_tokens = min(n_tokens, translator.max_source_tokens)
    ids: list[int] = []
    i = 0
    while len(ids) < n_tokens:
        ids.extend(translator.tokenizer.encode(sentences[i % len(sentences)]))
        i += 1
    text = translator.tokenizer.decode(ids[:n_tokens])
    while len(translator.tokenizer.encode(text)) > n_tokens:  # re-encoding can merge differently
        text = text.rsplit(" ", 1)[0]
    return text


def measure(checkpoint: str, device: str, n_tokens: int, threads: int, sentences: list[str], loads: int = 3,
            beam_size: int = 4) -> dict[str, Any]:
    import torch

    import transformer

    torch.set_num_threads(threads)
    rss_imports = peak_rss_mb()
    times = []
    translator = None
    for _ in range(loads):
        t0 = time.perf_counter()
        translator = transformer.load(checkpoint, device=device)
        times.append(time.perf_counter() - t0)
    text = long_input(translator, n_tokens, sentences)
    t0 = time.perf_counter()
    result = translator.translate(text, beam_size=beam_size, return_attention=True)
    translate_s = time.perf_counter() - t0
    return {
        "load_s": sorted(times)[len(times) // 2],
        "load_s_first": times[0],
        "peak_rss_mb": peak_rss_mb(),
        "rss_after_imports_mb": rss_imports,
        "peak_rss_input_tokens": len(result.source_ids) - 1,
        "peak_rss_output_tokens": len(result.target_ids),
        "long_translate_s": translate_s,
    }


def bench_app_cost(checkpoint: str | Path, device: str = "cpu", n_tokens: int = 200, threads: int = 1,
                   sentences: list[str] | None = None, timeout: float = 600) -> dict[str, Any]:
    """Runs ``measure`` in a fresh Python process and returns its JSON."""
    cmd = [sys.executable, "-m", "bench.app_cost", "--checkpoint", str(checkpoint), "--device", device,
           "--tokens", str(n_tokens), "--threads", str(threads)]
    payload = json.dumps(sentences or [])
    proc = subprocess.run(cmd, input=payload, capture_output=True, text=True, cwd=REPO_ROOT, timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"bench.app_cost failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    sentences = json.loads(sys.stdin.read() or "[]") if not sys.stdin.isatty() else []
    if not sentences:
        from .common import synthetic_sentences

        sentences = synthetic_sentences(50)
    print(json.dumps(measure(args.checkpoint, args.device, args.tokens, args.threads, sentences)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
