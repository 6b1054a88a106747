"""Masks: the padding and causal masks of this sentence, and how they combine."""

from __future__ import annotations

import streamlit as st

from .. import parts
from ..page import controls, heatmaps
from ..page.params import Param, int_in
from ..page.state import ViewContext
from ..parts import masks as described  # this view's description (the offline page's too)

MASKS_MOST = 60  # four masks of at most 60 x 60 cells each (what the browser must draw stays bounded)
MASKS_SHOWN = 30  # positions at first: a longer sentence's window (its four masks side by side, drawn in a third of
# the time of 60; every pattern of a mask shows in 30 positions, the slider moves to the padding at the end)
MASKS_WINDOW = heatmaps.span_param("mw", "masks_window", size=MASKS_SHOWN)  # a longer sentence: a window of it
PARAMS = (Param("ps", "pad_src", int_in(0, 8), 2), Param("pt", "pad_tgt", int_in(0, 8), 2), MASKS_WINDOW)


def render(ctx: ViewContext) -> None:
    """Padding and causal masks of this sentence, and how they combine."""
    tr, result = ctx.tr, ctx.result
    st.caption(described.INTRO)
    c1, c2 = st.columns(2)
    for param in PARAMS[:2]:
        st.session_state.setdefault(param.key, param.default)
    pad_src = c1.slider("Padding after the source", 0, 8, key="pad_src")
    pad_tgt = c2.slider("Padding after the decoder input", 0, 8, key="pad_tgt")
    p0, p1 = heatmaps.span_slider(st, "Positions (a window of a long sentence; both axes of each mask)",
                                  max(len(result.source_tokens) + pad_src, len(result.decoder_input_tokens) + pad_tgt),
                                  MASKS_WINDOW, most=MASKS_MOST)
    charts = described.charts(tr, result, pad_src, pad_tgt, (p0, p1))
    per_row = 1 if p1 - p0 > 40 else 2  # long sentences: one mask per row, to read the tokens
    for i in range(0, 4, per_row):
        for col, chart in zip(st.columns(per_row), charts[i:i + per_row]):
            with col:
                if isinstance(chart, parts.Note):
                    st.caption(chart.text)
                    continue
                controls.chart(chart.figure, chart.name, f"{chart.name}_chart".replace("-", "_"))
                st.caption(chart.caption, help="In the code (transformer/network/masks.py): "
                           + described.CODE[chart.name.removeprefix("mask-")])
    st.success(described.check(tr, result), icon=":material/check_circle:")
