"""Positional encoding: the sinusoidal table, its waves, similarity between positions, the model's own table."""

from __future__ import annotations

import math

import numpy as np
import streamlit as st

from ..analysis import probes
from ..drawing import figures
from ..drawing import positional as pe
from ..page import controls, plots
from ..page.params import Param, int_in, int_list, join
from ..page.state import ViewContext
from ..parts import positional_encoding as described  # this view's description (the offline page's too)

PE_CELLS = 33_000  # each table's heatmap draws at most about this many cells (every n-th position and dimension;
# the shipped models' own table, 256 x 128, whole)
PE_ROWS = 256  # and at most this many positions
SIMILARITY_CELLS = 20_000  # the similarity between positions: at most about this many cells
MOST_WAVES = 16  # and at most this many waves (what the browser must draw stays bounded)
PARAMS = (Param("d", "pe_d", int_in(8, 1024)), Param("n", "pe_len", int_in(8, 512)),
          Param("dims", "pe_dims", int_list(0, 1023), dump=join))


def stride(rows: int, cols: int, cells: int = PE_CELLS) -> tuple[int, int]:
    """The steps (every n-th position, every m-th dimension) that draw a ``rows x cols`` table in at most about
    ``cells`` cells: positions at most ``PE_ROWS`` (about what the chart has pixels for; every 2nd of 512 still
    samples the fastest wave, of 2π positions, more than twice a period), dimensions the rest, an even step (the
    sines of a sine/cosine pair, never a mix of both)."""
    position_step = math.ceil(rows / PE_ROWS) if rows * cols > cells else 1
    dim_step = max(1, math.ceil((rows // position_step) * cols / cells))
    return position_step, dim_step + dim_step % 2 if dim_step > 1 else 1


def thinned(table: np.ndarray, what: str) -> tuple[np.ndarray, tuple[int, int]]:
    """Every n-th position and m-th dimension of ``table`` (``stride``), with a caption when that is fewer than
    all."""
    steps = stride(*table.shape)
    if steps != (1, 1):
        st.caption(f"{what} ({table.shape[0]} × {table.shape[1]}) drawn at every {_nth(steps[0])} position and every "
                   f"{_nth(steps[1])} dimension, so the page stays light (at most about {PE_CELLS:,} cells).")
    return table[::steps[0], ::steps[1]], steps


def _nth(n: int) -> str:
    return "" if n == 1 else {2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def render(ctx: ViewContext) -> None:
    """The sinusoidal positional encoding: table, waves, similarity, the model's table, sizes."""
    tr, result = ctx.tr, ctx.result
    ss = st.session_state
    st.caption(described.INTRO)
    c1, c2 = st.columns(2)
    controls.keep_if("pe_d", ss.get("pe_d", 8) % 8 == 0)  # the slider moves in steps of 8
    ss.setdefault("pe_d", min(max(8, int(tr.config.d_model) // 8 * 8), 1024))
    ss.setdefault("pe_len", int(min(100, max(tr.config.max_len, 8))))
    d_model = c1.slider("d_model", 8, 1024, step=8, key="pe_d")
    length = c2.slider("Positions", 8, 512, step=1, key="pe_len")
    table = probes.positional_table(length, d_model)
    a, b = st.columns(2)
    with a:
        shown, (p_step, d_step) = thinned(table, "The table")
        plots.plotly(st, pe.pe_heatmap(shown, position_step=p_step, dim_step=d_step),
                        figures.plotly_config("positional-encoding"), "pe_heat")
    with b:
        if ss.get("_pe_dims_for") not in (None, (d_model, length)):  # new table: its own waves
            ss.pop("pe_dims", None)
        ss["_pe_dims_for"] = (d_model, length)
        controls.keep_if("pe_dims", set(ss.get("pe_dims") or []) <= set(range(d_model)))
        ss.setdefault("pe_dims", pe.wave_dims(d_model, length))
        dims = st.multiselect("Dimensions to draw", list(range(d_model)), key="pe_dims")
        if len(dims) > MOST_WAVES:
            st.caption(f"The first {MOST_WAVES} of the {len(dims)} dimensions chosen are drawn.")
            dims = dims[:MOST_WAVES]
        plots.plotly(st, pe.pe_waves(table, dims), figures.plotly_config("pe-waves"), "pe_waves")
    a, b = st.columns(2)
    with a:
        step = math.ceil(len(table) / math.isqrt(SIMILARITY_CELLS))  # positions against positions: one step
        if step > 1:
            st.caption(f"Every {_nth(step)} of the {len(table)} positions drawn (at most about "
                       f"{SIMILARITY_CELLS:,} cells).")
        plots.plotly(st, pe.pe_similarity(table[::step], step=step), figures.plotly_config("pe-similarity"),
                        "pe_sim")
        st.caption(described.SIMILARITY)
    with b:
        own = probes.model_pe(tr)
        _, steps = thinned(own, "The model's table")
        chart = described.model_table(tr, steps=steps)
        plots.plotly(st, chart.figure, figures.plotly_config(chart.name), "pe_model")
        st.caption(chart.caption, help=described.MODEL_TABLE_HELP)
    if result is not None:
        chart = described.sizes(tr, result, ctx.model.vocab_norms())
        plots.chart(chart.figure, chart.name, "pe_norms")
        st.caption(chart.caption)
    else:
        st.info("Translate a sentence to compare its token embeddings with the positional codes.")
