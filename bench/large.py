"""NLLB-200-1.3B and 3.3B sizes on a CPU: ``python -m bench.large --size 1.3B|3.3B [--dir DIR] [--threads N]``.

A model of NLLB-200's sizes (1.3B: 1024 wide, 24 + 24 layers, 16 heads, feed-forward 8192; 3.3B: 2048 wide; both a
256,206-id vocabulary, tied) with random weights is saved once with transformers (``M2M100ForConditionalGeneration``,
``NllbTokenizer`` over a small sentencepiece model) into ``DIR/nllb-<size>`` (no download; 5.5 / 13.4 GB on disk).
Then each side runs in its own process, one after the other, on the same directory and the same sentence, each
after the file was read through once (so each finds it in the page cache):

- ``ours``: ``transformer.load(dir)``, float32;  ``ours bf16``: ``transformer.load(dir, dtype="bfloat16")``;
- ``transformers``: ``M2M100ForConditionalGeneration.from_pretrained(dir)`` + ``generate``.

Each reports seconds to load, to load and translate one sentence greedily (20 pieces at most, the target language
forced first), and one beam-4 translation once warm, and its peak memory (``VmHWM``, ``bench.common.peak_rss_mb``:
resident pages, the memory-mapped file's included, of that process alone: the model is built in a process of its
own and ``ru_maxrss`` would carry a parent's peak over) after the first translation and at the end. The output ids
of ours (float32) and transformers' are compared. The table is printed as Markdown; ``--json`` prints the numbers.

Run it alone on the machine (it needs the weights' size in memory, three times in a row): timings on a shared
machine are noisy, compare the columns of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SIZES = {  # NLLB-200's published configs (d_model, layers each side, heads, feed-forward)
    "1.3B": (1024, 24, 16, 8192),
    "3.3B": (2048, 24, 16, 8192),
    "tiny": (64, 2, 4, 128),  # the bench's own check, seconds
}
VOCAB = 256206
SENTENCE = "A man in a blue shirt is standing on a ladder cleaning the windows of a tall building."
MAX_NEW = 20


def build(directory: Path, size: str) -> Path:
    """The random NLLB-sized model of ``size`` and its tokenizer, saved with transformers (once)."""
    out = directory / f"nllb-{size}"
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    import sentencepiece as spm
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    from transformer.checkpoint.families.fairseq_codes import NLLB_CODES

    from .common import synthetic_sentences

    work = directory / f"nllb-{size}-spm"
    work.mkdir(parents=True, exist_ok=True)
    (work / "corpus.txt").write_text("\n".join([SENTENCE, *synthetic_sentences(2000)]) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(work / "corpus.txt"), model_prefix=str(work / "sentencepiece.bpe"),
                                   vocab_size=1000, model_type="bpe", minloglevel=2, hard_vocab_limit=False)
    (work / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "NllbTokenizer"}))
    tok = NllbTokenizer.from_pretrained(work, src_lang="eng_Latn", tgt_lang="deu_Latn",
                                        extra_special_tokens=list(NLLB_CODES))
    d, layers, heads, ff = SIZES[size]
    cfg = M2M100Config(vocab_size=VOCAB, d_model=d, encoder_layers=layers, decoder_layers=layers,
                       encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ff,
                       decoder_ffn_dim=ff, max_position_embeddings=1024, scale_embedding=True, pad_token_id=1,
                       bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, dropout=0.1)
    torch.manual_seed(0)
    with torch.device("meta"):  # skip transformers' slow init: fill the weights once, below
        model = M2M100ForConditionalGeneration(cfg)
    model = model.to_empty(device="cpu").eval()
    model.tie_weights()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
            else:
                p.fill_(1.0) if "norm" in name and name.endswith("weight") else p.normal_(0.0, 0.02)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "sentencepiece.bpe.model").write_bytes((work / "sentencepiece.bpe.model").read_bytes())
    return out


def worker(side: str, path: Path, threads: int) -> dict[str, Any]:
    """One side's numbers, in this process (``side``: ours, ours-bf16, transformers)."""
    import torch

    from .common import peak_rss_mb

    torch.set_num_threads(threads)
    start = time.perf_counter()
    if side == "transformers":
        from transformers import M2M100ForConditionalGeneration

        from transformer.checkpoint.families.fairseq_tokenizer import FairseqTokenizer

        model = M2M100ForConditionalGeneration.from_pretrained(path).eval()
        loaded = time.perf_counter()
        tok = FairseqTokenizer.from_dir(path)
        before, after = tok.source_frame("eng_Latn")
        src = torch.tensor([[*before, *tok.encode(SENTENCE), *after]])
        forced = tok.lang_id("deu_Latn", None)

        def translate(beam: int) -> list[int]:
            with torch.inference_mode():
                out = model.generate(input_ids=src, num_beams=beam, max_new_tokens=MAX_NEW, do_sample=False,
                                     forced_bos_token_id=forced, early_stopping=False)
            return [t for t in out[0].tolist()[1:] if t not in (1, 2)]
    else:
        import transformer

        tr = transformer.load(path, device="cpu", dtype="bfloat16" if side == "ours-bf16" else "float32")
        loaded = time.perf_counter()
        src_ids, _ = tr.encode_source(SENTENCE, "eng_Latn")

        def translate(beam: int) -> list[int]:
            return tr.generate([src_ids], beam_size=beam, max_len_a=0.0, max_len_b=MAX_NEW, tgt_lang="deu_Latn",
                               alpha=1.0)[0][0]
    ids = translate(1)
    first = time.perf_counter()
    peak_first = peak_rss_mb()
    translate(4)  # warm
    t0 = time.perf_counter()
    beam_ids = translate(4)
    beam = time.perf_counter() - t0
    return {"side": side, "load_s": loaded - start, "first_s": first - start, "beam4_s": beam,
            "peak_first_mb": peak_first, "peak_mb": peak_rss_mb(), "greedy_ids": ids, "beam_ids": beam_ids}


