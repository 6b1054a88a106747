"""Batch translation throughput against CTranslate2 running the same weights.

Both sides get the same raw sentences and return detokenized text (sentencepiece in and out is
timed on both sides). Ours: ``Translator.translate_batch`` over length-sorted chunks of
``batch_size`` sentences. CTranslate2: one ``translate_batch`` call with ``max_batch_size`` (it
sorts by length itself). Beam 4; the length penalties differ in form (ours GNMT
``((5 + len) / 6) ** 0.6``, CTranslate2's ``len ** 0.6``), so the beam outputs are compared and
the number of identical ones reported; greedy outputs must be identical token for token.

Each side is timed in a process of its own (``python -m bench.batch --worker``, :func:`worker`), the two taking
turns: CTranslate2 brings its own OpenMP runtime, and while its thread pool is alive in a process, PyTorch's runs
slower there (measured in docs/benchmarks.md).
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from transformer import DEFAULT_ALPHA, DecodeSettings, Translator
from transformer.decoding import max_output_length
from transformer.evaluation.scores import translate_all

from .common import in_own_process, median, time_interleaved, worker_main


def ctranslate2_available(device: str = "cpu") -> bool:
    """The ``ctranslate2`` package is installed (and, for CUDA, built with it and sees a GPU)."""
    try:
        import ctranslate2
    except ImportError:
        return False
    return device == "cpu" or ctranslate2.get_cuda_device_count() > 0


class OursBatch:
    """Our translator over length-sorted chunks (``streams``: that many decoded side by side on a CPU, one thread
    each: ``evaluation.scores.in_streams``)."""

    def __init__(self, translator: Translator, batch_size: int, beam_size: int = 4,
                 alpha: float = DEFAULT_ALPHA, streams: int = 1) -> None:
        self.translator, self.batch_size, self.streams = translator, batch_size, streams
        self.settings = DecodeSettings(beam_size=beam_size, alpha=alpha)

    def ids(self, sentences: list[str]) -> list[list[int]]:
        """Output ids (no BOS/EOS), in the input order."""
        tr = self.translator
        sources = [tr.encode_source(s)[0] for s in sentences]
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        out: list[list[int]] = [[] for _ in sources]
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            ids, _ = tr.generate([sources[i] for i in chunk], self.settings)
            for i, o in zip(chunk, ids):
                out[i] = o
        return out

    def __call__(self, sentences: list[str]) -> list[str]:
        """What a user times: text in, text out (``python -m transformer.evaluate``'s translation)."""
        streams = {"streams": self.streams} if self.streams > 1 else {}  # (a checkout before 2026-11-30 had none)
        return translate_all(self.translator, sentences, self.settings, self.batch_size, progress=False, **streams)


def never_output(translator: Translator) -> list[list[str]]:
    """The pieces our decoding never outputs, PAD and BOS, as CTranslate2's ``suppress_sequences``."""
    tok, cfg = translator.tokenizer, translator.config
    return [[tok.pieces([cfg.pad_id])[0]], [tok.pieces([cfg.bos_id])[0]]]


def ct2_plan(translator: Translator, sentences: list[str]) -> dict[str, Any]:
    """What CTranslate2 needs of ours to translate ``sentences`` as we do (:func:`ct2_text`'s keywords): the longest
    source (``max_src`` pieces), one length budget for the call (ours for the longest source: ``budget``) and the
    pieces ours never outputs, PAD and BOS (``suppress``)."""
    max_src = translator.max_source_tokens
    longest = max(min(len(p), max_src) for p in translator.tokenizer.sp.encode(list(sentences)))
    return dict(max_src=max_src, budget=ours_budget(translator, longest), suppress=never_output(translator))


def ours_budget(translator: Translator, src_pieces: int) -> int:
    """Our output budget for a source of ``src_pieces`` pieces (+ EOS): ``int(1.5 * (n + 1) + 10)``, under
    ``max_len``."""
    return max_output_length(translator.model, src_pieces + 1, 1.5, 10)


def ct2_threads(device: str, threads: int, streams: int = 1) -> dict[str, int]:
    """CTranslate2's thread keywords for ``threads`` threads on ``device``: on a CPU ``streams`` batches side by side
    (``inter_threads``), each on ``threads // streams`` (``intra_threads``); elsewhere none."""
    return {"intra_threads": threads // streams, "inter_threads": streams} if device == "cpu" else {}


def ct2_pieces(sp: Any, sentences: list[str], max_src: int) -> list[list[str]]:
    """``sentences`` as CTranslate2's input: the sentencepiece model ``sp``'s pieces, at most ``max_src`` each."""
    return [p[:max_src] for p in sp.encode(list(sentences), out_type=str)]


def ct2_text(ct2: Any, sp: Any, sentences: list[str], max_src: int, budget: int, suppress: list[list[str]],
             batch_size: int, beam_size: int, length_penalty: float) -> list[str]:
    """CTranslate2's side of a call, text in, text out: ``sentences`` cut into pieces by the sentencepiece model
    ``sp`` (at most ``max_src`` each), translated by the ``ctranslate2.Translator`` ``ct2`` within ``budget`` pieces
    (``suppress``: pieces never output, as ours), the best hypotheses decoded back to text."""
    res = ct2.translate_batch(ct2_pieces(sp, sentences, max_src), beam_size=beam_size, max_batch_size=batch_size,
                              length_penalty=length_penalty, max_decoding_length=budget, min_decoding_length=0,
                              suppress_sequences=suppress)
    return sp.decode([r.hypotheses[0] for r in res])


class CT2Batch:
    """The same weights exported to CTranslate2 (float32, no quantization)."""

    def __init__(self, translator: Translator, model_dir: str | Path, device: str, threads: int, batch_size: int,
                 beam_size: int = 4, length_penalty: float = DEFAULT_ALPHA) -> None:
        import ctranslate2

        self.ct2 = ctranslate2.Translator(str(model_dir), device=device, compute_type="float32",
                                          **ct2_threads(device, threads))
        self.translator, self.batch_size = translator, batch_size
        self.beam_size, self.length_penalty = beam_size, length_penalty

    def pieces(self, sentences: list[str]) -> list[list[str]]:
        return ct2_pieces(self.translator.tokenizer.sp, sentences, self.translator.max_source_tokens)

    def translate_pieces(self, pieces: list[list[str]], beam_size: int, max_decoding_length: int,
                         **kwargs: Any) -> list[list[str]]:
        res = self.ct2.translate_batch(pieces, beam_size=beam_size, max_batch_size=self.batch_size,
                                       length_penalty=self.length_penalty, max_decoding_length=max_decoding_length,
                                       min_decoding_length=0, suppress_sequences=never_output(self.translator),
                                       **kwargs)
        return [r.hypotheses[0] for r in res]

    def __call__(self, sentences: list[str]) -> list[str]:
        """What a user times: text in, text out; one call, one length budget for the batch."""
        return ct2_text(self.ct2, self.translator.tokenizer.sp, sentences, **ct2_plan(self.translator, sentences),
                        batch_size=self.batch_size, beam_size=self.beam_size, length_penalty=self.length_penalty)

    def ids(self, sentences: list[str], beam_size: int) -> list[list[int]]:
        """Output ids with exactly our per-sentence length budget (sentences grouped by length)."""
        pieces = self.pieces(sentences)
        groups: dict[int, list[int]] = defaultdict(list)
        for i, p in enumerate(pieces):
            groups[len(p)].append(i)
        out: list[list[int]] = [[] for _ in pieces]
        sp = self.translator.tokenizer.sp
        for n, idx in groups.items():
            hyps = self.translate_pieces([pieces[i] for i in idx], beam_size, ours_budget(self.translator, n))
            for i, h in zip(idx, hyps):
                out[i] = [sp.piece_to_id(t) for t in h]
        return out


def export_for_bench(translator: Translator, out_dir: str | Path) -> Path:
    from transformer.exchange.ctranslate2_export import export_ctranslate2

    return export_ctranslate2(translator.path, Path(out_dir) / "ct2", force=True)


def worker(job: dict[str, Any]) -> dict[str, Any]:
    """One side of :func:`bench_batch` in its own process: ``job`` names the ``side`` (``"ours"`` or
    ``"ctranslate2"``), ``device``, ``threads``, ``batch_size``, ``sentences`` and ``repeat``; ours its
    ``checkpoint``; CTranslate2 its model (``ct2_dir``) and what :func:`ct2_text` takes (``sp_model``, a file,
    ``max_src``, ``budget``, ``beam_size``, ``length_penalty``, ``suppress``), so that no PyTorch work runs beside it
    (PyTorch's thread pool, once alive, slows CTranslate2 as CTranslate2's slows ours). Loads, warms on
    ``2 * batch_size`` sentences, then times ``repeat`` runs over all of them: ``{"seconds": [...], "cpu_seconds":
    [...]}`` (wall; the process's CPU time, every thread's)."""
    import torch

    from .common import sync

    device, size = job["device"], job["batch_size"]
    torch.set_num_threads(job["threads"])
    if job["side"] == "ours":
        import transformer

        fn = OursBatch(transformer.load(job["checkpoint"], device=device), size, streams=job.get("streams", 1))
        try:  # what this process chose at load (the bench prints it); a checkout before 2026-11-29 measured none
            from transformer.network.routes import measured_routes
        except ImportError:
            try:
                from transformer.network.linear import measured_routes  # where it was on 2026-11-29
            except ImportError:
                measured_routes = list
        routes = [m.line() for m in measured_routes()]
        try:  # and each attention class's (a checkout before 2026-11-30 measured none)
            from transformer.network.routes import measured_attention
            routes += [m.line() for m in measured_attention()]
        except ImportError:
            pass
    else:
        import ctranslate2
        import sentencepiece as spm

        ct2 = ctranslate2.Translator(job["ct2_dir"], device=device, compute_type="float32",
                                     **ct2_threads(device, job["threads"], job.get("streams", 1)))
        sp = spm.SentencePieceProcessor(model_file=job["sp_model"])

        def fn(sentences: list[str]) -> list[str]:
            return ct2_text(ct2, sp, sentences, job["max_src"], job["budget"], job["suppress"], size,
                            job["beam_size"], job["length_penalty"])
    sentences = job["sentences"]
    fn(sentences[: 2 * size])
    seconds, cpu_seconds = [], []
    for _ in range(job["repeat"]):
        sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        fn(sentences)
        sync(device)
        seconds.append(time.perf_counter() - t0)
        cpu_seconds.append(time.process_time() - c0)
    ours = {"gemm": routes, "package": str(Path(transformer.__file__).parent)} if job["side"] == "ours" else {}
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, **ours}  # package: the transformer/ timed


def bench_batch(translator: Translator, sentences: list[str], batch_size: int = 64, repeat: int = 2,
                device: str = "cpu", threads: int = 1, identity_sentences: int = 200) -> dict[str, Any]:
    """Sentences per second, ours and CTranslate2's, each in its own process (:func:`worker`), taking turns; plus
    output agreement (in this process, untimed). On a CPU with more than one thread, also each engine's batches
    side by side, one a thread (``batch_streams``: ours ``translate_all(streams=)``, CTranslate2's
    ``inter_threads``): ``batch_streams_sent_s``, ``batch_streams_sent_s_ctranslate2``,
    ``ctranslate2_streams_ratio``."""
    ours = OursBatch(translator, batch_size)
    result: dict[str, Any] = {"batch_sentences": len(sentences), "batch_size": batch_size, "batch_beam": 4}
    with tempfile.TemporaryDirectory(prefix="bench-ct2-") as tmp:
        ct2_dir = None
        if ctranslate2_available(device) and translator.path is not None:
            ct2_dir = export_for_bench(translator, tmp)
        times: dict[str, list[float]] = defaultdict(list)
        if translator.path is None:  # an unsaved model: ours only, timed here
            ours(sentences[: 2 * batch_size])
            times.update(time_interleaved({"ours": lambda: ours(sentences)}, repeat=repeat, warmup=0, device=device))
        else:
            job = dict(device=device, threads=threads, batch_size=batch_size, sentences=list(sentences), repeat=1)
            jobs = {"ours": dict(job, side="ours", checkpoint=str(translator.path))}
            if ct2_dir is not None:
                sp_model = Path(tmp) / "sp.model"  # the tokenizer, for a process without our model
                sp_model.write_bytes(translator.tokenizer.sp.serialized_model_proto())
                jobs["ctranslate2"] = dict(job, side="ctranslate2", ct2_dir=str(ct2_dir), sp_model=str(sp_model),
                                           beam_size=4, length_penalty=DEFAULT_ALPHA,
                                           **ct2_plan(translator, list(sentences)))
            if device == "cpu" and threads > 1:  # each engine's batches side by side, one thread each
                result["batch_streams"] = threads
                jobs.update({f"{side} streams": dict(side_job, streams=threads)
                             for side, side_job in list(jobs.items())})
            for _ in range(repeat):  # one run a process, the sides taking turns: a change of load hits both
                for side, side_job in jobs.items():
                    got = in_own_process("bench.batch", side_job)
                    times[side] += got["seconds"]
                    if "gemm" in got and side == "ours":
                        result["batch_gemm"] = got["gemm"]  # the timed process's own product routes
        result["batch_sent_s"] = len(sentences) / median(times["ours"])
        if ct2_dir is None:
            result.update(batch_sent_s_ctranslate2=None, ctranslate2_ratio=None, ctranslate2_identical=None,
                          ctranslate2_greedy_identical=None)
            return result
        result["batch_sent_s_ctranslate2"] = len(sentences) / median(times["ctranslate2"])
        result["ctranslate2_ratio"] = result["batch_sent_s"] / result["batch_sent_s_ctranslate2"]
        if "ctranslate2 streams" in times:
            result["batch_streams_sent_s"] = len(sentences) / median(times["ours streams"])
            result["batch_streams_sent_s_ctranslate2"] = len(sentences) / median(times["ctranslate2 streams"])
            result["ctranslate2_streams_ratio"] = (result["batch_streams_sent_s"]
                                                   / result["batch_streams_sent_s_ctranslate2"])
        ct2 = CT2Batch(translator, ct2_dir, device, threads, batch_size)
        # agreement: beam 4 on the whole workload (length penalties differ), greedy on a subset (must be equal)
        ours_ids = ours.ids(sentences)
        theirs_ids = ct2.ids(sentences, beam_size=4)
        result["ctranslate2_identical"] = sum(a == b for a, b in zip(ours_ids, theirs_ids))
        subset = sentences[:identity_sentences]
        greedy = OursBatch(translator, batch_size, beam_size=1).ids(subset)
        result["ctranslate2_greedy_identical"] = sum(a == b for a, b in zip(greedy, ct2.ids(subset, beam_size=1)))
        result["ctranslate2_greedy_compared"] = len(subset)
    return result


if __name__ == "__main__":
    worker_main(worker)
