"""Training evolution: the same sentence's attention in the training snapshots shipped with the checkpoint."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ..analysis import probes
from ..drawing import figures
from ..drawing.analysis import first_numbers, one_head
from ..limits import work
from ..models import card
from ..page import controls, heatmaps, plots
from ..page.state import ViewContext

PARAMS = (controls.ATT_PARAM, controls.LAYER_PARAM, controls.HEAD_PARAM, controls.SCALE_PARAM,
          *heatmaps.window_params("evolution"))


def render(ctx: ViewContext) -> None:
    """The same sentence's attention in the training snapshots."""
    tr, result = ctx.tr, ctx.result
    st.caption("The same sentence in the training snapshots shipped with the checkpoint: each snapshot is run "
               "teacher-forced on the final translation (so the axes match) and also translates on its own.")
    snaps = probes.list_snapshots(tr)
    history = (tr.metadata or {}).get("history")
    if not snaps:
        st.info("This checkpoint has no training snapshots (a snapshots/ folder of stepNNNNNNN.safetensors files "
                "written by `python -m transformer.train --snapshots ...`).", icon=":material/history:")
        fig = figures.history_figure(history) if isinstance(history, list) and history else None
        if fig is not None:
            st.caption("Validation scores during training, from the model card.")
            plots.chart(fig, "training-history", "evolution_history")
        return
    kind = controls.kind_control()
    layer, head = controls.layer_head_controls(tr, kind)
    snaps, notices = work.pick_snapshots(tr, len(result.source_ids), len(result.target_ids), snaps)
    controls.capped(notices)
    panels, rows = [], []
    for path in snaps:
        try:
            attn, text = ctx.model.snapshot_attentions(str(path), tuple(result.source_ids), tuple(result.target_ids))
        except Exception as err:
            st.warning(f"Skipped {controls.md_escape(path.name)}: {controls.md_escape(err)}")
            continue
        step = probes.snapshot_step(path)
        panels.append((f"step {step}", one_head(attn[kind], kind, layer, head).weights))
        rows.append({"checkpoint": f"step {step}", "its own greedy translation": text or "(empty)"})
    final_name = card.final_label(tr.metadata)  # as the sidebar's training details say
    final = one_head(result.attention(kind), kind, layer, head)
    panels.append((final_name, final.weights))
    rows.append({"checkpoint": final_name, "its own greedy translation": result.translation})
    queries, keys = result.axes(kind)
    q0, q1, k0, k1 = heatmaps.window(len(queries), len(keys), "evolution")  # a long sentence: a window of it
    panels = [(name, w[q0:q1, k0:k1]) for name, w in panels]
    queries, keys = queries[q0:q1], keys[k0:k1]
    qf, kf = first_numbers(kind)
    plots.chart(figures.evolution_figure(panels, queries, keys, final.title,
                                            zrange=controls.colour_range(*[w for _, w in panels]),
                                            query_first=q0 + qf, key_first=k0 + kf),
                   f"evolution-{kind}-L{layer}", "evolution_chart")
    st.table(pd.DataFrame(rows).set_index("checkpoint"))  # a table wraps long translations; a data grid cuts them
    if isinstance(history, list) and history:
        fig = figures.history_figure(history, marks=[probes.snapshot_step(p) for p in snaps])
        if fig is not None:
            st.caption("Validation scores during training; dotted lines mark the snapshots.")
            plots.chart(fig, "training-history", "evolution_history")
