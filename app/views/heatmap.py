"""Heatmap: one attention matrix, large. The first screen of a visit: drawn as an SVG built on the server, so a
new visitor's browser loads no plotly.js; the "Interactive" switch draws the plotly figure instead."""

from __future__ import annotations

import streamlit as st

from ..page import controls, heatmaps, params
from ..page.state import ViewContext
from ..parts import heatmap as described  # how to read a heatmap, described once

ROW = "heatmap_chart_row"  # heatmaps.svg_heatmap's row picker for the key "heatmap_chart"
INTERACTIVE = "interactive"  # this view's widget key: the plotly figure (zoom, pan, PNG) instead of the SVG
PARAMS = (controls.ATT_PARAM, controls.LAYER_PARAM, controls.HEAD_PARAM, controls.SCALE_PARAM,
          controls.MEASURE_PARAM,
          params.Param("i", INTERACTIVE, lambda v: True if v.strip() in ("1", "true") else None, False, lambda v: "1"),
          # the SVG's "Read a row" picker: the row counted from 1 in the address, from 0 in the widget
          params.Param("row", ROW, lambda v: (lambda n: None if n is None else n - 1)(params.int_in(1, 100_000)(v)),
                       None, lambda v: str(int(v) + 1)),
          *heatmaps.window_params("heatmap_chart"))


def render(ctx: ViewContext) -> None:
    """The big heatmap, its controls in a narrow column beside it (below it on a phone), so that the chart is on
    the first screen of a laptop. The chart is sent first and its controls after: the browser draws the picture
    in the page's first frame, before it has built the controls."""
    chart, side = st.columns([3.4, 1], gap="medium")
    kind, layer, head = controls.heatmap_settings(ctx.tr)  # what the controls below will show
    measure = controls.measure_setting()
    interactive = bool(st.session_state.get(INTERACTIVE, False))
    with chart:
        if measure == "norms":
            norms = ctx.model.beyond("norms", ctx.result)[kind]
            heatmaps.draw_heatmap(ctx.result, kind, layer, head, key="heatmap_chart", attn=norms, value_name="norm",
                                  as_svg=not interactive)
            st.caption(controls.NORMS_NOTE, help=controls.NORMS_TERMS)
        else:
            heatmaps.draw_heatmap(ctx.result, kind, layer, head, key="heatmap_chart", as_svg=not interactive)
        hover = ("Hover a cell for its query token, key token and weight; the camera icon saves a PNG." if interactive
                 else "Pick a row to read its values; the switch beside the chart makes it interactive (hover a "
                      "cell for its weight, zoom, pan, PNG).")
        st.caption(f"{described.READING[kind]} {hover}")
    with side:
        controls.heatmap_controls(ctx.tr)
        controls.measure_control()
        st.toggle("Interactive", key=INTERACTIVE, persist_state="session",
                  help="Hover labels on every cell, zoom, pan and a PNG button: loads the plotting library (about 5 MB "
                       "of JavaScript), which the other views use too.")
