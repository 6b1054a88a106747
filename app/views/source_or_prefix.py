"""Source or prefix: how much of each output piece comes from the source and how much from the target prefix
(ALTI+, Ferrando et al. 2022), beside the plain cross-attention, with the checkpoint's hallucination ``flag``
(``transformer.interpret.signals``: the rule in its ``flag.json``, chosen on val)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from ..analysis import cached
from ..analysis.inference import Analysis
from ..limits import work
from ..page import controls, heatmaps, plots
from ..page.params import Param, int_in
from ..page.state import ViewContext
from ..parts import Note
from ..parts import source_or_prefix as described  # this view's description (the offline page's too)
from ..parts.source_or_prefix import ALL

threshold_of = described.threshold_of


def _layer(value: str) -> str | int | None:
    if value == ALL:
        return ALL
    return int_in(1, 64)(value)


PARAMS = (Param("cl", "source_prefix_layer", _layer), *heatmaps.window_params("source_prefix_chart"))


def contributions_of(model: cached.Model, result: Analysis) -> dict | None:
    """ALTI+ of an analysed sentence (``probes.alti``, cached, its work counted), or None when it does not fit the
    work left (the page's one notice says so)."""
    fits, notices = work.plan_alti(model.tr, len(result.source_ids), len(result.target_ids))
    controls.capped(notices)
    return model.beyond("alti", result, work.work_bytes()) if fits else None


def show_notice(note: Note, place: Any = st) -> None:
    """The flag's notice: a warning when the translation is flagged, else a caption; how the rule was chosen on
    hover."""
    if note.warning:
        place.warning(note.text, icon=":material/report:")  # words and numbers: a rule's columns are names
        place.caption("How this rule was chosen", help=described.FLAG_HELP)
    else:
        place.caption(note.text, help=described.FLAG_HELP)


def render(ctx: ViewContext) -> None:
    """The hallucination notice, the source share per output piece, the full contribution matrix and the
    cross-attention beside it."""
    result = ctx.result
    st.caption(described.INTRO)
    data = contributions_of(ctx.model, result)
    if data is None:
        return
    share = data["source_share"]  # (T,)
    _, section = threshold_of(ctx.tr.path)
    note, threshold = described.notice(ctx.tr, result, share)
    show_notice(note)
    outputs, prefix = result.target_tokens, result.decoder_input_tokens
    # a long sentence: a window of the output pieces (rows of both maps and bars of the share) and of the source
    # pieces, with the target prefix of the same steps (what the browser must draw stays bounded)
    q0, q1, k0, k1 = heatmaps.window(len(outputs), len(result.source_tokens), "source_prefix_chart",
                                     ("Output pieces (rows)", "Source pieces (columns)"))
    d0 = q0  # decoder input t fed output step t: the prefixes of the rows shown, as many as the window's cells allow
    d1 = min(q1, len(prefix), d0 + max(1, heatmaps.MOST_CELLS // max(1, q1 - q0)))
    window = (q0, q1, k0, k1, d0, d1)
    shares, matrix = described.charts(result, data, threshold, window)
    plots.chart(shares.figure, shares.name, "source_prefix_share")
    layers = [ALL, *range(1, ctx.tr.config.n_decoder_layers + 1)]
    layer = controls.choose(st.selectbox, "Cross-attention to compare with", layers, "source_prefix_layer",
                            layers[-1], format_func=lambda v: "mean over every layer and head" if v == ALL
                            else f"layer {v}, mean over heads")
    long = len(result.source_tokens) + len(prefix) >= 30
    c1, c2 = (st.container(), st.container()) if long else st.columns([3, 2])
    plots.chart(matrix.figure, matrix.name, "source_prefix_matrix", c1)
    cross = described.cross_chart(result, data, layer, section, window)
    plots.chart(cross.figure, cross.name, "source_prefix_cross", c2)
    if (q0, q1, k0, k1) != (0, len(outputs), 0, len(result.source_tokens)):
        st.caption(f"A window of the sentence: output pieces {q0 + 1}–{q1}, source pieces {k0 + 1}–{k1} and the "
                   f"target prefix of the same steps ({d0}–{d1 - 1}); the share and the agreement count every piece.")
    st.caption(controls.md_escape(cross.caption))  # heads.json's strings are shown as text, never as links
