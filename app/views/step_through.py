"""Step through: the top-k candidates of one output step and where its cross-attention looked."""

from __future__ import annotations

import streamlit as st

from ..page import controls, plots
from ..page.params import Param, int_in
from ..page.state import ViewContext
from ..parts import step_through as described  # this view's description (the offline page's too)

PARAMS = (Param("step", "step", int_in(1, 1000), 1), Param("k", "topk", int_in(3, 100), 8),
          Param("sl", "step_layer", int_in(1, 64)))


def render(ctx: ViewContext) -> None:
    """Step slider, candidates bar chart and the step's cross-attention per head."""
    result = ctx.result
    st.caption(described.INTRO)
    steps = len(result.target_tokens)
    c1, c2, c3 = st.columns([3, 1, 1])
    if steps > 1:
        controls.keep_if("step", 1 <= int(st.session_state.get("step", 1)) <= steps)
        st.session_state.setdefault("step", 1)
        step = c1.slider("Output step", 1, steps, key="step", persist_state="session")
    else:
        step = 1
        c1.caption("The output has a single step.")
    most = result.topk_probs.shape[1]
    controls.keep_if("topk", 3 <= int(st.session_state.get("topk", 3)) <= most)
    st.session_state.setdefault("topk", min(8, most))
    k = c2.slider("Candidates", 3, most, key="topk")
    layers = list(range(1, ctx.tr.config.n_decoder_layers + 1))
    layer = controls.choose(c3.selectbox, "Cross-attention layer", layers, "step_layer", layers[-1])
    t = step - 1
    st.caption("Output so far (the piece of this step last)")
    st.code(described.so_far(result, t), language=None, wrap_lines=True)
    a, b = st.columns([2, 3]) if len(result.source_tokens) <= 40 else (st.container(), st.container())
    with a:
        chart = described.candidates(result, t, k)
        plots.chart(chart.figure, chart.name, "topk_chart")
        st.caption(chart.caption)
    with b:
        cross = result.cross[layer - 1][:, t, :]  # (H, S)
        chart = described.looked(result, t, layer, zrange=controls.colour_range(cross, cross.mean(axis=0)))
        plots.chart(chart.figure, chart.name, "step_cross_chart")
