"""Source or prefix: how much of each output piece comes from the source and how much from the target prefix
(ALTI+, Ferrando et al. 2022), beside the plain cross-attention, with the checkpoint's hallucination ``flag``
(``transformer.interpret.signals``: the rule in its ``flag.json``, chosen on val)."""

from __future__ import annotations

import streamlit as st

from .. import controls, parts, work
from ..params import Param
from ..state import ViewContext

ALL = parts.source_prefix.ALL
threshold_of = parts.source_prefix.threshold_of


def _layer(value: str) -> str | int | None:
    if value == ALL:
        return ALL
    return int(value) if value.isdigit() and 1 <= int(value) <= 64 else None


PARAMS = (Param("cl", "source_prefix_layer", _layer),)


def render(ctx: ViewContext) -> None:
    """The hallucination notice, the source share per output piece, the full contribution matrix and the
    cross-attention beside it."""
    result = ctx.result
    st.caption(parts.source_prefix.INTRO)
    fits, notices = work.plan_alti(ctx.tr, len(result.source_ids), len(result.target_ids))
    controls.capped(notices)
    if not fits:
        return
    data = ctx.model.beyond("alti", result, work.work_bytes())
    share = data["source_share"]  # (T,)
    _, section = threshold_of(ctx.tr.path)
    note, threshold = parts.source_prefix.notice(ctx.tr, result, share)
    if note.warning:
        st.warning(note.text, icon=":material/report:")
        st.caption("How this rule was chosen", help=parts.source_prefix.FLAG_HELP)
    else:
        st.caption(note.text, help=parts.source_prefix.FLAG_HELP)
    shares, matrix = parts.source_prefix.charts(result, data, threshold)
    controls.chart(shares.figure, shares.name, "source_prefix_share")
    layers = [ALL, *range(1, ctx.tr.config.n_decoder_layers + 1)]
    layer = controls.choose(st.selectbox, "Cross-attention to compare with", layers, "source_prefix_layer",
                            layers[-1], format_func=lambda v: "mean over every layer and head" if v == ALL
                            else f"layer {v}, mean over heads")
    long = len(result.source_tokens) + len(result.decoder_input_tokens) >= 30
    c1, c2 = (st.container(), st.container()) if long else st.columns([3, 2])
    controls.chart(matrix.figure, matrix.name, "source_prefix_matrix", c1)
    cross = parts.source_prefix.cross_chart(result, data, layer, section)
    controls.chart(cross.figure, cross.name, "source_prefix_cross", c2)
    st.caption(cross.caption)
