"""Positional encoding: the sinusoidal table, its waves, similarity between positions, the model's own table."""

from __future__ import annotations

import streamlit as st

from .. import controls, figures, parts, probes
from ..figures import wave_dims
from ..params import Param, int_in, int_list, join
from ..state import ViewContext

PARAMS = (Param("d", "pe_d", int_in(8, 1024)), Param("n", "pe_len", int_in(8, 512)),
          Param("dims", "pe_dims", int_list(0, 1023), dump=join))


def render(ctx: ViewContext) -> None:
    """The sinusoidal positional encoding: table, waves, similarity, the model's table, sizes."""
    tr, result = ctx.tr, ctx.result
    ss = st.session_state
    st.caption(parts.positional.INTRO)
    c1, c2 = st.columns(2)
    controls.keep_if("pe_d", ss.get("pe_d", 8) % 8 == 0)  # the slider moves in steps of 8
    ss.setdefault("pe_d", min(max(8, int(tr.config.d_model) // 8 * 8), 1024))
    ss.setdefault("pe_len", int(min(100, max(tr.config.max_len, 8))))
    d_model = c1.slider("d_model", 8, 1024, step=8, key="pe_d")
    length = c2.slider("Positions", 8, 512, step=1, key="pe_len")
    table = probes.positional_table(length, d_model)
    a, b = st.columns(2)
    a.plotly_chart(figures.pe_heatmap(table), config=figures.plotly_config("positional-encoding"), key="pe_heat")
    with b:
        if ss.get("_pe_dims_for") not in (None, (d_model, length)):  # new table: its own waves
            ss.pop("pe_dims", None)
        ss["_pe_dims_for"] = (d_model, length)
        controls.keep_if("pe_dims", set(ss.get("pe_dims") or []) <= set(range(d_model)))
        ss.setdefault("pe_dims", wave_dims(d_model, length))
        dims = st.multiselect("Dimensions to draw", list(range(d_model)), key="pe_dims")
        st.plotly_chart(figures.pe_waves(table, dims), config=figures.plotly_config("pe-waves"), key="pe_waves")
    a, b = st.columns(2)
    with a:
        st.plotly_chart(figures.pe_similarity(table), config=figures.plotly_config("pe-similarity"), key="pe_sim")
        st.caption(parts.positional.SIMILARITY)
    with b:
        chart = parts.positional.model_table(tr)
        st.plotly_chart(chart.figure, config=figures.plotly_config(chart.name), key="pe_model")
        st.caption(chart.caption, help=parts.positional.MODEL_TABLE_HELP)
    if result is not None:
        chart = parts.positional.sizes(tr, result, ctx.model.vocab_norms())
        controls.chart(chart.figure, chart.name, "pe_norms")
        st.caption(chart.caption)
    else:
        st.info("Translate a sentence to compare its token embeddings with the positional codes.")
