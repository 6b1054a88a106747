"""Heatmap: one attention matrix, large."""

from __future__ import annotations

import streamlit as st

from .. import controls
from ..state import ViewContext


def render(ctx: ViewContext) -> None:
    """Type, layer and head pickers over the big heatmap."""
    st.caption("One attention matrix: pick the attention type, the layer and a head (or the mean over heads). "
               "Hover a cell for its query token, key token and weight; the camera icon saves a PNG.")
    kind = controls.kind_control()
    layer, head = controls.layer_head_controls(ctx.tr, kind)
    st.caption(controls.READING[kind])
    controls.draw_heatmap(ctx.result, kind, layer, head, key="heatmap_chart")
