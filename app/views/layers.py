"""Layer by layer: the logit lens over the decoder — when does each output word become the top prediction?"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from .. import parts
from ..page import controls
from ..page.state import ViewContext

PARAMS = ()  # no choices of its own


def render(ctx: ViewContext) -> None:
    """A heatmap of the chosen piece's probability per layer and step, and the top prediction per layer."""
    result, tr = ctx.result, ctx.tr
    st.caption(parts.layers.INTRO)
    chart, table, note = parts.layers.parts(result, ctx.model.beyond("lens", result, 5), tr.tokenizer.pieces)
    controls.chart(chart.figure, chart.name, "lens_chart")
    frame = pd.DataFrame(table.rows, columns=table.columns).set_index(table.columns[0])
    st.caption(table.caption)
    st.dataframe(frame, width="stretch")
    st.caption(note.text)
