"""Lines: BertViz-style token-to-token lines for one layer, one colour per head."""

from __future__ import annotations

import streamlit as st

from ..drawing import figures
from ..page import controls, plots
from ..page.params import Param, float_in, int_in, int_list, join
from ..page.state import ViewContext
from ..parts import lines as described  # this view's description (the offline page's too)

LINES_HEADS, LINES_FOCUS, LINES_THRESHOLD, LINES_FOCUS_KIND = ("lines_heads", "lines_focus", "lines_threshold",
                                                               "_lines_focus_kind")
PARAMS = (controls.ATT_PARAM, controls.LAYER_PARAM, Param("lh", LINES_HEADS, int_list(1, 128), dump=join),
          Param("lf", LINES_FOCUS, lambda v: "all" if v == "all" else int_in(1, 10_000)(v), "all"),
          Param("lt", LINES_THRESHOLD, float_in(0.0, 0.5), 0.05, lambda v: f"{float(v):g}"))


def render(ctx: ViewContext) -> None:
    """Heads, one query's focus and a threshold over the lines figure."""
    result, n_heads = ctx.result, ctx.tr.config.n_heads
    ss = st.session_state
    st.caption("Token-to-token lines for one layer, one colour per head (like BertViz's head view): queries on the "
               "left, keys on the right; stronger weights draw darker, thicker lines. Hover a token to see where "
               "each head sends it; click a head in the legend to hide it.")
    kind = controls.kind_control(with_scale=False)
    layer, _ = controls.layer_head_controls(ctx.tr, kind, with_head=False)
    attn = result.attention(kind)[layer - 1]
    queries, keys = result.axes(kind)
    c1, c2, c3 = st.columns([2, 2, 1])
    all_heads = list(range(1, n_heads + 1))
    controls.keep_if(LINES_HEADS, set(ss.get(LINES_HEADS) or []) <= set(all_heads))
    ss.setdefault(LINES_HEADS, all_heads)
    heads = c1.multiselect("Heads", all_heads, key=LINES_HEADS, persist_state="session")
    # positions count from 1; switching type never shows another type's token under an old position
    focus_options = ["all"] + list(range(1, len(queries) + 1))
    previous = ss.get(LINES_FOCUS_KIND)
    if previous is not None and previous != kind:
        ss.pop(LINES_FOCUS, None)
    ss[LINES_FOCUS_KIND] = kind
    side = described.HEADINGS[kind][0].split(" ")[0]
    focus = controls.choose(c2.selectbox, f"Only the lines of one {side} piece (query)", focus_options, LINES_FOCUS,
                            "all",
                            format_func=lambda i: "every query" if i == "all" else f"{i}: {queries[i - 1]}")
    ss.setdefault(LINES_THRESHOLD, 0.05)
    threshold = c3.slider("Hide weights below", 0.0, 0.5, step=0.01, key=LINES_THRESHOLD, persist_state="session")
    row = None if focus == "all" else int(focus) - 1
    fig = described.chart(result, kind, layer, heads=[h - 1 for h in heads], focus=row, threshold=threshold).figure
    shown = attn[[h - 1 for h in heads]] if heads else attn[:0]
    if shown.size and (shown if row is None else shown[:, row]).max() < threshold:
        st.info(f"No weight in this selection reaches {threshold:.3f}; lower 'Hide weights below' to see lines "
                "(a head that spreads its attention evenly draws only faint ones).", icon=":material/tune:")
    plots.plotly(st, fig, figures.plotly_config(f"{kind}-L{layer}-lines"), "lines_chart")
