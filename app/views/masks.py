"""Masks: the padding and causal masks of this sentence, and how they combine."""

from __future__ import annotations

import streamlit as st

from .. import parts
from ..drawing import layout
from ..page import controls, heatmaps, plots
from ..page.params import Param, int_in, one_of
from ..page.state import ViewContext
from ..parts import masks as described  # this view's description (the offline page's too)

MASKS_MOST = 60  # a mask of at most 60 x 60 cells (what the browser must draw stays bounded)
MASKS_SHOWN = 30  # positions at first: a longer sentence's window (every pattern of a mask shows in 30 positions,
# the slider moves to the padding at the end)
MASKS_WINDOW = heatmaps.span_param("mw", "masks_window", size=MASKS_SHOWN)  # a longer sentence: a window of it
HALF_PAGE_PX = 440  # the widest mask that shares a row with its caption (half a laptop's page)
FIRST_MASK = "encoder"  # the mask drawn first (one at a time: each is a wide chart with its frozen row labels)
PARAMS = (Param("ps", "pad_src", int_in(0, 8), 2), Param("pt", "pad_tgt", int_in(0, 8), 2), MASKS_WINDOW,
          Param("mask", "masks_shown", one_of(*described.MASK_NAMES), FIRST_MASK))


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
    shown = controls.choose(st.segmented_control, "Mask", list(described.MASK_NAMES), "masks_shown", FIRST_MASK,
                            format_func=described.MASK_NAMES.get, required=True, wrap=True)
    chart = described.charts(tr, result, pad_src, pad_tgt, (p0, p1), (shown,))[0]
    # a mask that fits half a laptop's page there, what it does beside it; a wider one: the whole width, its caption
    # under it (it scrolls sideways only where the whole width is still narrower)
    wide = isinstance(chart, parts.Chart) and layout.min_width(chart.figure) > HALF_PAGE_PX
    where, beside = (st.container(), st.container()) if wide else st.columns(2)
    if isinstance(chart, parts.Note):
        where.caption(chart.text)
    else:
        plots.chart(chart.figure, chart.name, f"{chart.name}_chart".replace("-", "_"), where)
        beside.caption(chart.caption, help="In the code (transformer/network/masks.py): " + described.CODE[shown])
    st.success(described.check(tr, result), icon=":material/check_circle:")
