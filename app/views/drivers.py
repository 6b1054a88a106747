"""What drives each word: attribution of each output piece to the source and to the earlier output."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from .. import controls, figures, heatmaps
from ..params import Param, one_of
from ..state import ViewContext

METHODS = {"integrated_gradients": "Integrated gradients (32 steps)", "input_x_gradient": "Input × gradient"}
SIDE_BY_SIDE_PX = 420  # the widest two maps may need to share a row (a laptop's page holds two of this)
PARAMS = (Param("method", "drivers_method", one_of(*METHODS)), *heatmaps.window_params("drivers_chart"))


def render(ctx: ViewContext) -> None:
    """Method picker, the two attribution maps, the source/target share per step and the head agreement."""
    result = ctx.result
    st.caption("For each output piece, how much each source piece and each earlier output piece pushed the model "
               f"towards it: {figures.DIVERGING_WORDS}. Unlike attention weights, these follow the whole network.",
               help="Gradient attributions over the token embeddings, computed with the captum library: input × "
                    "gradient, or integrated gradients from an all-zero embedding; each number is a piece's share "
                    "of the output piece's log-probability.")
    large = (controls.n_parameters(ctx.tr) > controls.LARGE_MODEL or ctx.tr.config.tgt_vocab_size >
             controls.LARGE_VOCABULARY) and ctx.tr.device.type == "cpu"
    method = controls.choose(st.segmented_control, "Method", list(METHODS), "drivers_method",
                             "input_x_gradient" if large else "integrated_gradients", format_func=METHODS.get,
                             required=True)
    if large:
        vocab = ctx.tr.config.tgt_vocab_size
        st.caption(f"This model has {controls.n_parameters(ctx.tr) / 1e6:.0f}M parameters"
                   + (f" and a {vocab:,}-piece vocabulary" if vocab > controls.LARGE_VOCABULARY else "")
                   + ": integrated gradients "
                   "run 32 passes through it for every output piece, a minute or more on a CPU; input × gradient "
                   "is one pass (seconds).")
    data = controls.attributions(ctx, method)
    src, tgt = data["source"], data["target"]  # (T', S), (T', T): the output pieces of the span attributed
    first, end = (int(x) for x in data.get("span", (0, len(src))))
    outputs = result.target_tokens[first:end]
    bound = float(max(abs(src).max(), abs(tgt).max(), 1e-9))
    s_share = abs(src).sum(1) / (abs(src).sum(1) + abs(tgt).sum(1) + 1e-12)  # (T',)
    # a long sentence: a window of the output pieces (rows of both maps and bars of the share) and of the source
    # pieces; the decoder-input map shows the inputs of the same steps (input t fed output step t)
    q0, q1, k0, k1 = heatmaps.window(len(outputs), len(result.source_tokens), "drivers_chart",
                                     ("Output pieces (rows)", "Source pieces (columns)"))
    d0, d1 = first + q0, min(first + q1, len(result.decoder_input_tokens))
    to_source = figures.attention_heatmap(src[q0:q1, k0:k1], outputs[q0:q1], result.source_tokens[k0:k1],
                                          title="Attribution to the source", query_title="output piece",
                                          key_title="source piece", zmin=-bound, zmax=bound,
                                          colorscale=figures.DIVERGING, value_name="attribution",
                                          query_offset=first + q0, key_offset=k0)
    to_input = figures.attention_heatmap(tgt[q0:q1, d0:d1], outputs[q0:q1], result.decoder_input_tokens[d0:d1],
                                         title="Attribution to the decoder input", query_title="output piece",
                                         key_title="decoder input", zmin=-bound, zmax=bound,
                                         colorscale=figures.DIVERGING, value_name="attribution",
                                         query_offset=first + q0, key_offset=d0, key_first=0)
    # side by side while both fit half a laptop's page; else each map gets the whole width, so its pieces can be read
    long = max(figures.min_width(to_source), figures.min_width(to_input)) > SIDE_BY_SIDE_PX
    c1, c2 = (st.container(), st.container()) if long else st.columns([3, 2])
    controls.chart(to_source, "attribution-source", "drivers_src", c1)
    controls.chart(to_input, "attribution-target", "drivers_tgt", c2)
    if (q0, q1) != (0, len(outputs)):
        st.caption(f"The decoder-input map shows the inputs of the output steps shown ({d0}–{d1 - 1}); an output "
                   "step may also draw on earlier inputs, outside the window (its share below counts them all).")
    fig = figures.attribution_share(s_share[q0:q1], outputs[q0:q1], first + q0)
    controls.chart(fig, "attribution-share", "drivers_share")
    agreement = data["agreement"]  # (L, H)
    frame = pd.DataFrame([{"layer": i + 1, "head": h + 1, "rank correlation with the attribution": agreement[i, h]}
                          for i in range(agreement.shape[0]) for h in range(agreement.shape[1])])
    st.caption("How well each cross-attention head's weights agree with the attribution to the source: 1 = the "
               "head ranks the source pieces exactly as the attribution does, 0 = no relation, −1 = the reverse "
               "(mean over the output steps):", help="Spearman rank correlation over the source pieces.")
    st.dataframe(frame, hide_index=True, width="stretch",
                 column_config={"rank correlation with the attribution": st.column_config.NumberColumn(format="%.3f")})
