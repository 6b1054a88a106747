"""Score translations with sacreBLEU: BLEU (cased, detokenized, with its signature), chrF, and BLEU on lowercased,
Moses-tokenized text (the measure multimodal-MT papers report with multi-bleu.perl); and a split translated in
length-sorted batches (``python -m transformer.evaluate`` runs both on a checkpoint)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import TypeVar

import sacrebleu
import torch
from tqdm import tqdm

from ..decoding.settings import DEFAULTS, DecodeSettings
from ..translator import Translator


def moses_tokenize(lines: Sequence[str], lang: str) -> list[str]:
    """Lowercased Moses tokenization (sacremoses), as used before multi-bleu.perl."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    return [tok.tokenize(line.lower(), return_str=True, escape=False) for line in lines]


def score(hyps: Sequence[str], refs: Sequence[str], tgt_lang: str) -> dict[str, object]:
    """BLEU (cased, detokenized), chrF and lowercased tokenized BLEU of ``hyps`` against ``refs``, and the length
    ratio (hypothesis over reference tokens, as BLEU's brevity penalty sees them): below 1 means too short."""
    bleu = sacrebleu.BLEU()
    bleu_score = bleu.corpus_score(list(hyps), [list(refs)])
    chrf = sacrebleu.CHRF().corpus_score(list(hyps), [list(refs)])
    lc_tok = sacrebleu.BLEU(tokenize="none", force=True).corpus_score(moses_tokenize(hyps, tgt_lang),
                                                                        [moses_tokenize(refs, tgt_lang)])
    return {"bleu": round(bleu_score.score, 2), "chrf": round(chrf.score, 2), "bleu_lc_tok": round(lc_tok.score, 2),
            "length_ratio": round(bleu_score.ratio, 4),
            "signature": str(bleu.get_signature())}


def translate_all(translator: Translator, sources: Sequence[str], settings: DecodeSettings = DEFAULTS,
                  batch_size: int = 64, progress: bool = True, head_mask: dict | None = None,
                  streams: int = 1) -> list[str]:
    """Translate in length-sorted batches (less padding) as ``settings`` say (what they leave None: the checkpoint's
    own, as ``Translator.translate_batch`` fills it), returning outputs in input order (``head_mask``: heads switched
    off). ``streams`` > 1 on a CPU: that many batches decoded side by side, one thread each (:func:`in_streams`);
    the same outputs."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    chunks = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    outputs: list[str] = [""] * len(sources)

    def batch(chunk: list[int]) -> Callable[[], list[str]]:
        return lambda: [r.text for r in translator.translate_batch([sources[i] for i in chunk], settings,
                                                                   head_mask=head_mask)]

    with tqdm(total=len(sources), unit="sent", disable=not progress, file=sys.stderr) as bar:
        for j, texts in in_streams([batch(c) for c in chunks], streams if translator.device.type == "cpu" else 1):
            for i, text in zip(chunks[j], texts):
                outputs[i] = text
            bar.update(len(chunks[j]))
    return outputs


T = TypeVar("T")


def in_streams(jobs: Sequence[Callable[[], T]], streams: int) -> Iterator[tuple[int, T]]:
    """``(index, result)`` of each of ``jobs``, as they finish. With ``streams`` > 1 (and more than one job), that
    many run side by side, each thread set to one intra-op thread, so a small model's many small operations do not
    wait on each other's parallel regions (faster for the shipped model's size on two cores, not for OPUS-MT's:
    docs/benchmarks.md, "Decoding streams"). ``torch.set_num_threads`` also sets the process's default for threads
    started later; it is put back, by a thread of its own, to the count the calling thread had (the calling thread's
    own setting is not touched). It also turns MKL's dynamic threading off for the process, as any
    ``torch.set_num_threads`` does (``--threads``, the bench, the app), after which PyTorch's fused attention with
    more than one query a row runs slower on more than one thread (docs/benchmarks.md): an opt-in, for a process
    that decodes a whole set (``python -m transformer.evaluate --streams``)."""
    if streams <= 1 or len(jobs) <= 1:
        for j, job in enumerate(jobs):
            yield j, job()
        return
    threads = torch.get_num_threads()
    pool = ThreadPoolExecutor(min(streams, len(jobs)), thread_name_prefix="decoding-stream",
                              initializer=torch.set_num_threads, initargs=(1,))
    try:
        running = {pool.submit(job): j for j, job in enumerate(jobs)}
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=running.get):
                yield running.pop(future), future.result()
    finally:  # a job that failed, or a caller that stopped reading: the jobs not started are dropped
        pool.shutdown(wait=True, cancel_futures=True)
        restore = threading.Thread(target=torch.set_num_threads, args=(threads,), name="decoding-streams-restore")
        restore.start()
        restore.join()
