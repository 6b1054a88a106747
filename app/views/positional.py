"""Positional encoding: the sinusoidal table, its waves, similarity between positions, the model's own table."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .. import controls, figures, probes
from ..figures import wave_dims
from ..params import Param, int_in, int_list, join
from ..state import ViewContext

PARAMS = (Param("d", "pe_d", int_in(8, 1024)), Param("n", "pe_len", int_in(8, 512)),
          Param("dims", "pe_dims", int_list(0, 1023), dump=join))


def render(ctx: ViewContext) -> None:
    """The sinusoidal positional encoding: table, waves, similarity, the model's table, sizes."""
    tr, result = ctx.tr, ctx.result
    ss = st.session_state
    st.caption("The sinusoidal positional encoding added to every token embedding: PE[pos, 2i] = sin(pos / "
               "10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)). Each pair of dimensions is a wave; "
               "wavelengths grow geometrically from 2π to 10000·2π, so nearby positions get similar codes.")
    c1, c2 = st.columns(2)
    controls.keep_if("pe_d", ss.get("pe_d", 8) % 8 == 0)  # the slider moves in steps of 8
    ss.setdefault("pe_d", min(max(8, int(tr.config.d_model) // 8 * 8), 1024))
    ss.setdefault("pe_len", int(min(100, max(tr.config.max_len, 8))))
    d_model = c1.slider("d_model", 8, 1024, step=8, key="pe_d")
    length = c2.slider("Positions", 8, 512, step=1, key="pe_len")
    table = probes.positional_table(length, d_model)
    a, b = st.columns(2)
    a.plotly_chart(figures.pe_heatmap(table), config=figures.plotly_config("positional-encoding"), key="pe_heat")
    with b:
        if ss.get("_pe_dims_for") not in (None, (d_model, length)):  # new table: its own waves
            ss.pop("pe_dims", None)
        ss["_pe_dims_for"] = (d_model, length)
        controls.keep_if("pe_dims", set(ss.get("pe_dims") or []) <= set(range(d_model)))
        ss.setdefault("pe_dims", wave_dims(d_model, length))
        dims = st.multiselect("Dimensions to draw", list(range(d_model)), key="pe_dims")
        st.plotly_chart(figures.pe_waves(table, dims), config=figures.plotly_config("pe-waves"), key="pe_waves")
    a, b = st.columns(2)
    with a:
        st.plotly_chart(figures.pe_similarity(table), config=figures.plotly_config("pe-similarity"), key="pe_sim")
        st.caption("Cosine similarity between the codes of two positions: it depends only on their distance "
                   "(the bands run parallel to the diagonal), which lets attention use relative positions.")
    with b:
        own = probes.model_pe(tr)
        diff = float(np.abs(own - probes.positional_table(*own.shape)).max())
        st.plotly_chart(figures.pe_heatmap(own, title=f"The model's own table ({own.shape[0]} × {own.shape[1]})"),
                        config=figures.plotly_config("model-pe"), key="pe_model")
        st.caption(f"The table the model itself adds to its embeddings (stored with the model, not learned); it "
                   f"differs from the formula above by {diff:.1e} at most.",
                   help="tr.model.pe: a buffer of the module (saved and moved with it, never trained).")
    if result is not None:
        norms = probes.embedding_norms(tr, result.source_ids)
        own = probes.model_pe(tr)
        pe_norms = np.linalg.norm(own[: len(result.source_ids)], axis=1)
        vocab = ctx.model.vocab_norms()
        controls.chart(figures.norms_figure(result.source_tokens, norms, pe_norms, vocab), "pe-vs-embeddings",
                       "pe_norms")
        st.caption(f"Every positional code has length √(d_model/2) = {np.sqrt(tr.config.d_model / 2):.2f}. The "
                   "embeddings are multiplied by √d_model before the code is added, so a token's identity is not "
                   "drowned by its position.")
    else:
        st.info("Translate a sentence to compare its token embeddings with the positional codes.")
