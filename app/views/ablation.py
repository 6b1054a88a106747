"""Ablation: switch heads off, translate again, compare."""

from __future__ import annotations

import numpy as np
import streamlit as st

from transformer.interpret.heads import KINDS, ranked_heads

from ..analysis import inference
from ..analysis.inference import HeadKey
from ..drawing import figures
from ..drawing.analysis import AXIS_TITLES, KIND_NAMES, first_numbers
from ..limits import ledger, work
from ..models.catalog import load_heads
from ..page import controls, plots
from ..page.controls import head_label, head_ref, parse_head_ref
from ..page.params import FROM_LINK, Param
from ..page.state import ViewContext

ABLATE = "ablate"
ABLATION = "ablation"  # (text, settings, heads) of the last ablation run
ABLATION_OPENED = "_ablation_opened"  # the heads the comparison last opened on (``open_where_off``)


def _heads(text: str) -> list[str] | None:
    """``"cross.1.2,encoder.2.1"`` -> the picker's labels; None when any part is malformed."""
    heads = [parse_head_ref(part) for part in text.split(",")[:512] if part]
    return [head_label(h) for h in sorted(set(heads))] if heads and None not in heads else None


PARAMS = (Param("off", ABLATE, _heads, dump=lambda labels: ",".join(head_ref(controls.parse_head_label(x))
                                                                   for x in labels)),
          controls.ATT_PARAM, controls.SCALE_PARAM, controls.LAYER_PARAM)


def live_mean(attn_layer: np.ndarray, kind: str, layer: int, off: tuple[HeadKey, ...]) -> tuple[np.ndarray, int]:
    """Mean over the heads of one layer ``(H, Q, K)`` that are still on (0-based ``layer``), and how many were off.
    All heads off: zeros."""
    dead = {h for k, lay, h in off if k == kind and lay == layer}
    live = [h for h in range(attn_layer.shape[0]) if h not in dead]
    if not live:
        return np.zeros_like(attn_layer[0]), len(dead)
    return attn_layer[live].mean(axis=0), len(dead)


def open_where_off(off: tuple[HeadKey, ...]) -> None:
    """When the heads switched off change: the comparison's attention type and layer become the first (encoder,
    decoder self, cross; then by layer) with a head off, unless the shown one has one off or a link named them."""
    ss = st.session_state
    if ss.get(ABLATION_OPENED) == off:
        return
    ss[ABLATION_OPENED] = off
    shown = (ss.get(controls.ATT), ss.get(controls.LAYER))
    places = sorted({(kind, layer + 1) for kind, layer, _ in off}, key=lambda p: (KINDS.index(p[0]), p[1]))
    named = {controls.ATT, controls.LAYER} & set(ss.get(FROM_LINK, {}))  # a link's att= or layer=, still unused
    if named or not places or shown in places:
        return
    ss[controls.ATT], ss[controls.LAYER] = places[0]


def render(ctx: ViewContext) -> None:
    """Head picker, the run button, both translations and both heatmaps on one colour scale."""
    result, sub, tr = ctx.result, ctx.submitted, ctx.tr
    st.caption("Head ablation: switch heads off (their output is multiplied by 0; their weights are still "
               "computed but no longer reach the rest of the network), translate again, and compare.")
    labels = {head_label(h): h for h in inference.all_heads(tr)}
    controls.keep_if(ABLATE, set(st.session_state.get(ABLATE) or []) <= set(labels))
    from_link = st.session_state.get(FROM_LINK, {}).pop(ABLATE, None) is not None
    data = load_heads(tr.path)
    if data is not None:  # the importance of python -m transformer.heads picks the heads to switch off
        order = [head_label(tuple(h)) for h in ranked_heads(data["importance"], KINDS)]

        def least_important() -> None:
            st.session_state[ABLATE] = [h for h in order[: st.session_state["ablate_n"]] if h in labels]

        a, b = st.columns([1, 3], vertical_alignment="bottom")
        a.number_input("N", 1, len(order), min(4, len(order)), key="ablate_n")
        b.button("Switch off the N least important heads", key="ablate_least", on_click=least_important,
                 help="Least important over the test set, as the view Heads across the test set ranks them (the "
                      "checkpoint's heads.json).")
    c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
    chosen = c1.multiselect("Heads to switch off", list(labels), key=ABLATE, placeholder="e.g. Cross · L1 · H2",
                            persist_state="session")
    heads = tuple(sorted(labels[c] for c in chosen))
    if c2.button("Translate without them", key="ablate_run", type="primary", width="stretch"):
        if not chosen:
            st.warning("Choose at least one head to switch off.")
        st.session_state[ABLATION] = (result.text, sub.settings, heads)
    last = st.session_state.get(ABLATION)
    if heads and (from_link or last is not None):  # a link opens the comparison at once; once it shows, it
        last = (result.text, sub.settings, heads)  # follows every change of the heads, the text or the settings
        st.session_state[ABLATION] = last
    if not last or not heads:
        st.info("Choose heads and press the button; the new translation appears beside the original (and then "
                "follows every change).")
        return
    off = last[2]
    open_where_off(off)
    ids = (tuple(result.source_ids), tuple(result.target_ids))
    forced_cost = 2 * work.forced_work(ctx.tr, *map(len, ids))  # the two log-probabilities below
    ablated = ctx.model.analysis(result.text, result.settings, off,  # as the page ran
                                 max(0.0, ledger.left() - forced_cost))
    forced = ctx.model.forced_logprob(*ids, off)
    base = ctx.model.forced_logprob(*ids, ())
    st.caption(f"Switched off: {', '.join(head_label(h) for h in off)}")
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
    kind = controls.kind_control()
    layer, _ = controls.layer_head_controls(tr, kind, with_head=False)
    qt, kt = AXIS_TITLES[kind]
    original = result.attention(kind)[layer - 1].mean(axis=0)
    remaining, n_off = live_mean(ablated.attention(kind)[layer - 1], kind, layer - 1, off)
    zmin, zmax = controls.colour_range(original, remaining)  # one colour scale for both
    n_heads = tr.config.n_heads
    right = (f"heads off: {KIND_NAMES[kind]} · layer {layer} · mean over the {n_heads - n_off} heads still on"
             if n_off else f"heads off: {KIND_NAMES[kind]} · layer {layer} · mean over heads (none off here)")
    c1, c2 = st.columns(2)
    for col, res, weights, title, name in (
            (c1, result, original, f"original: {KIND_NAMES[kind]} · layer {layer} · mean over heads", "original"),
            (c2, ablated, remaining, right, "heads_off")):
        queries, keys = res.axes(kind)
        qf, kf = first_numbers(kind)
        fig = figures.attention_heatmap(weights, queries, keys, zmin=zmin, zmax=zmax, title=title,
                                        query_title=qt, key_title=kt, query_first=qf, key_first=kf)
        plots.chart(fig, f"ablation-{name.replace('_', '-')}", f"ablation_{name}_chart", col)
    if n_off == n_heads:
        st.caption("Every head of this layer is off: nothing of this layer's attention reaches the network.")
