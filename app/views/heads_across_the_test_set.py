"""Heads across the test set: importance, pruning curve, roles and statistics from the checkpoint's heads.json
(made by ``python -m transformer.heads``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from transformer.interpret.heads import STATS_NOTES

from ..analysis.table_inputs import data_roots
from ..drawing import figures, layout
from ..drawing.analysis import KIND_NAMES, KINDS
from ..models import card, catalog
from ..models.catalog import load_heads
from ..page import controls, heatmaps, plots
from ..page.controls import KIND_LABELS
from ..page.state import ViewContext

HEADS_PICK = "heads_pick"
PARAMS = (controls.head_ref_param("row", HEADS_PICK), *heatmaps.window_params("heads_chart"))


def split_sentences(split: str) -> list[str] | None:
    """The source side of the split the statistics were made on, when a copy of the data is in one of
    :func:`~app.analysis.table_inputs.data_roots` (``$ATTN_DATA_DIR``, else ``data/multi30k`` here or in the
    repository)."""
    for root in data_roots():
        file = root / f"{split}.en"
        if file.is_file():
            return file.read_text(encoding="utf-8").splitlines()
    return None


def importance_figure(importance: dict[str, list]) -> go.Figure:
    """One layers x heads grid per type, side by side."""
    # short titles over narrow panels, the layer labels once (at the left): nothing runs into the next panel
    fig = figures.make_subplots(rows=1, cols=3, subplot_titles=[KIND_LABELS[k] for k in KINDS], shared_yaxes=True,
                                horizontal_spacing=0.04)
    for i, kind in enumerate(KINDS):
        z = np.asarray(importance[kind], dtype=float)  # (L, H)
        fig.add_trace(go.Heatmap(z=z, x=[f"H{h + 1}" for h in range(z.shape[1])],
                                 y=[f"L{layer + 1}" for layer in range(z.shape[0])], coloraxis="coloraxis",
                                 hovertemplate=f"{KIND_NAMES[kind]} %{{y}} %{{x}}: importance %{{z:.3f}}"
                                               "<extra></extra>"), row=1, col=i + 1)
    fig.update_yaxes(autorange="reversed")
    heads = max(len(importance[k][0]) if len(importance[k]) else 0 for k in KINDS)
    title = max(layout.text_px(KIND_LABELS[k], 16) for k in KINDS)  # plotly's subplot titles: 16 px
    panel = max(title, heads * (layout.text_px("H10", 12) + layout.LABEL_GAP)) + 12
    fig.update_layout(meta={"min_width": int(3 / 0.92 * panel + 150)},  # app.drawing.layout.min_width
                      coloraxis=dict(colorscale=figures.ATTENTION_SCALE, colorbar=layout.colour_bar("importance")),
                      height=330, margin=dict(l=10, r=10, t=80, b=10), font=layout.FONT,
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
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=40, b=10), font=layout.FONT,
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
    frame = pd.DataFrame(rows)
    for column in frame.columns:  # a statistic a type has not (on start token: only decoder heads) is NaN, not None
        if column not in ("type", "layer", "head", "role"):
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def styled(frame: pd.DataFrame) -> object:
    """The table as shown: three decimals, a whole signed number for 'top offset', a dash where a statistic does
    not apply (a data grid shows a missing number as a grey "None")."""
    numbers = {c: "{:+.0f}" if c == "top offset" else "{:.3f}" for c in frame.columns
               if c not in ("type", "layer", "head", "role")}
    return frame.style.format(numbers, na_rep="—")


MISSING = "—"  # a statistic a type of head has not (the data grid's own word for it would be "None")
NOT_APPLICABLE = "— where it does not apply: "  # a column's tooltip, for its cells that show "—"


def column_help(frame: pd.DataFrame, notes: dict | None = None) -> dict[str, str]:
    """Each statistic's tooltip: what it measures (heads.json's ``stats_notes``, else ``STATS_NOTES``), and, for a
    statistic some types have not (their cells show "—"), which ones and why."""
    notes = {**STATS_NOTES, **(notes if isinstance(notes, dict) else {})}
    out = {}
    for column in frame.columns:
        if column in ("type", "layer", "head", "role"):
            continue
        note = str(notes.get(column.replace(" ", "_"), column))
        note = note if column != "top offset" else "the most frequent key position minus the query's"
        missing = sorted(set(frame.loc[frame[column].isna(), "type"]))
        if missing:  # the note's "null for ..." is the reason, in the table's words
            note = note.replace("null for", "shown as — for")
            if "shown as —" not in note:
                note += f" ({NOT_APPLICABLE}{', '.join(missing)})"
        out[column] = note
    return out


def column_config(frame: pd.DataFrame, notes: dict | None = None) -> dict:
    """Three decimals; 'top offset' (a position difference) as a whole number; headers with their full name and a
    tooltip (:func:`column_help`)."""
    return {c: st.column_config.NumberColumn(c, format="%+d" if c == "top offset" else "%.3f", help=text)
            for c, text in column_help(frame, notes).items()}


def render(ctx: ViewContext) -> None:
    """The importance grids, the pruning curve and the sortable table; a selected head opens on this sentence."""
    data = load_heads(ctx.tr.path)
    if data is None:
        where = catalog.short_name(ctx.model.checkpoint) if catalog.public_mode() else ctx.model.checkpoint
        st.info("This model has no statistics of its heads over a test set yet (the file heads.json beside its "
                "weights). Make them with\n\n"
                f"`python -m transformer.heads --checkpoint {where} --split test_2016_flickr --out "
                f"{where}/heads.json`\n\n(a few minutes on a CPU; add `--limit 200` for a quick one).",
                icon=":material/query_stats:")
        return
    text = controls.md_escape  # heads.json's strings are shown as text, never as Markdown or links
    st.caption(f"{text(data.get('sentences', '?'))} of {text(card.split_words(data.get('split', '?')))}, translated "
               f"with beam {text(data.get('beam', '?'))}. A head's importance: how much the model's loss on those "
               "sentences changes when the head is turned down a little (Michel et al., 2019), scaled so that each "
               "layer's heads compare among themselves.", help=text(data.get('importance_note', '')))
    plots.chart(importance_figure(data["importance"]), "head-importance", "heads_importance")
    plots.plotly(st, pruning_figure(data), figures.plotly_config("pruning-curve"), "heads_pruning")
    st.caption(f"Baseline BLEU {data['baseline_bleu']:.2f} with every head on. Roles: " +
               "; ".join(f"{text(name)}: {text(rule)}" for name, rule in data.get("role_rules", {}).items()))
    frame = head_rows(data)
    kinds = {v: k for k, v in KIND_LABELS.items()}
    refs = [controls.head_ref((kinds[t], la - 1, h - 1)) for t, la, h in zip(frame["type"], frame["layer"],
                                                                            frame["head"])]
    event = st.dataframe(styled(frame), hide_index=True, placeholder=MISSING, width="stretch", on_select="rerun",
                         selection_mode="single-row", key="heads_table", height=320,
                         column_config=column_config(frame, data.get("stats_notes")))
    controls.follow_table(event, refs, HEADS_PICK)
    picked = controls.head_picker(refs, HEADS_PICK)
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
               "peak weight), by their line (counted from 0, as Whole test set counts them):")
    lines = [f"line {i}: {cited[str(i)]}" if str(i) in cited else
             f"line {i}: {sentences[i]}" if sentences is not None and 0 <= i < len(sentences) else
             f"line {i} (not in heads.json, and the data set is not on this machine)" for i in indices]
    st.text("\n".join(str(line) for line in lines))
