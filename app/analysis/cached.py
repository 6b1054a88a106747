"""Caches around ``app.analysis.inference``, and ``Model``: the handle the page and its views hold.

The model lives in ``st.cache_resource`` (one copy per checkpoint and device, shared by every
session); analyses, exports, translations of longer texts, training snapshots and their attentions live in one
byte-budgeted LRU (``app.limits.budget``, ``$ATTN_CACHE_MB``, the loaded models counted too) keyed by text, settings,
checkpoint and ablated heads, so changing layer, head or view never runs the model again; small results live in
``st.cache_data`` (every cache and its bound: docs/limits.md). Every cache is keyed by the (checkpoint, device)
strings; a ``Model`` names both, and its methods are the one way to the caches (``Model(checkpoint, device).tr``,
``.analysis(text, settings)``, ``.beyond("lens", analysis)``, ...). Every job is planned against what is left of
the request's work (``app.limits.work``: one ceiling for all the jobs of one request) and counts its estimate; light
work (a request's few short sentences) runs at once, heavy work waits for one of the server's heavy-job slots, once per
request. Exports are built when a visitor asks for the file, never while the page is drawn.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

import transformer
from transformer import Transformer, Translator
from transformer.network.weights import packed_bytes

from ..limits import ledger, work
from ..limits.budget import ByteLRU, analysis_working_bytes
from ..models import catalog
from . import inference, patching, probes
from .inference import Analysis, DecodeSettings, HeadKey, Sentence

PageBuilder = Callable[[Translator, Analysis, str], str]  # (translator, analysis, checkpoint) -> HTML

# id of each loaded model -> its weights' bytes (with the prepacked copies) plus the working memory of
# one analysis on it, counted against the budget (results kept = budget - these)
MODEL_BYTES: dict[int, int] = {}


def _released(tr: Translator) -> None:
    MODEL_BYTES.pop(id(tr), None)


@st.cache_resource(show_spinner="Loading the model…", max_entries=4, on_release=_released)
def get_translator(checkpoint: str, device: str) -> Translator:
    """The loaded model (raises ``CheckpointError``; failures are not cached)."""
    tr = catalog.load_translator(checkpoint, device)
    weights = sum(p.numel() * p.element_size() for p in tr.model.parameters()) + packed_bytes(tr.model)
    MODEL_BYTES[id(tr)] = weights + analysis_working_bytes(tr.config)
    return tr


RESULTS = ByteLRU(reserved=lambda: sum(MODEL_BYTES.values()))


RETRY_SECONDS = 60.0  # a model that failed to load is tried again at most once a minute per server process


class LoadFailed(transformer.CheckpointError):
    """A model failed to load on this server within the last ``RETRY_SECONDS`` (its message is a visitor's)."""


class LoadFailures:
    """The models that failed to load in this server process, for every session: each ``Model`` -> (its
    checkpoint's files as they were, the visitor's message, when), the last ``most``. Every visitor is told at once
    instead of repeating the failure, until ``retry_seconds`` have passed (then the next visitor's load tries it
    again) or the checkpoint's files change. A failed load can cost seconds and hundreds of MB, so no visitor's
    click or link starts one sooner."""

    def __init__(self, most: int = 64, retry_seconds: float = RETRY_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.most, self.retry_seconds, self.clock = most, retry_seconds, clock
        self._items: OrderedDict[Model, tuple[object, str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, model: Model) -> str | None:
        """The remembered message, or None (never failed, failed over ``retry_seconds`` ago, or its files changed
        since)."""
        stamp = catalog.files_stamp(model.checkpoint)
        with self._lock:
            found = self._items.get(model)
            if found is None or found[0] != stamp or self.clock() - found[2] >= self.retry_seconds:
                return None
            self._items.move_to_end(model)
            return found[1]

    def retry_in(self, model: Model) -> float:
        """Seconds until a load of ``model`` may be tried again (0: now)."""
        with self._lock:
            found = self._items.get(model)
        return 0.0 if found is None else max(0.0, self.retry_seconds - (self.clock() - found[2]))

    def remember(self, model: Model, message: str) -> None:
        stamp = catalog.files_stamp(model.checkpoint)
        with self._lock:
            self._items[model] = (stamp, message, self.clock())
            self._items.move_to_end(model)
            while len(self._items) > self.most:
                self._items.popitem(last=False)

    def clear(self) -> None:
        """Forget every failure."""
        with self._lock:
            self._items.clear()


LOAD_FAILURES = LoadFailures()
# one load of a model at a time, the others wait for its outcome: a fixed set of locks, a model's by its hash (two
# models that share one only load one after the other; no table grows with the names links bring)
_LOADING = tuple(threading.Lock() for _ in range(16))


def _loading(checkpoint: str, device: str) -> threading.Lock:
    return _LOADING[hash((checkpoint, device)) % len(_LOADING)]


def _without_dir(checkpoint: str, text: str) -> str:
    """``text`` with the checkpoint's directory (as resolved on this server, however odd its characters) named by
    its short name, in public mode (``catalog.visitor_message`` then cuts any other path)."""
    folder = catalog.local_dir(checkpoint) if catalog.public_mode() else None
    if folder is None:
        return text
    for spelled in {str(folder), str(folder.resolve()), catalog.resolve_checkpoint(checkpoint)}:
        text = text.replace(spelled.rstrip("/"), catalog.short_name(checkpoint))
    return text


def load(model: Model) -> Translator:
    """``model``'s translator (``get_translator``), the one way every page and view loads a model: a model that
    failed to load here within ``RETRY_SECONDS`` raises ``LoadFailed`` with the remembered message at once (from any
    view, any link), a new failure is remembered with a message for visitors (no path of this server in public
    mode) and its freed memory handed back. One load of a model at a time: a visitor who arrives while it runs
    waits for its outcome rather than starting another."""
    with _loading(model.checkpoint, model.device):
        message = LOAD_FAILURES.get(model)
        if message is not None:
            raise LoadFailed(message)
        try:
            return get_translator(model.checkpoint, model.device)
        except Exception as err:  # a Streamlit stop or rerun is not an Exception: never remembered as a failure
            message = catalog.visitor_message(_without_dir(model.checkpoint, str(err) if isinstance(
                err, transformer.CheckpointError) else f"{type(err).__name__}: {err}"))
            LOAD_FAILURES.remember(model, message)
        ledger.release_memory()  # what the failed load allocated goes back to the system
        raise LoadFailed(message)


def heavy(make: Callable[[], Any], what: str = "Working…") -> Any:
    """``make()`` in one of the server's heavy-job slots (``app.limits.ledger.HEAVY``), saying how long it has waited
    for one and showing a spinner while it runs; freed memory goes back to the system afterwards."""
    waiting = st.empty()

    def tell(seconds: float) -> None:
        waiting.info(f"Waiting for another visitor's heavy job… {seconds:.0f} s", icon=":material/hourglass_top:")

    try:
        with ledger.HEAVY.slot(tell):
            waiting.empty()
            with st.spinner(what):
                return make()
    finally:
        waiting.empty()


def job(run: Callable[[], Any], working: str = "Working…", always_heavy: bool = False) -> Any:
    """``run()``: at once while this request's work is light (``ledger.is_light``), else (or ``always_heavy``) in a
    heavy slot with ``working`` as its spinner (a probe's: its record's ``working`` and ``heavy``)."""
    return heavy(run, working) if always_heavy or not ledger.is_light(0.0) else run()


@st.cache_data(show_spinner=False, ttl=30)
def get_checkpoint_list() -> list[catalog.CheckpointInfo]:
    """The checkpoint directories under ``checkpoints/`` (re-read every 30 s)."""
    return catalog.list_checkpoints()


@st.cache_data(show_spinner=False, max_entries=32)
def _vocab_norms(checkpoint: str, device: str) -> np.ndarray:
    """Scaled embedding lengths over the vocabulary (``Model.vocab_norms``)."""
    return probes.vocab_embedding_norms(Model(checkpoint, device).tr)


@st.cache_data(show_spinner=False, max_entries=256)
def _forced_logprob(checkpoint: str, device: str, source_ids: tuple[int, ...], target_ids: tuple[int, ...],
                    ablated: tuple[HeadKey, ...]) -> float:
    """Log-probability of a fixed translation with some heads switched off (teacher-forced)."""
    return inference.forced_logprob(Model(checkpoint, device).tr, list(source_ids), list(target_ids), ablated)


@st.cache_data(show_spinner=False, max_entries=256)
def _substitutes(checkpoint: str, device: str, text: str, word: int, src_lang: str | None) -> list[str]:
    """A word's substitutes of the same piece count (``Model.substitutes``)."""
    return patching.substitutes(Model(checkpoint, device).tr, text, word, src_lang=src_lang)


def _quietly_heavy(make: Callable[[], Any], release: bool = True) -> Any:
    """``make()`` in a heavy slot, with no page element (a download's thread has none); ``release``: the memory
    handed back when the slot is freed (``ledger.HeavyJobs.slot``)."""
    with ledger.HEAVY.slot(release=release):
        return make()


@dataclass(frozen=True)
class Model:
    """One model as the page serves it: where it comes from (``checkpoint``: a directory or a Hub id; ``device``),
    its translator (``tr``) and every analysis of it, each through the caches of this module, which stay keyed by
    these two strings. Frozen and hashable, it holds no visitor's state and not even the translator (a download
    button's callable keeps the handle, and the model stays the cache's to evict), so one handle serves every
    visitor. Every job is planned against what is left of the request's work and counts its estimate."""

    checkpoint: str
    device: str

    @property
    def tr(self) -> Translator:
        """The loaded model (:func:`load`: raises ``CheckpointError``; a failure is remembered for a minute)."""
        return load(self)

    def key(self, kind: str, *rest: Any) -> tuple:
        """The key of one of this model's results in ``RESULTS``."""
        return (kind, self.checkpoint, self.device, *rest)

    def analysis(self, text: str, settings: DecodeSettings, ablated: tuple[HeadKey, ...] = (),
                 ceiling: float | None = None, pieces: tuple[int, ...] | None = None) -> Analysis:
        """Translation and every attention weight for these inputs (kept within the byte budget), the beam capped
        to what is left of this request's work, or ``ceiling`` when lower (``app.limits.work.cap_translation``: the
        cut is recorded for the page's notice, ``result.settings`` says what ran). The text is tokenized once here
        (or not at all: ``pieces``, its pieces under this model's tokenizer, ``inference.Sentence``); the estimate,
        the translation and the analysis read those pieces."""
        tr = self.tr
        pieces = inference.sentence(tr, text).pieces if pieces is None else tuple(pieces)
        source = work.positions(tr, len(pieces))
        limit = ledger.left() if ceiling is None else min(ceiling, ledger.left())
        settings, notices = work.cap_translation(tr, source, settings, limit)
        ledger.cut(notices)
        estimate = work.translation_work(tr, source, settings)
        ledger.spend(estimate)
        light = ledger.is_light(estimate)

        def make() -> Analysis:
            run = lambda: inference.analyse(tr, text, settings, ablated, pieces=pieces)
            return run() if light else heavy(run, "Translating a long input…")

        return RESULTS.get(self.key("analysis", text, settings, tuple(ablated)), make)

    def has_translations(self, sentences: tuple[Sentence, ...], settings: DecodeSettings) -> bool:
        """Whether these sentences' translations are in the cache already (showing them again starts no work)."""
        return self.key("translations", tuple(s.text for s in sentences), settings) in RESULTS

    def translations(self, sentences: tuple[Sentence, ...], settings: DecodeSettings, estimate: float) -> list[str]:
        """Plain translations of some sentences of a longer text (kept within the byte budget): light while the
        request's work is (a caption of a few short sentences), else a heavy job. The caller plans and counts the
        work (``estimate``: :meth:`sentence_translations`)."""
        tr = self.tr
        run = lambda: inference.translate_sentences(tr, list(sentences), settings)
        light = ledger.is_light(estimate)
        return RESULTS.get(self.key("translations", tuple(s.text for s in sentences), settings),
                           lambda: run() if light else heavy(run, f"Translating {len(sentences)} sentences…"))

    def sentence_translations(self, sentences: list[Sentence], plan: work.TextPlan,
                              asked: int) -> tuple[list[str], int]:
        """The translations of a longer text's sentences in the first ``asked`` groups of ``plan``
        (``work.plan_text``), as far as this request goes, and how many groups that is. The newest group is this
        request's work (cached or not, so that reruns plan alike); an earlier group that left the cache is made
        again and the list stops there, so one request never translates two groups."""
        shown = min(asked, len(plan.groups))
        translations: list[str] = []
        for k, group in enumerate(plan.groups[:shown]):
            part = tuple(sentences[i] for i in group)
            estimate = sum(plan.costs[i] for i in group)
            if k < shown - 1 and self.has_translations(part, plan.settings):
                translations += self.translations(part, plan.settings, estimate)  # shown before: no work
                continue
            ledger.spend(estimate)
            return translations + self.translations(part, plan.settings, estimate), k + 1
        return translations, shown

    def table(self, sources: tuple[str, ...], references: tuple[str, ...] | None, settings: DecodeSettings,
              progress: Callable[[int, int], None] | None = None) -> list[dict]:
        """The test-set table's rows of a short list (``transformer.interpret.table.table_rows``: translation and
        signals of each line), kept within the byte budget; light while the request's work is, else a heavy job.
        The caller plans and counts the work (``app.limits.work.table_lines``); ``progress(done, total)`` is not
        part of the key."""
        from transformer.interpret.table import table_rows  # pyarrow and sacrebleu: only once a list is computed

        tr = self.tr
        run = lambda: table_rows(tr, list(sources), None if references is None else list(references), settings,
                                 progress)
        light = ledger.is_light(0.0)
        return RESULTS.get(self.key("table", sources, references, settings),
                           lambda: run() if light else heavy(run, f"Computing the table of {len(sources)} lines…"))

    def snapshot_model(self, snapshot: str) -> Transformer:
        """A copy of the model with one snapshot's weights (kept within the byte budget, its weights counted)."""
        return RESULTS.get(self.key("snapshot model", snapshot),
                           lambda: probes.load_snapshot_model(self.tr, snapshot))

    def snapshot_attentions(self, snapshot: str, source_ids: tuple[int, ...],
                            target_ids: tuple[int, ...]) -> tuple[dict[str, np.ndarray], str]:
        """A snapshot's attentions on the same sentence and translation, and its own greedy translation (a heavy
        job, counted against the request's work; kept within the byte budget)."""
        tr = self.tr
        ledger.spend(work.snapshot_work(tr, len(source_ids), len(target_ids)))

        def make() -> tuple[dict[str, np.ndarray], str]:
            return probes.snapshot_attentions(tr, self.snapshot_model(snapshot), list(source_ids), list(target_ids))

        return RESULTS.get(self.key("snapshot", snapshot, source_ids, target_ids),
                           lambda: heavy(make, "Running a training snapshot…"))

    def substitutes(self, text: str, word: int, src_lang: str | None = None) -> list[str]:
        """Words to put in place of ``text``'s ``word``-th word (0-based) that keep its piece count
        (``app.analysis.patching.substitutes``; a few milliseconds, cached)."""
        return _substitutes(self.checkpoint, self.device, text, word, src_lang)

    def patching_npz(self, text: str, settings: DecodeSettings, args: tuple) -> bytes:
        """The NPZ of one patching of an analysis (``beyond("patching", analysis, *args)``,
        ``app.analysis.patching.npz``), built when a visitor asks for the file, in a heavy slot and without any page
        element, like :meth:`export` (the patching is the page's, from the cache, or made again)."""
        def build() -> bytes:
            tr = self.tr
            analysis = RESULTS.get(self.key("analysis", text, settings, ()),
                                   lambda: inference.analyse(tr, text, settings, ()))
            patched = RESULTS.get(self.key("patching", analysis.text, analysis.settings, analysis.ablated, *args),
                                  lambda: probes.PROBES["patching"].run(tr, analysis, *args))
            return patching.npz(patched, analysis)

        return _quietly_heavy(build, release=False)

    def patching_file(self, text: str, settings: DecodeSettings, args: tuple) -> Callable[[], bytes]:
        """The ``data`` of the patching's download button: built on the click (:meth:`patching_npz`)."""
        return lambda: self.patching_npz(text, settings, tuple(args))

    def vocab_norms(self) -> np.ndarray:
        """Scaled embedding lengths over the vocabulary."""
        return _vocab_norms(self.checkpoint, self.device)

    def export(self, text: str, settings: DecodeSettings, ablated: tuple[HeadKey, ...], fmt: str) -> bytes:
        """JSON or NPZ bytes of an analysis, built when a visitor asks for the file (``export_file``) and kept
        within the byte budget like every result. ``settings``: those that ran (``Analysis.settings``). Runs
        outside a script run too (Streamlit calls a download's data on a thread of its own): an analysis that left
        the cache is made again, and the file built, in a heavy slot, without any page element (a long input's
        JSON takes seconds of a core and tens of MB: built beside the light work, three at once made an ordinary
        visitor's click wait seconds)."""
        def build() -> bytes:
            tr = self.tr
            analysis = RESULTS.get(self.key("analysis", text, settings, tuple(ablated)),
                                   lambda: inference.analyse(tr, text, settings, ablated))
            if fmt == "json":
                return inference.export_json(analysis, self.checkpoint).encode("utf-8")
            return inference.export_npz(analysis)

        # the file stays in the cache and a head at a time leaves little garbage: no collection after it
        return RESULTS.get(self.key("export", text, settings, tuple(ablated), fmt),
                           lambda: _quietly_heavy(build, release=False))

    def export_file(self, text: str, settings: DecodeSettings, ablated: tuple[HeadKey, ...],
                    fmt: str) -> Callable[[], bytes]:
        """The ``data`` of a download button: a callable that builds the file when the visitor clicks (it holds
        the request's key only, never the bytes, the analysis or the model)."""
        return lambda: self.export(text, settings, tuple(ablated), fmt)

    def report(self, text: str, settings: DecodeSettings, build: PageBuilder) -> bytes:
        """The offline page of an analysis (``build(translator, analysis, checkpoint)``: ``app.report``'s, a few
        MB), built when a visitor asks for it in a heavy slot (it runs the model again for its masks and
        candidates) and kept within the byte budget like the exports (one page per sentence and settings)."""
        def make() -> bytes:
            tr = self.tr

            def run() -> bytes:
                analysis = RESULTS.get(self.key("analysis", text, settings, ()),
                                       lambda: inference.analyse(tr, text, settings, ()))
                return build(tr, analysis, self.checkpoint).encode("utf-8")

            return _quietly_heavy(run)

        return RESULTS.get(self.key("report", text, settings), make)

    def report_file(self, text: str, settings: DecodeSettings, build: PageBuilder) -> Callable[[], bytes]:
        """The ``data`` of the offline page's download button: built on the click (``report``)."""
        return lambda: self.report(text, settings, build)

    def forced_logprob(self, source_ids: tuple[int, ...], target_ids: tuple[int, ...],
                       ablated: tuple[HeadKey, ...]) -> float:
        """Log-probability of a fixed translation with some heads switched off (teacher-forced, cached), its pass
        counted against the request's work."""
        ledger.spend(work.forced_work(self.tr, len(source_ids), len(target_ids)))
        return _forced_logprob(self.checkpoint, self.device, source_ids, target_ids, ablated)

    def beyond(self, kind: str, analysis: Analysis, *args: Any, **progress: Any) -> Any:
        """The probe ``kind`` of :data:`app.analysis.probes.PROBES` (inside a head, value norms, attributions, the
        logit lens, the beam tree, ALTI+, the flow graph, one head's row) of an analysed sentence, its record's
        estimate counted, kept within the byte budget like the analyses. A ``progress=`` callback (attributions) is
        passed on and is not part of the key."""
        probe = probes.PROBES[kind]
        key = self.key(kind, analysis.text, analysis.settings, analysis.ablated, *args)
        tr = self.tr
        ledger.spend(probe.cost(tr, analysis, *args))
        run = lambda: probe.run(tr, analysis, *args, **progress)
        return RESULTS.get(key, lambda: job(run, probe.working, probe.heavy))

    def flow_graph(self, analysis: Analysis, data: Any, step: int, threshold: float,
                   summary: Callable[[Any], Any]) -> Any:
        """``summary(data.graph(step, threshold))``: one output step's information-flow graph (``data``: this
        analysis' ``beyond("flow", ...)``) as the view keeps it, kept within the byte budget per sentence, step and
        threshold; light while the request's work is, else a heavy job. The caller plans and counts the work
        (``app.limits.work.plan_flow_graph``)."""
        key = self.key("flow graph", analysis.text, analysis.settings, analysis.ablated, step, threshold,
                       f"{summary.__module__}.{summary.__qualname__}")
        run = lambda: summary(data.graph(step, threshold))
        return RESULTS.get(key, lambda: job(run, probes.PROBES["flow"].working))


