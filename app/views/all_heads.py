"""All heads: every layer x head of one type on one colour scale; a click opens one large, beside the grid."""

from __future__ import annotations

import re

import streamlit as st

from ..drawing import figures, grid
from ..page import controls, heatmaps, params, plots
from ..page.params import Param
from ..page.state import ViewContext

GRID_PICK = "grid_pick"
LAYERS = "grid_layers"  # the layers the grid shows, 1-based, both ends included, when not all fit


def _pick(text: str) -> str | None:
    """``"2.3"`` -> ``"L2 · H3"`` (layer 2, head 3); None when malformed."""
    match = re.fullmatch(r"([0-9]{1,2})\.([0-9]{1,3})", text)
    return match and f"L{int(match.group(1))} · H{int(match.group(2))}"


PARAMS = (controls.ATT_PARAM, controls.SCALE_PARAM, controls.MEASURE_PARAM,
          Param("pick", GRID_PICK, _pick, dump=lambda v: re.sub(r"L(\d+) · H(\d+)", r"\1.\2", str(v))),
          *heatmaps.window_params("grid_large_chart"), heatmaps.span_param("layers", LAYERS, size=0))


def layer_window(n_layers: int, fit: int) -> tuple[int, int]:
    """Slice bounds of the layers the grid shows: all of them when ``fit`` (``grid.grid_layers``) covers them, else
    ``fit`` layers at a time, chosen with a range slider, with a caption that says so."""
    if n_layers <= fit:
        controls.keep_if(LAYERS, False)
        return 0, n_layers
    span = st.session_state.get(LAYERS)
    controls.keep_if(LAYERS, isinstance(span, tuple) and len(span) == 2 and 1 <= span[0] <= span[1] <= n_layers)
    st.session_state.get(params.FROM_LINK, {}).pop(LAYERS, None)  # as heatmaps.span_slider: a link's span is used
    st.session_state.setdefault(LAYERS, (1, fit))
    first, last = st.slider("Layers shown", 1, n_layers, key=LAYERS, persist_state="session")
    last = min(last, first + fit - 1)
    st.caption(f"Layers {first}–{last} of {n_layers}: this model has {n_layers} layers of heads, and one grid shows "
               f"at most {grid.GRID_MOST_CELLS:,} weights (what the browser must draw stays bounded); choose the "
               "layers above, or pick any head under the grid.")
    return first - 1, last


def render(ctx: ViewContext) -> None:
    """The grid, the pills that open a head, and the opened head beside the grid (on screen, no scrolling)."""
    result = ctx.result
    st.caption("Every head of one attention type at a glance, on one shared colour scale, so strong and diffuse "
               "heads compare fairly. Click a head in the grid (or pick it below) to open it large beside it.")
    c1, c2 = st.columns([3, 2], vertical_alignment="bottom")
    kind = controls.kind_control(columns=(c1, c2))
    measure = controls.measure_control()
    norms = measure == "norms"
    attn = ctx.model.beyond("norms", result)[kind] if norms else result.attention(kind)
    queries, keys = result.axes(kind)
    options = [f"L{layer} · H{h}" for layer in range(1, attn.shape[0] + 1) for h in range(1, attn.shape[1] + 1)]
    controls.keep_if(GRID_PICK, st.session_state.get(GRID_PICK) in options)
    pick = st.session_state.get(GRID_PICK)
    highlight = None
    if pick in options:
        index = options.index(pick)
        highlight = (index // attn.shape[1], index % attn.shape[1])

    def open_clicked_head() -> None:  # a click on the grid opens that head, as the pills below do
        picked = grid.grid_pick((st.session_state.get("grid_chart") or {}).get("selection"))
        label = picked and f"L{picked[0]} · H{picked[1]}"
        if label in options:
            st.session_state[GRID_PICK] = label

    zrange = (0.0, max(float(attn.max()), 1e-9)) if norms else controls.colour_range(attn)
    # a long sentence: the grid and the opened head show the same window of it (what the browser draws is bounded)
    bounds = q0, q1, k0, k1 = heatmaps.window(len(queries), len(keys), "grid_large_chart")
    # always two columns: a click changes only the right one, so the page keeps its place (a layout that changed
    # with the first click would rebuild the grid and scroll the page back to its top)
    l0, l1 = layer_window(attn.shape[0], grid.grid_layers(attn[:, :, q0:q1, k0:k1].shape))
    if highlight is not None:  # counted from the grid's first row
        highlight = (highlight[0] - l0, highlight[1]) if l0 <= highlight[0] < l1 else None
    left, right = st.columns([1, 1])
    with left:
        plots.plotly(st, grid.head_grid(attn[l0:l1, :, q0:q1, k0:k1], queries[q0:q1], keys[k0:k1], kind,
                                           highlight=highlight, zrange=zrange,
                                           value_name="norm" if norms else "weight", first_layer=l0),
                        figures.plotly_config(f"{kind}-all-heads"), "grid_chart",
                        on_select=open_clicked_head, selection_mode="points")
        if norms:
            st.caption(controls.NORMS_NOTE, help=controls.NORMS_TERMS)
        if controls.has_repeats(queries, keys):
            st.caption(controls.REPEATS_NOTE)
        pick = st.pills("Open a head large", options, key=GRID_PICK, persist_state="session",
                        wrap=True)  # never cut off
    # sticky beside the grid (app.page.frame.PAGE_CSS): in view wherever the visitor clicked, not at the grid's top
    with right.container(key="opened_head"):
        if not pick:
            st.info("Click a head in the grid, or pick it under the grid, to open it here.", icon=":material/apps:")
        else:
            layer, head = (int(x[1:]) for x in pick.split(" · "))
            heatmaps.draw_heatmap(result, kind, layer, str(head), key="grid_large_chart",
                                  attn=attn if norms else None, value_name="norm" if norms else "weight",
                                  bounds=bounds)
