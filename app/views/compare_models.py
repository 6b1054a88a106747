"""Compare models: the same sentence through two checkpoints side by side (translations, scores, one attention
map of each on one colour scale, and each model's head statistics)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import streamlit as st

import transformer
from transformer.interpret.flagging import flag_rule

from ..analysis import cached
from ..analysis.inference import Analysis
from ..drawing import figures
from ..drawing.analysis import AXIS_TITLES, KIND_NAMES, KINDS, first_numbers, head_diagnostics, head_title, one_head
from ..limits import ledger
from ..models import catalog
from ..page import controls, heatmaps, params, plots
from ..page.state import ViewContext
from ..parts import source_or_prefix as described  # Source or prefix's description: the flag's notice
from . import source_or_prefix

COMPARE_WITH, COMPARE_ALPHA = "compare_with", "compare_alpha"
ALPHAS = ["same", "own"]  # both models at the sidebar's α (comparable scores), or each at its own
PARAMS = (params.Param("with", COMPARE_WITH, lambda v: v.strip() if 0 < len(v.strip()) <= 300 else None),
          params.Param("wa", COMPARE_ALPHA, params.one_of(*ALPHAS), "same"),
          controls.ATT_PARAM, controls.SCALE_PARAM, controls.LAYER_PARAM, controls.HEAD_PARAM,
          *heatmaps.window_params("compare_chart"))


def alpha_note(checkpoint: str) -> str:
    """``"name: α 1.4, chosen on val"`` or ``"name: α 0.6, default 0.6 (not tuned)"`` (``catalog.alpha_label``)."""
    return f"{Path(checkpoint).name}: {catalog.alpha_label(checkpoint)}"


def head_summary(result: Analysis) -> pd.DataFrame:
    """Per attention type and layer, the head table's numbers averaged over the heads."""
    rows = pd.DataFrame(head_diagnostics({k: result.attention(k) for k in KINDS}, result.special_keys()))
    summary = rows.groupby(["kind", "layer"], sort=False)[["entropy", "max weight", "on special token"]].mean()
    summary = summary.reset_index()
    summary["kind"] = summary["kind"].map(controls.KIND_LABELS)
    return summary.rename(columns={"kind": "type"})


def partner(checkpoint: str, infos: list) -> str:
    """The default model to compare ``checkpoint`` with: another listed checkpoint, of the other layout when there is
    one."""
    mine = next((i for i in infos if i.path == checkpoint), None)
    others = [i for i in infos if i.problem is None and i.path != checkpoint]
    other_layout = [i for i in others if mine is None or i.layout != mine.layout]
    return (other_layout or others)[0].path if others else checkpoint


def flag_notice(model: cached.Model, result: Analysis) -> None:
    """A model with a rule (``flag.json``): its flag on this translation, as Source or prefix says it (ALTI+ within
    the work left; the page's one notice says when it does not fit)."""
    if flag_rule(model.tr.path).origin == "default":
        return
    data = source_or_prefix.contributions_of(model, result)
    if data is not None:
        source_or_prefix.show_notice(described.notice(model.tr, result, data["source_share"])[0])


