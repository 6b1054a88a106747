"""Masks: the padding and causal masks of this sentence, and how they combine."""

from __future__ import annotations

import streamlit as st

from .. import controls, parts
from ..params import Param, int_in
from ..state import ViewContext

PARAMS = (Param("ps", "pad_src", int_in(0, 8), 2), Param("pt", "pad_tgt", int_in(0, 8), 2))


def render(ctx: ViewContext) -> None:
    """Padding and causal masks of this sentence, and how they combine."""
    tr, result = ctx.tr, ctx.result
    st.caption(parts.masks.INTRO)
    c1, c2 = st.columns(2)
    for param in PARAMS:
        st.session_state.setdefault(param.key, param.default)
    pad_src = c1.slider("Padding after the source", 0, 8, key="pad_src")
    pad_tgt = c2.slider("Padding after the decoder input", 0, 8, key="pad_tgt")
    charts = parts.masks.charts(tr, result, pad_src, pad_tgt)
    long = max(len(result.source_tokens) + pad_src, len(result.decoder_input_tokens) + pad_tgt) > 40
    per_row = 1 if long else 2  # long sentences: one mask per row, to read the tokens
    for i in range(0, 4, per_row):
        for col, chart in zip(st.columns(per_row), charts[i:i + per_row]):
            with col:
                controls.chart(chart.figure, chart.name, f"{chart.name}_chart".replace("-", "_"))
                st.caption(chart.caption, help="In the code (transformer/network/masks.py): "
                           + parts.masks.CODE[chart.name.removeprefix("mask-")])
    st.success(parts.masks.check(tr, result), icon=":material/check_circle:")
