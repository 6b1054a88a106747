"""Layer by layer: the logit lens over the decoder — when does each output word become the top prediction?"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from .. import controls, figures
from ..state import ViewContext

PARAMS = ()  # no choices of its own


def top_cell(piece: str, probability: float) -> str:
    """A layer's top prediction and what its number is: ``▁Jemand (probability 0.412)``."""
    return f"{piece} (probability {probability:.3f})"


def render(ctx: ViewContext) -> None:
    """A heatmap of the chosen piece's probability per layer and step, and the top prediction per layer."""
    result, tr = ctx.result, ctx.tr
    st.caption("The logit lens: each decoder layer's output sent straight through the final norm and the output "
               "projection, as if it were the last layer. Where does each output piece become the top prediction?")
    data = ctx.model.beyond("lens", result, 5)
    steps = result.target_tokens
    chosen = data["chosen"]  # (L, T)
    layers = [f"layer {i + 1}" for i in range(chosen.shape[0])]
    fig = figures.attention_heatmap(chosen, layers, steps, title="Probability of the piece the model produced",
                                    query_title="decoder layer", key_title="output step (its piece)",
                                    value_name="probability")
    fig.update_layout(height=max(int(fig.layout.height or 0), 340))  # a colour bar one can read, even at 4 layers
    controls.chart(fig, "logit-lens", "lens_chart")
    first_top = [next((i + 1 for i in range(chosen.shape[0]) if data["rank"][i, t] == 0), None)
                 for t in range(len(steps))]
    top = [[top_cell(tr.tokenizer.pieces([int(data['ids'][i, t, 0])])[0], float(data['probs'][i, t, 0]))
            for t in range(len(steps))] for i in range(chosen.shape[0])]
    frame = pd.DataFrame(top, index=layers, columns=[f"{t}: {p}" for t, p in enumerate(steps, 1)]).T
    frame.insert(0, "top from layer", [f"{f}" if f else "never" for f in first_top])
    st.caption("Each layer's top prediction at each output step, with its probability; 'top from layer': the first "
               "layer whose top prediction is the piece the model produced.")
    st.dataframe(frame, width="stretch")
    settled = [f for f in first_top if f]
    st.caption(f"{len(settled)} of {len(steps)} pieces are the top prediction by the last layer"
               + (f"; on average from layer {np.mean(settled):.1f}." if settled else "."))