def render(ctx: ViewContext) -> None:
    """Model picker, both translations, both heatmaps and both head summaries."""
    infos = [i for i in cached.get_checkpoint_list() if catalog.model_allowed(i.path)]  # public: the allow-list only
    labels = {i.path: i.label() for i in infos if i.problem is None}
    short = {i.path: f"{Path(i.path).name} ({i.layout})" for i in infos if i.problem is None}  # fits a chart title
    options = list(dict.fromkeys([ctx.model.checkpoint, *labels]))
    st.caption("The same sentence through two models: their translations and scores, one attention map of each on "
               "one colour scale, and how focused each model's heads are layer by layer. The default partner is "
               "the other layout (post-norm, as in the paper, against pre-norm) when both are here.")
    other = controls.choose(st.selectbox, "Compare with", options, COMPARE_WITH, partner(ctx.model.checkpoint, infos),
                            format_func=lambda p: labels.get(p, p))
    mine = ctx.result.settings  # what the page ran (the beam may be capped to the work limit)
    # the options' labels never change with the partner or the sidebar: a radio whose labels change is a new widget
    # to the browser (none selected, and the choice lost on the next change); the numbers go in the caption below
    choice = controls.choose(st.radio, "Length penalty", ALPHAS, COMPARE_ALPHA, "same", horizontal=True,
                             format_func=lambda c: "one α for both (the sidebar's)" if c == "same"
                             else "each its own α",
                             help="With one α both models decode with exactly the same settings, so their scores "
                                  "compare. Each model's own α is the one its model card names (chosen on the "
                                  "validation set), "
                                  "else the default 0.6.")
    if choice == "own":
        st.caption(f"Each its own α: {controls.md_escape(alpha_note(ctx.model.checkpoint))}; "
                   f"{controls.md_escape(alpha_note(other))}.")
    settings_a = replace(mine, alpha=catalog.model_alpha(ctx.model.checkpoint)) if choice == "own" else mine
    settings_b = replace(mine, alpha=catalog.model_alpha(other)) if choice == "own" else mine
    if settings_a.alpha != settings_b.alpha and mine.beam_size > 1:
        st.warning(f"The two models decode at different length penalties (α {settings_a.alpha:.1f} and "
                   f"{settings_b.alpha:.1f}): their scores are not comparable (the score divides by a length "
                   "penalty that depends on α). Choose one α for both to compare scores.", icon=":material/warning:")
    if not catalog.model_allowed(other):  # never load what this server does not offer
        st.error(f"{controls.md_escape(catalog.short_name(other))} is not offered on this server.")
        return
    try:  # one request: both models share what is left of its work, and it waits for a heavy slot at most once
        partner_model = cached.Model(other, ctx.model.device)
        _ = partner_model.tr  # loaded before any work: a model that cannot load is said below
        again = settings_a != ctx.result.settings  # the page's own analysis ran at other settings
        share = ledger.left() / (2 if again else 1)
        result_a = ctx.model.analysis(ctx.result.text, settings_a, (), share) if again else ctx.result
        result_b = partner_model.analysis(ctx.result.text, settings_b, (), share)
    except transformer.CheckpointError as err:
        st.error(f"{controls.md_escape(catalog.short_name(other))} could not be loaded: "
                 f"{controls.md_escape(catalog.visitor_message(err))}")
        return
    pair = ((ctx.model.checkpoint, result_a), (other, result_b))
    models = (ctx.model, partner_model)
    columns = st.columns(2)
    for col, (name, res), s, model in zip(columns, pair, (settings_a, settings_b), models):
        with col.container(border=True):
            st.caption(controls.md_escape(labels.get(name, name)))  # its language pair is a file's text
            st.text(res.translation or "(empty)")
            search = "greedy" if s.beam_size == 1 else f"beam {s.beam_size}, α {s.alpha:.1f}"
            st.caption(f"{search} · score {res.score:.3f} · {len(res.source_tokens)} source pieces · "
                       f"{res.seconds * 1000:.0f} ms")
            flag_notice(model, res)
    c1, c2, c3, c4 = st.columns([3.3, 1.2, 0.9, 1.3])
    kind = controls.kind_control(columns=(c1, c2))  # the same type, layer and head as the other views show
    depth = min(res.attention(kind).shape[0] for _, res in pair)
    heads = min(res.attention(kind).shape[1] for _, res in pair)
    layer = controls.choose(c3.selectbox, "Layer", list(range(1, depth + 1)), controls.LAYER, depth)
    head = controls.choose(c4.selectbox, "Head", ["mean"] + [str(h) for h in range(1, heads + 1)], controls.HEAD,
                           "mean", format_func=head_title)
    # a long sentence: the same window of both (each model's own pieces; what the browser draws stays bounded)
    q0, q1, k0, k1 = heatmaps.window(max(len(res.axes(kind)[0]) for _, res in pair),
                                     max(len(res.axes(kind)[1]) for _, res in pair), "compare_chart")
    picked = [one_head(res.attention(kind), kind, layer, head) for _, res in pair]
    weights = [p.weights[q0:q1, k0:k1] for p in picked]
    zmin, zmax = controls.colour_range(*(w for w in weights if w.size))  # one colour scale for both
    qt, kt = AXIS_TITLES[kind]
    st.markdown(f"**{picked[0].title}**, one colour scale for both")
    columns = st.columns(2)
    for col, (name, res), w, side in zip(columns, pair, weights, ("a", "b")):
        queries, keys = res.axes(kind)
        if not w.size:
            col.caption(f"{controls.md_escape(short.get(name, name))}: no pieces in this window (its sentence is "
                        "shorter).")
            continue
        qf, kf = first_numbers(kind)
        fig = figures.attention_heatmap(w, queries[q0:q1], keys[k0:k1], zmin=zmin, zmax=zmax, query_title=qt,
                                        key_title=kt, title=short.get(name, name), query_first=qf, key_first=kf,
                                        query_offset=q0, key_offset=k0)
        plots.chart(fig, f"compare-{side}", f"compare_{side}_chart", col)
    st.caption(f"{KIND_NAMES[kind]}: each model's own tokenisation on its axes. Head statistics per layer (means "
               "over the heads; entropy: how spread the weights are, lower = more focused):",
               help="Entropy in nats (natural logarithm): 0 when all the weight is on one piece, ln n when it is "
                    "spread evenly over n pieces.")
    for col, (_, res) in zip(st.columns(2), pair):
        col.dataframe(head_summary(res), hide_index=True, width="stretch",
                      column_config={c: st.column_config.NumberColumn(format="%.3f")
                                     for c in ("entropy", "max weight", "on special token")})
