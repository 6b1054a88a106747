"""``python -m bench``: our speed against the peers, as ratios taken in the same run.

Sections (CPU always; CUDA again, separately, when ``torch.cuda.is_available()``):

1. training throughput against ``torch.nn.Transformer`` of the same sizes;
2. one 20-word sentence, all attentions captured: greedy and beam-4 latency, the cost of capturing
   attentions, the gain of the key/value cache;
3. batch translation of a test_2016_flickr-sized workload against CTranslate2 on the same weights;
4. the app's cost: load time and peak resident memory on a 200-token input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from transformer.environment import cores

from .common import (
    DEFAULT_CHECKPOINT,
    DEFAULT_DATA_DIR,
    machine_info,
    read_sentences,
    sentence_of_words,
    synthetic_sentences,
)

SECTIONS = ("train", "latency", "batch", "app", "marian", "m2m100")
REQUIRED_KEYS = ("train_tok_s", "train_tok_s_nn_transformer", "train_speed_ratio", "greedy_ms_p50", "beam4_ms_p50",
                 "capture_overhead", "kv_cache_speedup", "batch_sent_s", "batch_sent_s_ctranslate2",
                 "ctranslate2_ratio", "load_s", "peak_rss_mb")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (tiny sizes, few sentences)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--markdown", action="store_true", help="also print the table in Markdown (for the README)")
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT),
                   help="checkpoint directory (default: checkpoints/multi30k-en-de; with --quick a random "
                        "tiny model stands in when it is missing)")
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR),
                   help="Multi30k directory; {split}.en is the workload (synthetic sentences without it)")
    p.add_argument("--split", default="test_2016_flickr", help="workload file {data-dir}/{split}.en")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads for torch and CTranslate2 (default: all cores; quick: 1)")
    p.add_argument("--sentences", type=int, default=None, help="batch workload size (default 1000; quick 16)")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per batch (default 64; quick 8)")
    p.add_argument("--repeat", type=int, default=None, help="timed repeats for latency (default 20; quick 3)")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    p.add_argument("--no-cuda", action="store_true", help="skip the CUDA section even when a GPU is present")
    p.add_argument("--random-model", action="store_true", help="use a random tiny model, not the checkpoint")
    args = p.parse_args(argv)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections: {sorted(unknown)}")
    q = args.quick
    args.threads = args.threads or (1 if q else cores())
    args.sentences = args.sentences or (16 if q else 1000)
    args.batch_size = args.batch_size or (8 if q else 64)
    args.repeat = args.repeat or (3 if q else 20)
    return args


def random_checkpoint(directory: Path, sentences: list[str]) -> Path:
    """A random tiny model with a small sentencepiece vocabulary, saved as a checkpoint."""
    from transformer import Tokenizer, Transformer, TransformerConfig, save_checkpoint

    corpus = directory / "corpus.txt"
    corpus.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    tokenizer = Tokenizer.train([corpus], vocab_size=400)
    torch.manual_seed(0)
    v = tokenizer.vocab_size
    cfg = TransformerConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=32, n_heads=4, n_encoder_layers=2,
                            n_decoder_layers=2, d_ff=64, max_len=48)
    return save_checkpoint(directory / "random-tiny", Transformer(cfg).eval(), tokenizer,
                           {"note": "random weights, for python -m bench --quick"})


def workload(args: argparse.Namespace) -> tuple[list[str], list[str], str]:
    """The batch workload (``args.sentences`` of them), every available line, and where they come from."""
    lines = read_sentences(args.data_dir, args.split, "en")
    if lines:
        source = f"{Path(args.data_dir) / (args.split + '.en')}"
    else:
        lines = synthetic_sentences(max(args.sentences, 1000))
        source = f"synthetic sentences (no {args.split}.en in {args.data_dir})"
    reps = math.ceil(args.sentences / len(lines))
    return (lines * reps)[: args.sentences], lines, source


def train_sizes(args: argparse.Namespace, config: Any) -> tuple[Any, dict[str, int]]:
    from transformer import TransformerConfig

    if args.quick:
        cfg = TransformerConfig(src_vocab_size=1000, tgt_vocab_size=1000, d_model=32, n_heads=4, n_encoder_layers=2,
                                n_decoder_layers=2, d_ff=64, max_len=64)
        return cfg, dict(batch_size=8, max_src=12, n_batches=1, repeat=2, warmup=1)
    return config, dict(batch_size=128, max_src=30, n_batches=4, repeat=5, warmup=1)


def run_device(device: str, args: argparse.Namespace, checkpoint: Path, sentences: list[str], lines: list[str],
               errors: dict[str, str]) -> dict[str, Any]:
    """Every requested section on one device; a failing section is reported, not fatal."""
    import transformer

    from .app_cost import bench_app_cost
    from .batch import bench_batch
    from .latency import bench_latency
    from .train_speed import bench_training

    out: dict[str, Any] = {}
    translator = transformer.load(checkpoint, device=device)

    def section(name: str, fn) -> None:
        if name not in args.sections:
            return
        t0 = time.perf_counter()
        try:
            out.update(fn())
        except Exception as err:  # report and go on with the other sections
            errors[f"{device}:{name}"] = f"{type(err).__name__}: {err}"
            traceback.print_exc(file=sys.stderr)
        out[f"{name}_section_s"] = time.perf_counter() - t0

    cfg, sizes = train_sizes(args, translator.config)
    section("train", lambda: bench_training(cfg, device=device, **sizes))
    sentence = sentence_of_words(20, lines)
    section("latency", lambda: bench_latency(translator, sentence, repeat=args.repeat, warmup=1 if args.quick else 2))
    section("batch", lambda: bench_batch(translator, sentences, batch_size=args.batch_size,
                                         repeat=1 if args.quick else 2, device=device, threads=args.threads,
                                         identity_sentences=min(len(sentences), 200)))
    if device == "cpu":
        section("app", lambda: bench_app_cost(checkpoint, device=device, n_tokens=40 if args.quick else 200,
                                              threads=args.threads, sentences=sentences[:100]))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    sentences, lines, source = workload(args)
    result: dict[str, Any] = {"machine": machine_info(), "quick": args.quick, "workload": source}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        checkpoint = Path(args.checkpoint)
        if args.random_model or not (checkpoint / "config.json").is_file():
            if not (args.quick or args.random_model):
                raise SystemExit(f"checkpoint not found: {checkpoint} (train it, pass --checkpoint, or use --quick)")
            checkpoint = random_checkpoint(Path(tmp), lines[:500] + synthetic_sentences(300))
            result["checkpoint"] = "random tiny model (no checkpoint)"
        else:
            result["checkpoint"] = str(checkpoint)
        result.update(run_device("cpu", args, checkpoint, sentences, lines, errors))
        if "marian" in args.sections:  # an OPUS-MT-sized model: ours against transformers and CTranslate2
            try:
                from . import marian

                result.update(marian.run(sentences, args.quick, args.threads or torch.get_num_threads(),
                                         corpus=lines))
            except Exception as err:  # report and go on
                errors["marian"] = f"{type(err).__name__}: {err}"
        if "m2m100" in args.sections:  # an M2M100-418M-sized model: ours against transformers
            try:
                from . import m2m100

                result.update(m2m100.run(sentences[:8] if not args.quick else sentences[:4], args.quick,
                                         args.threads or torch.get_num_threads(), corpus=lines))
            except Exception as err:  # report and go on
                errors["m2m100"] = f"{type(err).__name__}: {err}"
        if torch.cuda.is_available() and not args.no_cuda:
            result["cuda"] = run_device("cuda", args, checkpoint, sentences, lines, errors)
    result["gemm"] = gemm_report()
    result["errors"] = errors
    return result


def gemm_report() -> dict[str, Any]:
    """Each product class this process measured at load (``transformer.network.routes``): both routes' times per
    row bucket and the one kept (float32: MKL or oneDNN; bfloat16 without its instructions: float32 or native);
    then each attention class's (the fused kernel or the written-out arithmetic, per query bucket)."""
    from transformer.network.linear import gemm_setting
    from transformer.network.routes import measured_attention, measured_routes

    return {"setting": gemm_setting(), "routes": [m.line() for m in [*measured_routes(), *measured_attention()]]}


