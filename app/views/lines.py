"""Lines: BertViz-style token-to-token lines for one layer, one colour per head."""

from __future__ import annotations

import streamlit as st

from .. import controls, figures, state
from ..analysis import KIND_NAMES
from ..state import ViewContext

HEADINGS = {"encoder": ("source (query)", "source (key)"), "decoder": ("output (query)", "decoder input (key)"),
            "cross": ("output (query)", "source (key)")}


def render(ctx: ViewContext) -> None:
    """Heads, one query's focus and a threshold over the lines figure."""
    result, n_heads = ctx.result, ctx.tr.config.n_heads
    st.caption("Token-to-token lines for one layer, one colour per head (like BertViz's head view): queries on the "
               "left, keys on the right; stronger weights draw darker, thicker lines. Hover a token to see where "
               "each head sends it; click a head in the legend to hide it.")
    kind = controls.kind_control(with_scale=False)
    layer, _ = controls.layer_head_controls(ctx.tr, kind, with_head=False)
    attn = result.attention(kind)[layer - 1]
    queries, keys = result.axes(kind)
    c1, c2, c3 = st.columns([2, 2, 1])
    all_heads = list(range(1, n_heads + 1))
    if not set(st.session_state.get(state.LINES_HEADS) or []) <= set(all_heads):
        st.session_state.pop(state.LINES_HEADS)
    st.session_state.setdefault(state.LINES_HEADS, all_heads)
    heads = c1.multiselect("Heads", all_heads, key=state.LINES_HEADS, persist_state="session")
    # the focus options carry the type: switching type never shows another type's token under an old index
    focus_options = ["all"] + list(range(len(queries)))
    previous = st.session_state.get(state.LINES_FOCUS_KIND)
    if previous is not None and previous != kind:
        st.session_state.pop(state.LINES_FOCUS, None)
    st.session_state[state.LINES_FOCUS_KIND] = kind
    focus = controls.choose(c2.selectbox, f"Only the lines of query ({HEADINGS[kind][0]})", focus_options,
                            state.LINES_FOCUS, "all",
                            format_func=lambda i: "every query" if i == "all" else f"{i}: {queries[i]}")
    st.session_state.setdefault(state.LINES_THRESHOLD, state.DEFAULTS[state.LINES_THRESHOLD])
    threshold = c3.slider("Hide weights below", 0.0, 0.5, step=0.01, key=state.LINES_THRESHOLD,
                          persist_state="session")
    qt, kt = HEADINGS[kind]
    fig = figures.attention_lines(attn, queries, keys, heads=[h - 1 for h in heads],
                                  focus=None if focus == "all" else int(focus), threshold=threshold,
                                  title=f"{KIND_NAMES[kind]} · layer {layer}", query_title=qt, key_title=kt)
    shown = attn[[h - 1 for h in heads]] if heads else attn[:0]
    if shown.size and (shown if focus == "all" else shown[:, int(focus)]).max() < threshold:
        st.info(f"No weight in this selection reaches {threshold:.2f}; lower 'Hide weights below' to see lines "
                "(a head that spreads its attention evenly draws only faint ones).", icon=":material/tune:")
    st.plotly_chart(fig, config=figures.plotly_config(f"{kind}-L{layer}-lines"), key="lines_chart")
