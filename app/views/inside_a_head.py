"""Inside a head: how one head turns one query into its output, with the real numbers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from ..drawing import figures, layout
from ..drawing.analysis import KIND_NAMES, first_numbers
from ..page import controls, plots
from ..page.params import Param, int_in
from ..page.state import ViewContext

PARAMS = (controls.ATT_PARAM, controls.LAYER_PARAM, Param("head", controls.HEAD, controls.HEAD_PARAM.parse, "1"),
          Param("q", "inside_query", int_in(1, 10_000), 1))


def formulas(*parts: str) -> None:
    """Formulas (LaTeX) in one line that wraps between them on a narrow screen (each drawn as a display formula, in
    the text's flow): never a box to scroll sideways, which a keyboard could not reach."""
    # each formula one group (KaTeX breaks a line at a top-level "=", never inside a group); the gap ends a line
    st.markdown(" ".join(f"${{\\displaystyle {part}}}\\qquad$" for part in parts))


def render(ctx: ViewContext) -> None:
    """Pickers, the formula with numbers, the per-key table and the weights."""
    result, tr = ctx.result, ctx.tr
    st.caption("Scaled dot-product attention for one head and one query, step by step: the query vector q, each "
               "key's score q·k, the scaling by √d_head, the mask, the softmax, and the weighted sum of the values "
               "— every number is the model's own.")
    cols = st.columns([3.3, 0.9, 1.1, 1.9])
    kind = controls.kind_control(with_scale=False, columns=(cols[0], None))
    layers = list(range(1, controls.n_layers(tr, kind) + 1))
    layer = controls.choose(cols[1].selectbox, "Layer", layers, controls.LAYER, layers[-1])
    head = controls.choose(cols[2].selectbox, "Head", [str(h) for h in range(1, tr.config.n_heads + 1)],
                           controls.HEAD, "1", format_func=lambda h: f"head {h}",
                           help="One head at a time (the mean over heads has no single query, key and value).")
    queries, keys = result.axes(kind)
    position = controls.choose(cols[3].selectbox, "Query", list(range(1, len(queries) + 1)), "inside_query", 1,
                               format_func=lambda i: f"{i}: {queries[i - 1]}")
    query = position - 1
    hc = ctx.model.beyond("inside_head", result, kind, layer - 1, int(head) - 1, query)
    d = len(hc["q"])
    best = int(np.argmax(hc["weights"]))
    st.markdown(f"**{KIND_NAMES[kind]}, layer {layer}, head {head}, query {position} "
                f"({controls.md_escape(queries[query])})**, d_head = {d}")
    formulas(r"\alpha_j = \mathrm{softmax}_j\Big(\frac{q \cdot k_j}{\sqrt{d_{head}}}\Big),",
             r"o = \sum_j \alpha_j v_j,", r"\text{out}_h = o\,W_O^{h\top}")
    scaled_best = float(hc["scaled"][best])
    formulas(rf"q\cdot k_{{{best + 1}}} = {float(hc['scores'][best]):.3f},",
             rf"\frac{{{float(hc['scores'][best]):.3f}}}{{\sqrt{{{d}}}}} = {scaled_best:.3f},",
             rf"\alpha_{{{best + 1}}} = \frac{{e^{{{scaled_best:.3f}}}}}{{\sum_j e^{{\ldots}}}} = "
             rf"{float(hc['weights'][best]):.3f}")
    key_first = first_numbers(kind)[1]  # the decoder input counts from 0 (<s>), as everywhere
    table = pd.DataFrame({"key": [f"{j}: {t}" for j, t in enumerate(keys, key_first)], "q·k": hc["scores"],
                          f"÷ √{d} = {math.sqrt(d):.2f}": hc["scaled"], "allowed": np.asarray(hc["mask"], dtype=bool),
                          "softmax weight": hc["weights"], "‖v_j‖": np.linalg.norm(hc["v"], axis=1)})
    c1, c2 = st.columns([3, 2])
    c1.dataframe(table, hide_index=True, width="stretch", height=min(420, 40 + 35 * len(keys)),
                 column_config={**{c: st.column_config.NumberColumn(format="%.3f") for c in table.columns[1:]},
                                "allowed": st.column_config.CheckboxColumn(),
                                "softmax weight": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0,
                                                                                  format="%.3f")})
    fig = go.Figure(go.Bar(x=hc["weights"], y=[f"{j}: {figures.escape(t)}" for j, t in enumerate(keys, key_first)],
                           orientation="h", marker_color="#3182bd", hovertemplate="%{y}: %{x:.3f}<extra></extra>"))
    # a row of at least 18 px a key, so that every key is labelled (plotly leaves out labels that would touch) up to
    # 62 keys; a longer sentence's chart stops at 1,200 px and labels every other key or so
    fig.update_layout(height=min(1200, 80 + 18 * len(keys)), margin=dict(l=10, r=10, t=30, b=10), font=layout.FONT,
                      yaxis=dict(autorange="reversed"), xaxis=dict(title=dict(text="weight"), range=[0, 1]),
                      title=dict(text="Softmax weights", x=0.0))
    plots.chart(fig, "inside-head", "inside_head_chart", c2)
    st.caption(f"Blocked keys get −∞ before the softmax, so exactly 0 weight. The weighted sum o has length "
               f"{np.linalg.norm(hc['output']):.3f}; through this head's slice of W_O it adds a vector of length "
               f"{np.linalg.norm(hc['projected']):.3f} to the sub-layer's output (before the other heads, the bias "
               "and the residual connection).")