def warm_page_cache(path: Path, chunk: int = 64 << 20) -> None:
    """Read ``path`` through once, so that each side starts with the file in the page cache (as a second load
    would find it) rather than the first side paying the disk for the others."""
    with open(path, "rb", buffering=0) as f:
        while f.read(chunk):
            pass


def run(size: str, directory: Path, threads: int, sides: tuple[str, ...]) -> dict[str, Any]:
    """Build the model if needed, then each side in its own process, one after the other. The build runs in a
    process of its own too: this one stays small (no torch, no model), so no side starts from its memory."""
    subprocess.run([sys.executable, "-m", "bench.large", "--build-only", "--size", size, "--dir", str(directory)],
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    path = directory / f"nllb-{size}"
    weights_mb = (path / "model.safetensors").stat().st_size / 2**20
    rows = []
    for side in sides:
        warm_page_cache(path / "model.safetensors")
        proc = subprocess.run([sys.executable, "-m", "bench.large", "--worker", side, "--model", str(path),
                               "--threads", str(threads)], capture_output=True, text=True, check=False,
                              env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            rows.append({"side": side, "error": (proc.stderr.strip().splitlines() or ["failed"])[-1]})
            continue
        rows.append(json.loads(lines[-1]))
    return {"size": size, "weights_mb": weights_mb, "threads": threads, "rows": rows}


def table(result: dict[str, Any]) -> str:
    """The Markdown table of one run."""
    from .common import cpu_name

    w = result["weights_mb"]
    out = [f"NLLB-200-{result['size']} sizes, random weights ({w / 1024:.1f} GiB float32 safetensors), "
           f"{result['threads']} threads, {cpu_name()}", "",
           "| | peak after load + first greedy | peak at the end | load | load + first greedy (20 pieces) | "
           "beam 4, warm |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "error" in r:
            out.append(f"| {r['side']} | failed: {r['error']} | | | | |")
            continue
        out.append(f"| {r['side']} | {r['peak_first_mb'] / 1024:.1f} GiB ({r['peak_first_mb'] / w:.2f}x) | "
                   f"{r['peak_mb'] / 1024:.1f} GiB ({r['peak_mb'] / w:.2f}x) | {r['load_s']:.1f} s | "
                   f"{r['first_s']:.1f} s | {r['beam4_s']:.1f} s |")
    by = {r["side"]: r for r in result["rows"] if "error" not in r}
    if "ours" in by and "transformers" in by:
        same = by["ours"]["greedy_ids"] == by["transformers"]["greedy_ids"]
        out += ["", f"Greedy output ids, ours (float32) and transformers: {'identical' if same else 'DIFFERENT'}; "
                    f"beam 4: {'identical' if by['ours']['beam_ids'] == by['transformers']['beam_ids'] else 'differ'}."]
    if "ours" in by and "ours-bf16" in by:
        same = by["ours"]["greedy_ids"] == by["ours-bf16"]["greedy_ids"]
        out.append(f"Greedy output ids, ours bfloat16 against float32: {'identical' if same else 'differ'}.")
    return "\n".join(out)


def quality(checkpoint: str, data_dir: str, threads: int, batch: int = 32) -> dict[str, Any]:
    """bfloat16 against float32 on one checkpoint: test_2016_flickr BLEU of each (greedy and beam 4, the
    checkpoint's own length penalty), the share of sentences whose greedy output is identical, and each dtype's
    seconds for the whole set (greedy, batches of ``batch``; the two dtypes alternate batch by batch so that a
    shared machine's load falls on both alike)."""
    import sacrebleu
    import torch

    import transformer

    from .common import read_sentences

    torch.set_num_threads(threads)
    sources, references = read_sentences(data_dir, lang="en"), read_sentences(data_dir, lang="de")
    if not sources or not references:
        raise SystemExit(f"no test_2016_flickr.en / .de under {data_dir}")
    models = {name: transformer.load(checkpoint, device="cpu", dtype=name) for name in ("float32", "bfloat16")}
    out: dict[str, Any] = {"checkpoint": checkpoint, "sentences": len(sources), "threads": threads}
    for beam in (1, 4):
        texts: dict[str, list[str]] = {name: [] for name in models}
        ids: dict[str, list[list[int]]] = {name: [] for name in models}
        seconds = dict.fromkeys(models, 0.0)
        for i in range(0, len(sources), batch):
            for name, tr in models.items():
                t0 = time.perf_counter()
                results = tr.translate_batch(sources[i:i + batch], beam_size=beam)
                seconds[name] += time.perf_counter() - t0
                texts[name] += [r.text for r in results]
                ids[name] += [r.target_ids for r in results]
        for name in models:
            out[f"bleu_{name}_beam{beam}"] = round(sacrebleu.corpus_bleu(texts[name], [references]).score, 2)
            out[f"seconds_{name}_beam{beam}"] = round(seconds[name], 2)
        out[f"identical_beam{beam}"] = round(sum(a == b for a, b in zip(ids["float32"], ids["bfloat16"]))
                                             / len(sources), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.large", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=list(SIZES), default="1.3B")
    parser.add_argument("--dir", default="bigmodels",
                        help="where the random models are built once (default ./bigmodels)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--sides", default="ours,transformers,ours-bf16", help="comma-separated, in this order")
    parser.add_argument("--build-only", action="store_true", help="build the model and stop")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON too")
    parser.add_argument("--quality", metavar="CHECKPOINT",
                        help="instead: bfloat16 against float32 on CHECKPOINT (BLEU on test_2016_flickr, identical "
                             "outputs, seconds)")
    parser.add_argument("--data-dir", default="../shared/data/multi30k", help="for --quality")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, Path(args.model), args.threads)))
        return 0
    if args.quality:
        print(json.dumps(quality(args.quality, args.data_dir, args.threads)))
        return 0
    if args.build_only:
        print(build(Path(args.dir), args.size))
        return 0
    result = run(args.size, Path(args.dir), args.threads, tuple(s for s in args.sides.split(",") if s))
    print(table(result))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
