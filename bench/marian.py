"""The OPUS-MT-sized section of ``python -m bench`` (also ``python -m bench.marian``).

An OPUS-MT-sized Marian model (512 / 6+6 / 8 heads / 2048, 58,101 pieces; random weights, no download) is
saved with transformers and run three ways on the same weights, threads and sentences, beam 4: ours (opened by
``transformer.load`` from that directory), transformers' ``generate``, and CTranslate2 (converted with its own
``TransformersConverter``, timed in a process of its own: :func:`worker`; it and ours take turns
:data:`CT2_ROUNDS` times, the best run of each compared). Random weights ramble, so every engine stops at the same
output length. Also one 20-word sentence, greedy, with every attention returned: ours against
transformers with ``output_attentions=True``. ``--quick`` shrinks the model and the workload to seconds.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from .common import batch_throughput_vs_hf, family_bench_main, greedy_latency_vs_hf, in_own_process, worker_main

CT2_ROUNDS = 2  # ours and CTranslate2 taking turns this many times (a busy machine's load changes from run to run)


def marian_dir(directory: Path, sentences: list[str], quick: bool) -> Path:
    """A random Marian model with a sentencepiece tokenizer trained on ``sentences``, saved with transformers."""
    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    text = directory / "corpus.txt"
    text.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(directory / "sp"), vocab_size=2000 if quick
                                   else 8000, model_type="unigram", bos_id=-1, eos_id=-1, pad_id=-1, unk_id=0,
                                   minloglevel=2, hard_vocab_limit=False)
    sp = spm.SentencePieceProcessor(model_file=str(directory / "sp.model"))
    size = 3001 if quick else 58101
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    while len(vocab) < size - 1:  # OPUS-MT's vocabulary size: pieces the workload never uses
        vocab[f"▁extra{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    d, layers, heads, ff = (64, 2, 4, 128) if quick else (512, 6, 8, 2048)
    cfg = MarianConfig(vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=d, encoder_layers=layers,
                       decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
                       encoder_ffn_dim=ff, decoder_ffn_dim=ff, max_position_embeddings=512, pad_token_id=vocab["<pad>"],
                       eos_token_id=0, decoder_start_token_id=vocab["<pad>"], attn_implementation="eager")
    torch.manual_seed(0)
    model = MarianMTModel(cfg).eval()
    out = directory / "marian"
    model.save_pretrained(out)
    MarianTokenizer(source_spm=str(directory / "sp.model"), target_spm=str(directory / "sp.model"),
                    vocab=str(directory / "vocab.json"), source_lang="en", target_lang="de").save_pretrained(out)
    return out


def run(sentences: list[str], quick: bool = False, threads: int = 2, max_new: int = 20,
        corpus: list[str] | None = None) -> dict[str, Any]:
    """The section's keys (see the module docstring); the tokenizer is trained on ``corpus`` (default: the
    sentences)."""
    import transformer

    torch.set_num_threads(threads)
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-marian-") as tmp:
        path = marian_dir(Path(tmp), corpus or sentences, quick)
        from transformers import MarianMTModel, MarianTokenizer

        hf = MarianMTModel.from_pretrained(path, attn_implementation="eager").eval()
        tok = MarianTokenizer.from_pretrained(path)
        ours = transformer.load(path, device="cpu")
        pad = hf.config.pad_token_id
        batch = 64 if not quick else 8

        def hf_batch(group: list[str]) -> None:
            with torch.inference_mode():
                hf.generate(**tok(group, return_tensors="pt", padding=True), num_beams=4, max_new_tokens=max_new,
                            bad_words_ids=[[pad]], forced_eos_token_id=None)

        def ours_batch(group: list[str]) -> None:
            ours.translate_batch(group, beam_size=4, max_len_a=0.0, max_len_b=max_new)

        result.update(batch_throughput_vs_hf("marian", sentences, batch, ours_batch, hf_batch))
        result["marian_hf_ratio"] = round(result["marian_batch_sent_s"] / result["marian_batch_sent_s_hf"], 2)
        try:
            from ctranslate2.converters import TransformersConverter

            ct2_dir = Path(tmp) / "ct2"
            TransformersConverter(str(path)).convert(str(ct2_dir), force=True)
            job = dict(side="ctranslate2", ct2_dir=str(ct2_dir), model=str(path), sentences=sentences,
                       threads=threads, batch=batch, max_new=max_new)
            order = sorted(sentences, key=len)
            ours_s, ct2_s = [], []
            for _ in range(CT2_ROUNDS):  # taking turns, CTranslate2 in a process of its own; the best of each
                ct2_s.append(in_own_process("bench.marian", job)["seconds"])
                start = time.perf_counter()
                for i in range(0, len(order), batch):
                    ours_batch(order[i:i + batch])
                ours_s.append(time.perf_counter() - start)
            result["marian_batch_sent_s_ctranslate2"] = round(len(sentences) / min(ct2_s), 2)
            result["marian_batch_sent_s_vs_ctranslate2"] = round(len(sentences) / min(ours_s), 2)
            result["marian_ctranslate2_ratio"] = round(min(ct2_s) / min(ours_s), 2)
        except Exception as err:  # not installed, or the converter refused: say so, keep the rest
            result["marian_ctranslate2_error"] = f"{type(err).__name__}: {err}"
        sentence = next((s for s in sentences if len(s.split()) == 20), sentences[0])
        repeat = 3 if quick else 10
        enc = tok(sentence, return_tensors="pt")

        def hf_greedy() -> None:
            with torch.inference_mode():
                out = hf.generate(**enc, num_beams=1, max_new_tokens=max_new, bad_words_ids=[[pad]],
                                  forced_eos_token_id=None)
                hf(**enc, decoder_input_ids=out, output_attentions=True)  # every attention, as ours returns

        result.update(greedy_latency_vs_hf(
            "marian", lambda: ours.translate(sentence, beam_size=1, max_len_a=0.0, max_len_b=max_new,
                                             return_attention=True),
            hf_greedy, repeat, hf.config))
        result["marian_sentences"] = len(sentences)
    return result


def worker(job: dict[str, Any]) -> dict[str, Any]:
    """CTranslate2's side of the batch, in a process of its own (``bench.common.in_own_process``: its OpenMP pool
    would slow PyTorch's in one process): ``job``'s ``sentences`` tokenized by the model's tokenizer and translated
    (beam 4, ``max_new`` pieces at most) in batches of ``batch``, timed once, as the first run of ours is:
    ``{"seconds": s}``."""
    import ctranslate2
    from transformers import MarianTokenizer

    tok = MarianTokenizer.from_pretrained(job["model"])
    ct = ctranslate2.Translator(job["ct2_dir"], device="cpu", inter_threads=1, intra_threads=job["threads"])
    start = time.perf_counter()
    pieces = [tok.convert_ids_to_tokens(tok(s)["input_ids"]) for s in job["sentences"]]
    ct.translate_batch(pieces, beam_size=4, max_batch_size=job["batch"], max_decoding_length=job["max_new"],
                       length_penalty=0.6)
    return {"seconds": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> int:
    if worker_main(worker, argv):
        return 0
    return family_bench_main("python -m bench.marian", __doc__, run, "marian", 1000, 16, argv)


if __name__ == "__main__":
    raise SystemExit(main())