# ----------------------------------------------------------------------------------------------
# The table


def _f(value: Any, fmt: str = "{:.1f}") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and not math.isfinite(value):
        return "n/a"
    return fmt.format(value)


# the goals the table prints beside the ratios: issue #69's (CTranslate2 at least matched at the shipped model's size
# and at OPUS-MT's; one OPUS-MT-sized sentence at least twice transformers' speed) and the OPUS-MT-sized batch against
# transformers as in docs/benchmarks.md's first table of it
RATIO_GOALS = {"ctranslate2": ">= 1.0x", "marian_hf": ">= 1.2x", "marian_latency": ">= 2.0x"}
FAMILY_SECTIONS = (("marian", "Marian (OPUS-MT)"), ("m2m100", "M2M100"))  # result key prefix, the family's name


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(what, ours, peer, ours/peer, goal) for every measured line of one device's results."""
    out = []
    if "train_tok_s" in r:
        out.append(("training, target tokens/s (peer: nn.Transformer)", _f(r["train_tok_s"], "{:.0f}"),
                    _f(r["train_tok_s_nn_transformer"], "{:.0f}"), _f(r["train_speed_ratio"], "{:.2f}x"), ">= 1.0x"))
    if "greedy_ms_p50" in r:
        n = r.get("latency_source_tokens")
        out.append((f"one 20-word sentence ({n} tokens) with attentions, greedy: ms p50 / p95",
                    f"{_f(r['greedy_ms_p50'])} / {_f(r['greedy_ms_p95'])}", "", "", "< 50 ms"))
        out.append(("same sentence, beam 4: ms p50 / p95",
                    f"{_f(r['beam4_ms_p50'])} / {_f(r['beam4_ms_p95'])}", "", "", ""))
        out.append(("capturing attentions, time with / without: beam 4; greedy",
                    f"{_f(r['capture_overhead'], '{:.2f}x')}; {_f(r.get('capture_overhead_greedy'), '{:.2f}x')}",
                    "", "", ""))
        out.append(("key/value cache, speed-up over recomputing: beam 4; greedy",
                    f"{_f(r['kv_cache_speedup'], '{:.2f}x')}; {_f(r.get('kv_cache_speedup_greedy'), '{:.2f}x')}",
                    "", "", ""))
    if "batch_sent_s" in r:
        out.append((f"batch, {r['batch_sentences']} sentences, beam 4: sentences/s (peer: CTranslate2)",
                    _f(r["batch_sent_s"]), _f(r.get("batch_sent_s_ctranslate2")),
                    _f(r.get("ctranslate2_ratio"), "{:.2f}x"), RATIO_GOALS["ctranslate2"]))
        if "batch_streams_sent_s" in r:
            out.append((f"same, {r['batch_streams']} batches side by side, one thread each (CTranslate2: "
                        f"inter_threads {r['batch_streams']})", _f(r["batch_streams_sent_s"]),
                        _f(r.get("batch_streams_sent_s_ctranslate2")),
                        _f(r.get("ctranslate2_streams_ratio"), "{:.2f}x"), RATIO_GOALS["ctranslate2"]))
        if r.get("ctranslate2_identical") is not None:
            out.append(("outputs identical to CTranslate2's: beam 4; greedy",
                        f"{r['ctranslate2_identical']}/{r['batch_sentences']}; "
                        f"{r['ctranslate2_greedy_identical']}/{r['ctranslate2_greedy_compared']}",
                        "", "", "greedy: all"))
    for prefix, name in FAMILY_SECTIONS:  # the random-weight models at real sizes (sections marian, m2m100)
        if f"{prefix}_batch_sent_s" not in r:
            continue
        out.append((f"{name} {r.get(f'{prefix}_model', '')}, random weights, {r.get(f'{prefix}_sentences')} "
                    "sentences, beam 4: sentences/s (peer: transformers)", _f(r[f"{prefix}_batch_sent_s"]),
                    _f(r.get(f"{prefix}_batch_sent_s_hf")), _f(r.get(f"{prefix}_hf_ratio"), "{:.2f}x"),
                    RATIO_GOALS.get(f"{prefix}_hf", "")))
        if f"{prefix}_batch_sent_s_ctranslate2" in r or f"{prefix}_ctranslate2_error" in r:
            out.append(("same sentences, each engine's best of its rounds in turns: sentences/s (peer: CTranslate2)",
                        _f(r.get(f"{prefix}_batch_sent_s_vs_ctranslate2")),
                        _f(r.get(f"{prefix}_batch_sent_s_ctranslate2")),
                        _f(r.get(f"{prefix}_ctranslate2_ratio"), "{:.2f}x"), RATIO_GOALS["ctranslate2"]))
        if f"{prefix}_greedy_ms_p50" in r:
            out.append((f"{name}, one 20-word sentence with attentions, greedy: ms p50 (peer: transformers; "
                        "ratio: their time / ours)", _f(r[f"{prefix}_greedy_ms_p50"]),
                        _f(r.get(f"{prefix}_greedy_ms_p50_hf")), _f(r.get(f"{prefix}_latency_hf_ratio"), "{:.2f}x"),
                        RATIO_GOALS.get(f"{prefix}_latency", "")))
    if "load_s" in r:
        out.append(("model load, s", _f(r["load_s"], "{:.3f}"), "", "", ""))
        out.append((f"peak RSS translating a {r.get('peak_rss_input_tokens')}-token input, MB",
                    _f(r["peak_rss_mb"], "{:.0f}"), "", "", ""))
    return out


