"""What drives each word: attribution of each output piece to the source and to the earlier output."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ..drawing import layout
from ..page import controls, heatmaps, plots
from ..page.params import Param, one_of
from ..page.state import ViewContext
from ..parts import what_drives_each_word as described  # this view's description (the offline page's too)

SIDE_BY_SIDE_PX = 420  # the widest two maps may need to share a row (a laptop's page holds two of this)
PARAMS = (Param("method", "drivers_method", one_of(*described.METHODS)), *heatmaps.window_params("drivers_chart"))


def render(ctx: ViewContext) -> None:
    """Method picker, the two attribution maps, the source/target share per step and the head agreement."""
    result = ctx.result
    st.caption(described.INTRO, help=described.METHOD_HELP)
    large = (controls.n_parameters(ctx.tr) > controls.LARGE_MODEL or ctx.tr.config.tgt_vocab_size >
             controls.LARGE_VOCABULARY) and ctx.tr.device.type == "cpu"
    method = controls.choose(st.segmented_control, "Method", list(described.METHODS), "drivers_method",
                             "input_x_gradient" if large else "integrated_gradients", format_func=described.METHODS.get,
                             required=True)
    if large:
        vocab = ctx.tr.config.tgt_vocab_size
        st.caption(f"This model has {controls.n_parameters(ctx.tr) / 1e6:.0f}M parameters"
                   + (f" and a {vocab:,}-piece vocabulary" if vocab > controls.LARGE_VOCABULARY else "")
                   + ": integrated gradients "
                   "run 32 passes through it for every output piece, a minute or more on a CPU; input × gradient "
                   "is one pass (seconds).")
    data = controls.attributions(ctx, method)
    src = data["source"]  # (T', S): the output pieces of the span attributed
    first, end = (int(x) for x in data.get("span", (0, len(src))))
    # a long sentence: a window of the output pieces (rows of both maps and bars of the share) and of the source
    # pieces; the decoder-input map shows the inputs of the same steps (input t fed output step t)
    q0, q1, k0, k1 = heatmaps.window(end - first, len(result.source_tokens), "drivers_chart",
                                     ("Output pieces (rows)", "Source pieces (columns)"))
    d0, d1 = first + q0, min(first + q1, len(result.decoder_input_tokens))
    source, target, share = described.charts(result, data, (q0, q1, k0, k1))
    # side by side while both fit half a laptop's page; else each map gets the whole width, so its pieces can be read
    long = max(layout.min_width(source.figure), layout.min_width(target.figure)) > SIDE_BY_SIDE_PX
    c1, c2 = (st.container(), st.container()) if long else st.columns([3, 2])
    plots.chart(source.figure, source.name, "drivers_src", c1)
    plots.chart(target.figure, target.name, "drivers_tgt", c2)
    if (q0, q1) != (0, end - first):
        st.caption(f"The decoder-input map shows the inputs of the output steps shown ({d0}–{d1 - 1}); an output "
                   "step may also draw on earlier inputs, outside the window (its share below counts them all).")
    plots.chart(share.figure, share.name, "drivers_share")
    table = described.agreement(data)
    frame = pd.DataFrame([[int(r[0]), int(r[1]), float(r[2])] for r in table.rows], columns=table.columns)
    st.caption(table.caption, help=described.AGREEMENT_HELP)
    st.dataframe(frame, hide_index=True, width="stretch",
                 column_config={table.columns[2]: st.column_config.NumberColumn(format="%.3f")})
