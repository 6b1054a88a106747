"""One sentence at a time: greedy and beam-4 latency with every attention captured, the cost of
capturing them, and the gain of the key/value cache over recomputing the prefix at every step."""

from __future__ import annotations

from typing import Any

from transformer import Translator
from transformer.decoding import beam_search, greedy_decode
from transformer.network.masks import pad_sequences

from .common import median, percentile, time_interleaved


def bench_latency(translator: Translator, sentence: str, repeat: int = 20, warmup: int = 2) -> dict[str, Any]:
    """``translate`` of one sentence, the way the app calls it (``return_attention=True``)."""
    dev = translator.device
    result: dict[str, Any] = {"latency_sentence": sentence,
                              "latency_source_tokens": len(translator.encode_source(sentence)[0])}
    for name, beam in (("greedy", 1), ("beam4", 4)):
        calls = {
            "with": lambda b=beam: translator.translate(sentence, beam_size=b, return_attention=True),
            "without": lambda b=beam: translator.translate(sentence, beam_size=b, return_attention=False),
        }
        times = time_interleaved(calls, repeat=repeat, warmup=warmup, device=dev)
        out = translator.translate(sentence, beam_size=beam, return_attention=True)
        result[f"{name}_ms_p50"] = 1000 * median(times["with"])
        result[f"{name}_ms_p95"] = 1000 * percentile(times["with"], 95)
        result[f"{name}_output_tokens"] = len(out.target_ids)
        overhead = median(times["with"]) / median(times["without"])
        result["capture_overhead" if beam == 4 else "capture_overhead_greedy"] = overhead

    # key/value cache against recomputing the whole prefix, on the decoding functions themselves
    src = pad_sequences([translator.encode_source(sentence)[0]], translator.config.pad_id).to(translator.device)
    model = translator.model
    for name, fn in (("greedy", lambda cache: greedy_decode(model, src, use_cache=cache)),
                     ("beam4", lambda cache: beam_search(model, src, 4, use_cache=cache))):
        reps = max(2, repeat // 4)
        times = time_interleaved({"cache": lambda f=fn: f(True), "recompute": lambda f=fn: f(False)},
                                 repeat=reps, warmup=1, device=dev)
        speedup = median(times["recompute"]) / median(times["cache"])
        result["kv_cache_speedup" if name == "beam4" else "kv_cache_speedup_greedy"] = speedup
    return result