HEADER = ("", "ours", "peer", "ours / peer", "goal")


def table(r: dict[str, Any], title: str) -> str:
    body = [HEADER, *rows(r)]
    widths = [max(len(row[i]) for row in body) for i in range(5)]
    lines = [title, "-" * len(title)]
    for i, row in enumerate(body):
        lines.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    """The README's table: the machine, the command, one table per device."""
    m = result["machine"]
    parts = [f"`python -m bench` on {m['cpu']} ({m['cores']} cores), torch {m['torch']} with {m['torch_threads']} "
             f"threads, CTranslate2 {m['ctranslate2'] or '(not installed)'} with as many; workload "
             f"`{Path(str(result['workload'])).name}`."]
    for title, r in (("CPU", result), ("CUDA", result.get("cuda"))):
        if not r:
            continue
        parts.append(f"**{title}**" + (f" ({m.get('cuda_device')})" if title == "CUDA" else ""))
        lines = ["| " + " | ".join(h or "measure" for h in HEADER) + " |", "|---|---:|---:|---:|---|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows(r)]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def report(result: dict[str, Any]) -> str:
    m = result["machine"]
    head = (f"machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']} ({m['torch_threads']} threads), "
            f"ctranslate2 {m['ctranslate2'] or 'not installed'}, Python {m['python']}\n"
            f"checkpoint: {result['checkpoint']}\nworkload: {result['workload']}"
            + ("\n(--quick: smoke sizes, numbers mean nothing)" if result["quick"] else ""))
    parts = [head, table(result, "CPU")]
    if "cuda" in result:
        parts.append(table(result["cuda"], f"CUDA ({m.get('cuda_device')})"))
    gemm = result.get("gemm")
    if gemm:
        parts.append(f"routes of the products (ATTN_GEMM={gemm['setting']}) and attentions (each class timed once at "
                     "load, least of the repeats):\n"
                     + "\n".join(f"  {line}" for line in gemm["routes"] or ["(none measured)"]))
    if result.get("batch_gemm"):
        parts.append("routes of the batch section's timed process:\n"
                     + "\n".join(f"  {line}" for line in result["batch_gemm"]))
    if result["errors"]:
        parts.append("errors:\n" + "\n".join(f"  {k}: {v}" for k, v in result["errors"].items()))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    print(report(result), flush=True)
    if args.markdown:
        print("\n" + markdown(result), flush=True)
    if args.json:
        print(json.dumps(result, default=str))
    return 1 if result["errors"] else 0
