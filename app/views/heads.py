"""Heads across the test set: importance, pruning curve, roles and statistics from the checkpoint's heads.json
(made by ``python -m transformer.heads``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from .. import catalog, controls, figures, heatmaps
from ..analysis import KIND_NAMES, KINDS
from ..catalog import load_heads
from ..controls import KIND_LABELS
from ..state import ViewContext

DATA_DIR = "data/multi30k"  # where the README's `python -m transformer.data --download data/multi30k` puts it
PICK = "heads_pick"
PARAMS = (controls.head_ref_param("row", PICK), *heatmaps.window_params("heads_chart"))


def split_sentences(split: str) -> list[str] | None:
    """The source side of the split the statistics were made on, when a copy of the data is here:
    ``$ATTN_DATA_DIR``, else ``data/multi30k`` in the working directory or the repository."""
    for root in [os.environ.get("ATTN_DATA_DIR", ""), DATA_DIR, str(catalog.REPO_ROOT / DATA_DIR)]:
        file = Path(root) / f"{split}.en" if root else None
        if file is not None and file.is_file():
            return file.read_text(encoding="utf-8").splitlines()
    return None


def importance_figure(importance: dict[str, list]) -> go.Figure:
    """One layers x heads grid per type, side by side."""
    fig = figures.make_subplots(rows=1, cols=3, subplot_titles=[KIND_NAMES[k] for k in KINDS],
                                horizontal_spacing=0.08)
    for i, kind in enumerate(KINDS):
        z = np.asarray(importance[kind], dtype=float)  # (L, H)
        fig.add_trace(go.Heatmap(z=z, x=[f"H{h + 1}" for h in range(z.shape[1])],
                                 y=[f"L{layer + 1}" for layer in range(z.shape[0])], coloraxis="coloraxis",
                                 hovertemplate=f"{KIND_NAMES[kind]} %{{y}} %{{x}}: importance %{{z:.3f}}"
                                               "<extra></extra>"), row=1, col=i + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(coloraxis=dict(colorscale=figures.ATTENTION_SCALE, colorbar=dict(title="importance")),
                      height=330, margin=dict(l=10, r=10, t=80, b=10), font=figures.FONT,
                      title=dict(text="Head importance (Michel et al., normalised per layer)", x=0.0))
    return fig


def pruning_figure(data: dict) -> go.Figure:
    """BLEU against the share of heads switched off, least important first: pooled and per type."""
    fig = go.Figure()
    curves = [("all types pooled", data["pruning"])] + [(KIND_NAMES[k], data["pruning_by_type"][k]) for k in KINDS]
    for name, points in curves:
        fig.add_trace(go.Scatter(x=[100 * p["fraction"] for p in points], y=[p["bleu"] for p in points],
                                 mode="lines+markers", name=name,
                                 customdata=[p["heads_off"] for p in points],
                                 hovertemplate=f"{name}: %{{customdata}} heads off (%{{x:.0f}}%), BLEU %{{y:.2f}}"
                                               "<extra></extra>"))
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=40, b=10), font=figures.FONT,
                      xaxis=dict(title=dict(text="heads switched off (% of the type, or of all)")),
                      yaxis=dict(title=dict(text="BLEU")), legend=dict(orientation="h", y=-0.22, x=0),
                      title=dict(text="Pruning curve", x=0.0))
    return fig


def head_rows(data: dict) -> pd.DataFrame:
    """One row per head: role, importance and the corpus statistics."""
    rows = []
    for kind in KINDS:
        stats = data["stats"][kind]
        for layer, row in enumerate(data["importance"][kind]):
            for head, imp in enumerate(row):
                entry = {"type": KIND_LABELS[kind], "layer": layer + 1, "head": head + 1,
                         "role": data["roles"][kind][layer][head], "importance": imp}
                entry.update({name.replace("_", " "): values[layer][head] for name, values in stats.items()})
                rows.append(entry)
    return pd.DataFrame(rows)


def column_config(frame: pd.DataFrame) -> dict:
    """Three decimals; 'top offset' (a position difference) as a whole number; headers with their full name."""
    config = {c: st.column_config.NumberColumn(c, format="%.3f", help=c)
              for c in frame.columns if c not in ("type", "layer", "head", "role")}
    if "top offset" in config:
        config["top offset"] = st.column_config.NumberColumn("top offset", format="%+d",
                                                             help="the most frequent key position minus the query's")
    return config


def render(ctx: ViewContext) -> None:
    """The importance grids, the pruning curve and the sortable table; a selected head opens on this sentence."""
    data = load_heads(ctx.tr.path)
    if data is None:
        where = catalog.short_name(ctx.model.checkpoint) if catalog.public_mode() else ctx.model.checkpoint
        st.info("This checkpoint has no heads.json yet. Make it with\n\n"
                f"`python -m transformer.heads --checkpoint {where} --split test_2016_flickr --out "
                f"{where}/heads.json`\n\n(a few minutes on a CPU; add `--limit 200` for a quick one).",
                icon=":material/query_stats:")
        return
    text = controls.md_escape  # heads.json's strings are shown as text, never as Markdown or links
    st.caption(f"{text(data.get('sentences', '?'))} sentences of {text(data.get('split', '?'))}, beam "
               f"{text(data.get('beam', '?'))}. {text(data.get('importance_note', ''))}")
    st.plotly_chart(importance_figure(data["importance"]), config=figures.plotly_config("head-importance"),
                    key="heads_importance")
    st.plotly_chart(pruning_figure(data), config=figures.plotly_config("pruning-curve"), key="heads_pruning")
    st.caption(f"Baseline BLEU {data['baseline_bleu']:.2f} with every head on. Roles: " +
               "; ".join(f"{text(name)}: {text(rule)}" for name, rule in data.get("role_rules", {}).items()))
    frame = head_rows(data)
    kinds = {v: k for k, v in KIND_LABELS.items()}
    refs = [controls.head_ref((kinds[t], la - 1, h - 1)) for t, la, h in zip(frame["type"], frame["layer"],
                                                                            frame["head"])]
    event = st.dataframe(frame, hide_index=True, width="stretch", on_select="rerun", selection_mode="single-row",
                         key="heads_table", height=320, column_config=column_config(frame))
    controls.follow_table(event, refs, PICK)
    picked = controls.head_picker(refs, PICK)
    if not picked:
        st.info("Select a head (the box at a row's left) to open it on this sentence and to see the test sentences "
                "where it is most confident.", icon=":material/touch_app:")
        return
    kind, layer, head = picked[0], picked[1] + 1, picked[2] + 1
    if ctx.result is not None:
        heatmaps.draw_heatmap(ctx.result, kind, layer, str(head), key="heads_chart")
    indices = data.get("most_confident", {}).get(kind, [[]])[layer - 1][head - 1]
    cited = data.get("cited_sentences") if isinstance(data.get("cited_sentences"), dict) else {}
    sentences = split_sentences(str(data.get("split", ""))) if not all(str(i) in cited for i in indices) else None
    st.caption(f"Sentences of {text(data.get('split'))} where this head's attention is most concentrated (highest mean "
               "peak weight):")
    lines = [f"{i + 1}. {cited[str(i)]}" if str(i) in cited else
             f"{i + 1}. {sentences[i]}" if sentences is not None and 0 <= i < len(sentences) else
             f"line {i + 1} (not in heads.json, and the data set is not on this machine)" for i in indices]
    st.text("\n".join(str(line) for line in lines))
