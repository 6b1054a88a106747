"""Caches around ``app.inference``.

The model lives in ``st.cache_resource`` (one copy per checkpoint and device, shared by every
session); analyses, exports, translations of longer texts, training snapshots and their attentions live in one
byte-budgeted LRU (``app.budget``, ``$ATTN_CACHE_MB``, the loaded models counted too) keyed by text, settings,
checkpoint and ablated heads, so changing layer, head or view never runs the model again; small results live in
``st.cache_data`` (every cache and its bound: docs/limits.md). Work that is not in a cache yet is capped by
``app.work`` and, when heavy, waits for one of the server's heavy-job slots.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import streamlit as st

from transformer import Transformer, Translator

from . import catalog, inference, probes, work
from .budget import ByteLRU, analysis_working_bytes
from .inference import Analysis, DecodeSettings, HeadKey

# id of each loaded model -> its weights' bytes (with the prepacked output projection) plus the working memory of
# one analysis on it, counted against the budget (results kept = budget - these)
MODEL_BYTES: dict[int, int] = {}


def _released(tr: Translator) -> None:
    MODEL_BYTES.pop(id(tr), None)


@st.cache_resource(show_spinner="Loading the model…", max_entries=4, on_release=_released)
def get_translator(checkpoint: str, device: str) -> Translator:
    """The loaded model (raises ``CheckpointError``; failures are not cached)."""
    tr = catalog.load_translator(checkpoint, device)
    weights = sum(p.numel() * p.element_size() for p in tr.model.parameters()) + tr.model.generator.packed_bytes()
    MODEL_BYTES[id(tr)] = weights + analysis_working_bytes(tr.config)
    return tr


RESULTS = ByteLRU(reserved=lambda: sum(MODEL_BYTES.values()))


class LoadFailures:
    """The models that failed to load in this server process, for every session: (checkpoint, device) -> (the
    checkpoint's files as they were, the visitor's message), the last ``most``. A second visitor is told at once
    instead of repeating the failure; a change to the checkpoint's files, or "Try again", forgets it."""

    def __init__(self, most: int = 64) -> None:
        self.most = most
        self._items: OrderedDict[tuple[str, str], tuple[object, str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, checkpoint: str, device: str) -> str | None:
        """The remembered message, or None (never failed, or its files changed since)."""
        stamp = catalog.files_stamp(checkpoint)
        with self._lock:
            found = self._items.get((checkpoint, device))
            if found is None or found[0] != stamp:
                return None
            self._items.move_to_end((checkpoint, device))
            return found[1]

    def remember(self, checkpoint: str, device: str, message: str) -> None:
        stamp = catalog.files_stamp(checkpoint)
        with self._lock:
            self._items[(checkpoint, device)] = (stamp, message)
            self._items.move_to_end((checkpoint, device))
            while len(self._items) > self.most:
                self._items.popitem(last=False)

    def forget(self, checkpoint: str, device: str) -> None:
        with self._lock:
            self._items.pop((checkpoint, device), None)

    def clear(self) -> None:
        """Forget every failure."""
        with self._lock:
            self._items.clear()


LOAD_FAILURES = LoadFailures()


def heavy(make: Callable[[], Any], what: str = "Working…") -> Any:
    """``make()`` in one of the server's heavy-job slots (``app.work.HEAVY``), saying how long it has waited for
    one and showing a spinner while it runs; freed memory goes back to the system afterwards."""
    waiting = st.empty()

    def tell(seconds: float) -> None:
        waiting.info(f"Waiting for another visitor's heavy job… {seconds:.0f} s", icon=":material/hourglass_top:")

    try:
        with work.HEAVY.slot(tell):
            waiting.empty()
            with st.spinner(what):
                return make()
    finally:
        waiting.empty()


def get_analysis(checkpoint: str, device: str, text: str, settings: DecodeSettings,
                 ablated: tuple[HeadKey, ...] = ()) -> Analysis:
    """Translation and every attention weight for these inputs (kept within the byte budget), the beam capped to
    this server's work limit (``app.work.cap_translation``: ``result.settings`` says what ran)."""
    tr = get_translator(checkpoint, device)
    settings, _ = work.cap_translation(tr, text, settings)

    def make() -> Analysis:
        run = lambda: inference.analyse(tr, text, settings, ablated)
        big = work.translation_work(tr, work.source_length(tr, text), settings) > work.LIGHT_WORK
        return heavy(run, "Translating a long input…") if big else run()

    return RESULTS.get(("analysis", checkpoint, device, text, settings, tuple(ablated)), make)


def get_translations(checkpoint: str, device: str, sentences: tuple[str, ...], settings: DecodeSettings) -> list[str]:
    """Plain translations of some sentences of a longer text (a heavy job; kept within the byte budget). The beam
    is capped as for the longest of them."""
    tr = get_translator(checkpoint, device)
    longest = max(sentences, key=lambda x: work.source_length(tr, x))
    settings, _ = work.cap_translation(tr, longest, settings)
    return RESULTS.get(("translations", checkpoint, device, sentences, settings),
                       lambda: heavy(lambda: inference.translate_sentences(tr, list(sentences), settings),
                                     f"Translating {len(sentences)} sentences…"))


def get_snapshot_model(checkpoint: str, device: str, snapshot: str) -> Transformer:
    """A copy of the model with one snapshot's weights (kept within the byte budget, its weights counted)."""
    return RESULTS.get(("snapshot model", checkpoint, device, snapshot),
                       lambda: probes.load_snapshot_model(get_translator(checkpoint, device), snapshot))


def get_snapshot_attentions(checkpoint: str, device: str, snapshot: str, source_ids: tuple[int, ...],
                            target_ids: tuple[int, ...]) -> tuple[dict[str, np.ndarray], str]:
    """A snapshot's attentions on the same sentence and translation, and its own greedy translation (a heavy
    job; kept within the byte budget)."""
    def make() -> tuple[dict[str, np.ndarray], str]:
        tr = get_translator(checkpoint, device)
        model = get_snapshot_model(checkpoint, device, snapshot)
        return probes.snapshot_attentions(tr, model, list(source_ids), list(target_ids))

    return RESULTS.get(("snapshot", checkpoint, device, snapshot, source_ids, target_ids),
                       lambda: heavy(make, "Running a training snapshot…"))


@st.cache_data(show_spinner=False, max_entries=32)
def get_vocab_norms(checkpoint: str, device: str) -> np.ndarray:
    """Scaled embedding lengths over the vocabulary."""
    return probes.vocab_embedding_norms(get_translator(checkpoint, device))


def get_export(checkpoint: str, device: str, text: str, settings: DecodeSettings,
               ablated: tuple[HeadKey, ...], fmt: str) -> bytes:
    """JSON or NPZ bytes of an analysis (built once per result, kept within the byte budget)."""
    def make() -> bytes:
        analysis = get_analysis(checkpoint, device, text, settings, ablated)
        if fmt == "json":
            return inference.export_json(analysis, checkpoint).encode("utf-8")
        return inference.export_npz(analysis)

    return RESULTS.get(("export", checkpoint, device, text, settings, tuple(ablated), fmt), make)


@st.cache_data(show_spinner=False, max_entries=256)
def get_forced_logprob(checkpoint: str, device: str, source_ids: tuple[int, ...], target_ids: tuple[int, ...],
                       ablated: tuple[HeadKey, ...]) -> float:
    """Log-probability of a fixed translation with some heads switched off (teacher-forced)."""
    return inference.forced_logprob(get_translator(checkpoint, device), list(source_ids), list(target_ids), ablated)


@st.cache_data(show_spinner=False, ttl=30)
def get_checkpoint_list() -> list[catalog.CheckpointInfo]:
    """The checkpoint directories under ``checkpoints/`` (re-read every 30 s)."""
    return catalog.list_checkpoints()


def get_beyond(kind: str, checkpoint: str, device: str, analysis: Analysis, *args: Any, **progress: Any) -> Any:
    """``probes.inside_head`` / ``norm_attentions`` / ``attributions`` / ``lens`` / ``beam_tree`` of an
    analysed sentence, kept within the byte budget like the analyses. A ``progress=`` callback (attributions)
    is passed on and is not part of the key."""
    make = {"inside_head": probes.inside_head, "norms": probes.norm_attentions,
            "attributions": probes.attributions, "lens": probes.lens, "beam_tree": probes.beam_tree}[kind]
    key = (kind, checkpoint, device, analysis.text, analysis.settings, analysis.ablated, *args)
    run = lambda: make(get_translator(checkpoint, device), analysis, *args, **progress)
    if kind in HEAVY_KINDS:
        return RESULTS.get(key, lambda: heavy(run, HEAVY_KINDS[kind]))
    return RESULTS.get(key, run)


HEAVY_KINDS = {"attributions": "Attributing…", "beam_tree": "Recording the beam search…",
               "lens": "Reading every layer's predictions…"}
