"""Ablation: switch heads off, translate again, compare."""

from __future__ import annotations

import numpy as np
import streamlit as st

from transformer.heads import KINDS, ranked_heads

from .. import cached, controls, figures, inference, state
from ..analysis import KIND_NAMES
from ..catalog import load_heads
from ..inference import HeadKey
from ..state import ViewContext


def live_mean(attn_layer: np.ndarray, kind: str, layer: int, off: tuple[HeadKey, ...]) -> tuple[np.ndarray, int]:
    """Mean over the heads of one layer ``(H, Q, K)`` that are still on (0-based ``layer``), and how many were off.
    All heads off: zeros."""
    dead = {h for k, lay, h in off if k == kind and lay == layer}
    live = [h for h in range(attn_layer.shape[0]) if h not in dead]
    if not live:
        return np.zeros_like(attn_layer[0]), len(dead)
    return attn_layer[live].mean(axis=0), len(dead)


def render(ctx: ViewContext) -> None:
    """Head picker, the run button, both translations and both heatmaps on one colour scale."""
    result, sub, tr = ctx.result, ctx.submitted, ctx.tr
    st.caption("Head ablation: switch heads off (their output is multiplied by 0; their weights are still "
               "computed but no longer reach the rest of the network), translate again, and compare.")
    labels = {state.head_label(h): h for h in inference.all_heads(tr)}
    if not set(st.session_state.get(state.ABLATE) or []) <= set(labels):
        st.session_state.pop(state.ABLATE)
    data = load_heads(tr.path)
    if data is not None:  # the importance of python -m transformer.heads picks the heads to switch off
        order = [state.head_label(tuple(h)) for h in ranked_heads(data["importance"], KINDS)]

        def least_important() -> None:
            st.session_state[state.ABLATE] = [h for h in order[: st.session_state["ablate_n"]] if h in labels]

        a, b = st.columns([1, 3], vertical_alignment="bottom")
        a.number_input("N", 1, len(order), min(4, len(order)), key="ablate_n")
        b.button("Switch off the N least important heads (heads.json)", key="ablate_least",
                 on_click=least_important)
    c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
    chosen = c1.multiselect("Heads to switch off", list(labels), key=state.ABLATE, placeholder="e.g. Cross · L1 · H2",
                            persist_state="session")
    heads = tuple(sorted(labels[c] for c in chosen))
    if c2.button("Translate without them", key="ablate_run", type="primary", width="stretch"):
        if not chosen:
            st.warning("Choose at least one head to switch off.")
        st.session_state[state.ABLATION] = (result.text, sub.settings, heads)
    last = st.session_state.get(state.ABLATION)
    if heads and last is None and st.session_state.get(state.LAST_URL, {}).get("off"):
        last = (result.text, sub.settings, heads)  # a shared link with heads off opens the comparison at once
        st.session_state[state.ABLATION] = last
    if not last or last[:2] != (result.text, sub.settings) or not last[2]:
        st.info("Choose heads and press the button; the new translation appears beside the original.")
        return
    off = last[2]
    ablated = cached.get_analysis(ctx.checkpoint, ctx.device, result.text, sub.settings, off)
    ids = (tuple(result.source_ids), tuple(result.target_ids))
    forced = cached.get_forced_logprob(ctx.checkpoint, ctx.device, *ids, off)
    base = cached.get_forced_logprob(ctx.checkpoint, ctx.device, *ids, ())
    st.caption(f"Switched off: {', '.join(state.head_label(h) for h in off)}")
    a, b = st.columns(2)
    with a.container(border=True):
        st.caption("Original")
        st.text(result.translation or "(empty)")
        st.metric("Score", f"{result.score:.3f}")
    with b.container(border=True):
        st.caption(f"With {len(off)} head(s) off")
        st.text(ablated.translation or "(empty)")
        st.metric("Score", f"{ablated.score:.3f}", delta=f"{ablated.score - result.score:+.3f}")
    same = "the same" if ablated.translation == result.translation else "a different"
    st.caption(f"The ablated model gives {same} translation. The original translation's log-probability under "
               f"the ablated model: {forced:.3f} (was {base:.3f}, change {forced - base:+.3f}); a big drop means "
               "these heads mattered for it.")
    kind = controls.kind_control(key="ablate_att")
    layers = list(range(1, controls.n_layers(tr, kind) + 1))
    layer = controls.choose(st.selectbox, "Layer to compare", layers, "ablate_layer", layers[-1])
    qt, kt = controls.AXIS_TITLES[kind]
    original = result.attention(kind)[layer - 1].mean(axis=0)
    remaining, n_off = live_mean(ablated.attention(kind)[layer - 1], kind, layer - 1, off)
    zmin, zmax = controls.colour_range(original, remaining)  # one colour scale for both
    n_heads = tr.config.n_heads
    right = (f"heads off: {KIND_NAMES[kind]} · layer {layer} · mean over the {n_heads - n_off} heads still on"
             if n_off else f"heads off: {KIND_NAMES[kind]} · layer {layer} · mean over heads (none off here)")
    c1, c2 = st.columns(2)
    for col, res, weights, title, name in (
            (c1, result, original, f"original: {KIND_NAMES[kind]} · layer {layer} · mean over heads", "original"),
            (c2, ablated, remaining, right, "heads off")):
        queries, keys = res.axes(kind)
        fig = figures.attention_heatmap(weights, queries, keys, zmin=zmin, zmax=zmax, title=title,
                                        query_title=qt, key_title=kt)
        col.plotly_chart(fig, config=figures.plotly_config(f"ablation-{name}"), key=f"ablation_{name}_chart")
    if n_off == n_heads:
        st.caption("Every head of this layer is off: nothing of this layer's attention reaches the network.")
