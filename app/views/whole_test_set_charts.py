"""Whole test set's charts and the notes under them: a histogram of one signal (the signal picker, each signal's
words in its help) and source share against chrF, each with the flag rule's threshold, the open line marked on both;
the rule in plain words and which flagged lines lie beyond a threshold's line. The table beside them:
:mod:`app.views.whole_test_set`."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from transformer.interpret.columns import COLUMNS
from transformer.interpret.flagging import FlagRule, condition_text, rule_text

from ..analysis import tables
from ..drawing import figures, table_figures
from ..limits import ledger, work
from ..models.catalog import load_heads
from ..page import controls, plots
from ..page.state import ViewContext
from . import whole_test_set_lines as lines

SIGNAL = "testset_signal"  # the histogram's signal picker
LABELS = {name: column.label for name, column in COLUMNS.items()}  # each column's label: the table's headers too


def rule_words(rule: dict) -> str | None:
    """The table's rule (its manifest's ``flag_rule``) in plain words, or None when it has none that reads."""
    try:
        return rule_text(FlagRule.from_json(rule)) if rule else None
    except ValueError:
        return None


def beyond_the_line(frame: pd.DataFrame, rule: dict, columns: list[str]) -> list[str]:
    """For each of ``columns`` with a threshold drawn: how many flagged lines lie on the unsuspicious side of its line,
    and the other parts of the rule that flagged them. Each condition is tested on every flagged line once, a column
    at a time, counted against the request's work (``work.rule_work``); over what is left, nothing is said but the
    notice."""
    try:
        parsed = FlagRule.from_json(rule)  # at most MAX_CONDITIONS conditions
    except ValueError:
        return []
    flagged = frame[frame["flag"]]
    estimate = work.rule_work(len(flagged), len(parsed.conditions))
    if estimate > ledger.left():
        ledger.cut([f"which flagged lines lie beyond the flag's lines is not said ({ledger.amount(estimate)} units "
                    "asked)"])
        return []
    ledger.spend(estimate)
    holds = {c: c.holds_where(pd.to_numeric(flagged[c.column], errors="coerce").to_numpy(dtype=float))
             if c.column in flagged else np.zeros(len(flagged), dtype=bool) for c in parsed.conditions}
    said = []
    for column in dict.fromkeys(columns):
        mine = [c for c in parsed.conditions if c.column == column]
        others = [c for c in parsed.conditions if c.column != column]
        if not mine or not others or column not in frame:
            continue
        beyond = ~np.logical_or.reduce([holds[c] for c in mine])  # (flagged lines,)
        if beyond.any():
            count = int(beyond.sum())
            fired = [c for c in others if holds[c][beyond].any()]
            said.append(f"{count:,} flagged {'line lies' if count == 1 else 'lines lie'} on the other "
                        f"side of the {LABELS.get(column, column)} line: "
                        + (" or ".join(controls.md_escape(condition_text(c)) for c in fired) or "another condition")
                        + ".")
    return said


# the two charts' toolbar would cover their legend ("flagged", "not flagged") at the top right: none (a drag still
# zooms, a double click zooms out)
NO_TOOLBAR = {"displayModeBar": False}


def charts(ctx: ViewContext, frame: pd.DataFrame, rule: dict, choice: str, manifest: dict) -> None:
    """A histogram of the chosen signal and source share against chrF, each with the flag rule's threshold on it; for
    the source share, when the rule has none, the checkpoint's own threshold (heads.json, chosen on val), named so.
    The open line is marked on both; a click on a point of the scatter opens its line."""
    opened = lines.open_id(st.session_state, choice)
    row = None if opened is None else lines.row_of_line(frame, opened)
    limits = tables.thresholds(rule)
    heads = load_heads(ctx.tr.path) or {}
    alti = heads.get("alti") if isinstance(heads.get("alti"), dict) else {}
    value = alti.get("hallucination_threshold")
    val_share = float(value) if isinstance(value, (int, float)) and "source_share" not in limits else None
    present = [s for s in tables.SIGNAL_HELP if np.isfinite(pd.to_numeric(frame[s], errors="coerce")).any()]
    if not present:
        st.info("This table has no signal values to draw.", icon=":material/bar_chart:")
        return

    def line(column: str) -> tuple[float | None, str]:
        if column in limits:
            return limits[column], "flag threshold"
        return (val_share, "validation threshold") if column == "source_share" and val_share is not None else (None, "")

    left, right = st.columns(2)
    with left:
        signal = controls.choose(st.selectbox, "Signal", present, SIGNAL, "chrf" if "chrf" in present else present[0],
                                 format_func=lambda s: LABELS.get(s, s),  # a short label; what each is: help
                                 help="  \n".join(f"**{controls.md_escape(LABELS.get(s, s))}**: "
                                                   f"{controls.md_escape(tables.SIGNAL_HELP[s])}" for s in present))
        values = pd.to_numeric(frame[signal], errors="coerce").to_numpy(dtype=float)
        at, name = line(signal)
        mark = None if row is None else (opened, pd.to_numeric(pd.Series([row[signal]]), errors="coerce").iloc[0])
        plots.plotly(st, table_figures.signal_histogram(values, LABELS.get(signal, signal),
                                                           frame["flag"].to_numpy(), at, threshold_name=name,
                                                           opened=mark),
                        NO_TOOLBAR | figures.plotly_config(f"test-set-{signal}"), "testset_histogram")
    with right:
        if {"chrf", "source_share"} <= set(present):
            at, name = line("source_share")
            event = plots.plotly(st, table_figures.share_chrf_scatter(
                pd.to_numeric(frame["source_share"], errors="coerce").to_numpy(dtype=float),
                pd.to_numeric(frame["chrf"], errors="coerce").to_numpy(dtype=float), frame["id"].to_numpy(),
                frame["flag"].to_numpy(), at, threshold_name=name, opened=opened),
                NO_TOOLBAR | figures.plotly_config("test-set-share-chrf"), lines.SCATTER, on_select="rerun",
                selection_mode="points")
            st.caption("Each line: its share from the source (across) and its chrF (up). A line far left takes "
                       "little from the source: its words come from the output so far, a sign of a made-up "
                       "translation. Click a point to open its line.")
            lines.follow_point(event, frame, choice, manifest)
        else:
            st.info("Source share against chrF needs both; chrF needs a reference for each line.",
                    icon=":material/scatter_plot:")
    words = rule_words(rule)
    problem = tables.rule_problem(manifest)
    notes = [f"Flagged (may be a hallucination) when {controls.md_escape(words)}." if words else
             f"This table's manifest names a flag rule that was refused ({controls.md_escape(problem)}); its lines "
             "are flagged as the table says." if problem else
             "This table's manifest does not say how its lines were flagged."]
    if limits:
        notes.append("A dotted “flag threshold” is one of that rule's limits; a flagged line on the unsuspicious side "
                     "of it was flagged by another part of the rule.")
        notes += beyond_the_line(frame, rule, [c for c in (signal, "source_share") if c in limits])
    if val_share is not None:
        notes.append(f"The dotted “validation threshold” ({val_share:.2f}) is this model's source-share threshold "
                     "chosen on the validation set with its head statistics; it is not part of the flag.")
    st.caption(" ".join(notes))
