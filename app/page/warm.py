"""Warm the server before its first visitor: the default model loaded and the first screen's sentence analysed,
into the same caches the page reads (``app.analysis.cached``). Called by ``app/serve.py`` when the server starts,
after it imports every view module (the views stand a floor above the page's frame: docs/code.md)."""

from __future__ import annotations

import gc

import transformer

from ..analysis import cached, inference
from ..drawing import svg
from ..models import catalog
from . import preload, state


def warm_up() -> None:
    """Load the default checkpoint and analyse the first screen's sentence with the default settings, as the
    page's first run would (a failure is left for the page to report)."""
    from streamlit.string_util import is_emoji, is_material_icon

    is_emoji("🔭")  # the page icon: the check loads Streamlit's table of emoji
    is_material_icon("translate")  # the page's ":material/...:" icons: the same for Streamlit's table of them
    preload.link_header()  # the first screen's scripts, read from Streamlit's bundle once
    for repo_id in catalog.hub_models():  # the model picker's labels: the first looks in the Hub's local cache with
        catalog.hub_label(repo_id)  # the Hugging Face library, whose import costs a first run
        # measurably (docs/benchmarks.md#figures-behind-the-codes-comments)

    checkpoint = catalog.default_checkpoint()
    try:
        device = str(transformer.resolve_device(catalog.default_device()))
    except (transformer.CheckpointError, transformer.environment.SettingError):  # the page says why
        device = "cpu"
    # the settings of the page's first run: the sidebar's defaults with the model's own length penalty
    settings = state.settings_from_state({**state.SIDEBAR_DEFAULTS, state.ALPHA: catalog.model_alpha(checkpoint)})
    cached.get_checkpoint_list()  # the sidebar's list: it checks each checkpoint (and imports torch's compiler)
    text = state.EXAMPLES[0]
    inference.split_sentences(text)  # the sentence splitter and the language identifier load on first use
    inference.detect_language(text)
    try:
        result = cached.Model(checkpoint, device).analysis(text, settings, ())
        queries, keys = result.axes("cross")
        svg.heatmap_svg(result.attention("cross")[-1].mean(axis=0), queries, keys)  # what the first screen draws
    except Exception:  # noqa: BLE001 (the page says what went wrong, to the visitor who asks for it)
        pass
    # Everything loaded so far (torch, plotly, the model...) lives as long as the server: out of the garbage
    # collector's sight, so the full collection Streamlit runs after every script run (runner.postScriptGC) walks
    # only what the runs made: most of a click's server CPU before (docs/speed-app.md#warmed-at-start-and-the-collector-
    # kept-off-the-lasting-heap-issue-38-2026-11-26).
    gc.collect()
    gc.freeze()
