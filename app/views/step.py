"""Step through: the top-k candidates of one output step and where its cross-attention looked."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .. import controls, figures
from ..params import Param, int_in
from ..state import ViewContext

PARAMS = (Param("step", "step", int_in(1, 1000), 1), Param("k", "topk", int_in(3, 100), 8),
          Param("sl", "step_layer", int_in(1, 64)))


def render(ctx: ViewContext) -> None:
    """Step slider, candidates bar chart and the step's cross-attention per head."""
    result = ctx.result
    st.caption("Step-through decoding: at each output step, the model's top candidates for the next piece with "
               "their probabilities (given the pieces before it), and where that step's cross-attention looked.")
    steps = len(result.target_tokens)
    c1, c2, c3 = st.columns([3, 1, 1])
    if steps > 1:
        controls.keep_if("step", 1 <= int(st.session_state.get("step", 1)) <= steps)
        st.session_state.setdefault("step", 1)
        step = c1.slider("Output step", 1, steps, key="step", persist_state="session")
    else:
        step = 1
        c1.caption("The output has a single step.")
    most = result.topk_probs.shape[1]
    controls.keep_if("topk", 3 <= int(st.session_state.get("topk", 3)) <= most)
    st.session_state.setdefault("topk", min(8, most))
    k = c2.slider("Candidates", 3, most, key="topk")
    layers = list(range(1, ctx.tr.config.n_decoder_layers + 1))
    layer = controls.choose(c3.selectbox, "Cross-attention layer", layers, "step_layer", layers[-1])
    t = step - 1
    produced = result.target_tokens[t]
    st.caption("Output so far (the piece of this step last)")
    st.code("  ".join(result.target_tokens[:t]) + ("  " if t else "") + f"[{produced}]", language=None,
            wrap_lines=True)
    candidates = result.topk_tokens[t][:k]
    probs = result.topk_probs[t][:k]
    ids = list(result.topk_ids[t][:k])
    chosen = ids.index(result.target_ids[t]) if result.target_ids[t] in ids else None
    if chosen is None:  # the kept piece is outside the top k: show it as an extra bar
        candidates = [*candidates, produced]
        probs = np.append(probs, result.chosen_probs[t])
        chosen = len(candidates) - 1
    a, b = st.columns([2, 3]) if len(result.source_tokens) <= 40 else (st.container(), st.container())
    with a:
        controls.chart(figures.topk_figure(candidates, probs, chosen), f"step{step}-topk", "topk_chart")
        st.caption(f"Kept piece: p = {result.chosen_probs[t]:.3f}. Beam search can keep a piece that is not the "
                   "most probable at its own step, when it leads to a better whole sentence.")
    with b:
        cross = result.cross[layer - 1][:, t, :]  # (H, S)
        controls.chart(figures.step_cross_figure(cross, result.source_tokens, produced,
                                                  zrange=controls.colour_range(cross, cross.mean(axis=0))),
                       f"step{step}-cross", "step_cross_chart")
