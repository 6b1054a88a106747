"""Head table: per-head diagnostics; a selected row opens its heatmap."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ..drawing.analysis import KINDS, head_diagnostics
from ..page import controls, heatmaps
from ..page.controls import KIND_LABELS
from ..page.params import Param
from ..page.state import ViewContext

TABLE_PICK = "table_pick"
AGREEMENT = "agrees with attribution"
PARAMS = (Param("ag", "table_agreement", lambda v: True if v == "1" else None, False, lambda v: "1"),
          controls.head_ref_param("row", TABLE_PICK), *heatmaps.window_params("table_chart"))


def render(ctx: ViewContext) -> None:
    """The sortable table and the heatmap of the selected head."""
    result = ctx.result
    st.caption("Head diagnostics, one row per head; click a column header to sort, select a row to open its "
               "heatmap. Entropy says how spread a head's weights are: 0 when all of it is on one piece, higher "
               "when spread; 'on special token' is the share on </s> (source "
               "keys) or <s> (decoder keys), where idle heads park their attention; previous / same / next are "
               "the shares on the key one position before, at, or after the query (by index). All are means over "
               "the queries. 'agrees with attribution' (cross heads): 1 when the head ranks the source pieces as "
               "the attribution (integrated gradients) does, 0 for no relation, −1 for the reverse.",
               help="Entropy in nats (natural logarithm; a uniform spread over n pieces is ln n). Agreement: the "
                    "Spearman rank correlation between the head's weights and the attribution to the source, mean "
                    "over the output steps.")
    rows = head_diagnostics({k: result.attention(k) for k in KINDS}, result.special_keys())
    frame = pd.DataFrame(rows)
    slow = "a minute or more" if controls.n_parameters(ctx.tr) > controls.LARGE_MODEL else "a second or two"
    if st.toggle(f"Add each cross-attention head's agreement with the attribution (integrated gradients, {slow})",
                 key="table_agreement"):
        agreement = controls.attributions(ctx, "integrated_gradients")["agreement"]  # (L, H)
        # beside the head's name, where it is seen without scrolling sideways; a dash for the self-attention heads
        # (the attribution is to the source, which only cross-attention reads)
        frame.insert(frame.columns.get_loc("head") + 1, AGREEMENT,
                     [float(agreement[r["layer"] - 1, r["head"] - 1]) if r["kind"] == "cross" else float("nan")
                      for r in rows])
    shown = frame.drop(columns=["kind"]).assign(type=frame["kind"].map(KIND_LABELS))  # short names: room for numbers
    number = st.column_config.NumberColumn(format="%.3f")
    share = {c: st.column_config.ProgressColumn(c, min_value=0.0, max_value=1.0, format="%.3f")
             for c in ("max weight", "on special token", "on previous", "on same", "on next")}
    refs = [controls.head_ref((r["kind"], r["layer"] - 1, r["head"] - 1)) for r in rows]
    attribution = st.column_config.NumberColumn("attribution ρ", width="small",
                                                help="Agreement with the attribution: 1 = same ranking of the "
                                                     "source pieces, −1 = the reverse (Spearman ρ); cross heads only")
    if AGREEMENT in shown:  # numbers to sort by; shown with 3 decimals, a dash where there is none (not "None")
        shown = shown.style.format({AGREEMENT: "{:+.3f}"}, na_rep="—")
    event = st.dataframe(shown, hide_index=True, width="stretch", on_select="rerun", selection_mode="single-row",
                         key="diag_table", height=360,
                         column_config={"entropy": number, AGREEMENT: attribution, **share})
    controls.follow_table(event, refs, TABLE_PICK)
    picked = controls.head_picker(refs, TABLE_PICK)
    if picked:
        kind, layer, head = picked
        heatmaps.draw_heatmap(result, kind, layer + 1, str(head + 1), key="table_chart")
    else:
        st.info("Select a row (the box at its left) to open that head's heatmap.", icon=":material/touch_app:")
