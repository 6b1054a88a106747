"""Heatmap: one attention matrix, large."""

from __future__ import annotations

import streamlit as st

from .. import cached, controls
from ..state import ViewContext

PARAMS = (controls.ATT_PARAM, controls.LAYER_PARAM, controls.HEAD_PARAM, controls.SCALE_PARAM,
          controls.MEASURE_PARAM)


def render(ctx: ViewContext) -> None:
    """Type, layer and head pickers over the big heatmap."""
    kind, layer, head = controls.heatmap_controls(ctx.tr)
    measure = controls.measure_control()
    if measure == "norms":
        norms = cached.get_beyond("norms", ctx.checkpoint, ctx.device, ctx.result)[kind]
        controls.draw_heatmap(ctx.result, kind, layer, head, key="heatmap_chart", attn=norms, value_name="norm")
        st.caption(controls.NORMS_NOTE)
    else:
        controls.draw_heatmap(ctx.result, kind, layer, head, key="heatmap_chart")
    st.caption(f"{controls.READING[kind]} Hover a cell for its query token, key token and weight; the camera icon "
               "saves a PNG.")
