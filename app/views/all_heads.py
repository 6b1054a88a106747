"""All heads: every layer x head of one type on one colour scale; a click opens one large."""

from __future__ import annotations

import streamlit as st

from .. import cached, controls, figures, grid, state
from ..state import ViewContext


def render(ctx: ViewContext) -> None:
    """The grid, the pills that open a head, and the opened head."""
    result = ctx.result
    st.caption("Every head of one attention type at a glance, on one shared colour scale, so strong and diffuse "
               "heads compare fairly. Click a head in the grid (or pick it below) to open it large.")
    kind = controls.kind_control()
    measure = controls.measure_control()
    attn = result.attention(kind) if measure == "weights" else \
        cached.get_beyond("norms", ctx.checkpoint, ctx.device, result)[kind]
    queries, keys = result.axes(kind)
    options = [f"L{layer} · H{h}" for layer in range(1, attn.shape[0] + 1) for h in range(1, attn.shape[1] + 1)]
    if st.session_state.get(state.GRID_PICK) not in options:
        st.session_state.pop(state.GRID_PICK, None)
    pick = st.session_state.get(state.GRID_PICK)
    highlight = None
    if pick in options:
        index = options.index(pick)
        highlight = (index // attn.shape[1], index % attn.shape[1])

    def open_clicked_head() -> None:  # a click on the grid opens that head, as the pills below do
        picked = grid.grid_pick((st.session_state.get("grid_chart") or {}).get("selection"))
        label = picked and f"L{picked[0]} · H{picked[1]}"
        if label in options:
            st.session_state[state.GRID_PICK] = label

    zrange = controls.colour_range(attn) if measure == "weights" else (0.0, max(float(attn.max()), 1e-9))
    st.plotly_chart(grid.head_grid(attn, queries, keys, kind, highlight=highlight, zrange=zrange),
                    config=figures.plotly_config(f"{kind}-all-heads"), key="grid_chart", on_select=open_clicked_head,
                    selection_mode="points")
    if measure == "norms":
        st.caption(controls.NORMS_NOTE)
    if controls.has_repeats(queries, keys):
        st.caption(controls.REPEATS)
    pick = st.pills("Open a head large", options, key=state.GRID_PICK, persist_state="session")
    if pick:
        layer, head = (int(x[1:]) for x in pick.split(" · "))
        controls.draw_heatmap(result, kind, layer, str(head), key="grid_large_chart",
                              attn=None if measure == "weights" else attn,
                              value_name="weight" if measure == "weights" else "norm")
