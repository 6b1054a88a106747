"""Caches around ``app.inference``.

The model lives in ``st.cache_resource`` (one copy per checkpoint and device, shared by every
session); analyses and exports live in one byte-budgeted LRU (``app.budget``, ``$ATTN_CACHE_MB``, the
loaded models counted too) keyed by text, settings, checkpoint and ablated heads, so changing layer,
head or view never runs the model again; small results live in ``st.cache_data``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st

from transformer import Transformer, Translator

from . import catalog, inference, probes
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


def get_analysis(checkpoint: str, device: str, text: str, settings: DecodeSettings,
                 ablated: tuple[HeadKey, ...] = ()) -> Analysis:
    """Translation and every attention weight for these inputs (kept within the byte budget)."""
    return RESULTS.get(("analysis", checkpoint, device, text, settings, tuple(ablated)),
                       lambda: inference.analyse(get_translator(checkpoint, device), text, settings, ablated))


@st.cache_data(show_spinner=False, max_entries=128)
def get_translations(checkpoint: str, device: str, sentences: tuple[str, ...], settings: DecodeSettings) -> list[str]:
    """Plain translations of the sentences of a longer text."""
    return inference.translate_sentences(get_translator(checkpoint, device), list(sentences), settings)


@st.cache_resource(show_spinner="Loading a training snapshot…", max_entries=16)
def get_snapshot_model(checkpoint: str, device: str, snapshot: str) -> Transformer:
    """A copy of the model with one snapshot's weights."""
    tr = get_translator(checkpoint, device)
    return probes.load_snapshot_model(tr, snapshot)


@st.cache_data(show_spinner=False, max_entries=128)
def get_snapshot_attentions(checkpoint: str, device: str, snapshot: str, source_ids: tuple[int, ...],
                            target_ids: tuple[int, ...]) -> tuple[dict[str, np.ndarray], str]:
    """A snapshot's attentions on the same sentence and translation, and its own greedy translation."""
    tr = get_translator(checkpoint, device)
    model = get_snapshot_model(checkpoint, device, snapshot)
    return probes.snapshot_attentions(tr, model, list(source_ids), list(target_ids))


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
    return RESULTS.get(key, lambda: make(get_translator(checkpoint, device), analysis, *args, **progress))
