"""Masks: the padding and causal masks of this sentence, and how they combine."""

from __future__ import annotations

import streamlit as st

from .. import figures, heatmaps, probes
from ..analysis import masked_weight
from ..params import Param, int_in
from ..state import ViewContext

MOST = 60  # four masks of at most 60 x 60 cells each (what the browser must draw stays bounded)
WINDOW = heatmaps.span_param("mw", "masks_window", size=MOST)  # a longer sentence: a window of its positions
PARAMS = (Param("ps", "pad_src", int_in(0, 8), 2), Param("pt", "pad_tgt", int_in(0, 8), 2), WINDOW)


def render(ctx: ViewContext) -> None:
    """Padding and causal masks of this sentence, and how they combine."""
    tr, result = ctx.tr, ctx.result
    st.caption("The masks decide which keys a query may see: a blocked key's score is set to −∞ before the "
               "softmax, so its weight is exactly 0. Add padding to see the sentence as it sits in a batch next to "
               "longer ones.")
    c1, c2 = st.columns(2)
    for param in PARAMS[:2]:
        st.session_state.setdefault(param.key, param.default)
    pad_src = c1.slider("Padding after the source", 0, 8, key="pad_src")
    pad_tgt = c2.slider("Padding after the decoder input", 0, 8, key="pad_tgt")
    masks = probes.mask_arrays(tr, result, pad_src, pad_tgt)
    src = result.source_tokens + ["<pad>"] * pad_src
    dec = result.decoder_input_tokens + ["<pad>"] * pad_tgt
    p0, p1 = heatmaps.span_slider(st, "Positions (a window of a long sentence; both axes of each mask)",
                                  max(len(src), len(dec)), WINDOW, most=MOST)
    src, dec = src[p0:p1], dec[p0:p1]
    panels = [
        ("encoder", "Encoder self-attention: padding mask", src, src,
         "Every source piece may look at every real source piece, in both directions. Only the <pad> columns are "
         "blocked: padding_mask(src) is True where the key is a real token, broadcast over all queries."),
        ("causal", "Causal mask", dec, dec,
         "Lower triangle: decoder position i sees positions 0…i only, so training on whole sentences never lets "
         "a step peek at the piece it must predict."),
        ("decoder", "Decoder self-attention: padding AND causal", dec, dec,
         "What the decoder really uses: the causal triangle with the <pad> columns removed (padding_mask(tgt) & "
         "causal_mask(T))."),
        ("cross", "Cross-attention: source padding", dec, src,
         "Each decoder position may read every real source piece; only the source <pad> columns are blocked. No "
         "causal part: the whole source is known before decoding starts."),
    ]
    per_row = 1 if max(len(src), len(dec)) > 40 else 2  # long sentences: one mask per row, to read the tokens
    for i in range(0, 4, per_row):
        cols = st.columns(per_row)
        for col, (key, title, queries, keys, text) in zip(cols, panels[i:i + per_row]):
            with col:
                qtitle = "source (query)" if key == "encoder" else "decoder input (query)"
                ktitle = "source (key)" if key in ("encoder", "cross") else "decoder input (key)"
                firsts = (1 if key == "encoder" else 0, 1 if key in ("encoder", "cross") else 0)  # <s> is 0
                shown = masks[key][p0:p1, p0:p1]
                if not shown.size:  # a window past the end of the shorter side
                    st.caption(f"{title}: no positions in this window.")
                    continue
                st.plotly_chart(figures.mask_figure(shown, queries, keys, title, qtitle, ktitle,
                                                    *(first + p0 for first in firsts)),
                                config=figures.plotly_config(f"mask-{key}"), key=f"mask_{key}_chart")
                st.caption(text)
    unpadded = probes.mask_arrays(tr, result, 0, 0)
    leak = max(masked_weight(result.decoder, unpadded["decoder"]), masked_weight(result.cross, unpadded["cross"]),
               masked_weight(result.encoder, unpadded["encoder"]))
    st.success(f"Check on this sentence's real attention: the largest weight on any blocked position is {leak:g} "
               "(decoder self-attention never looks ahead).", icon=":material/check_circle:")
