"""Export: the attention weights as JSON or NPZ, figures as PNG, and a link to the view the user came from."""

from __future__ import annotations

import streamlit as st

from transformer import Translator

from .. import report
from ..analysis.inference import Analysis
from ..page import controls, state
from ..page.state import ViewContext
from . import what_carries_the_change as patching

PARAMS = ()  # no choices of its own


def render(ctx: ViewContext) -> None:
    """Two download buttons and the share link."""
    st.caption("Take the numbers with you, or share what you were looking at.")
    text, settings = ctx.result.text, ctx.result.settings  # what the page ran (its beam may be capped)
    c1, c2 = st.columns(2)
    with c1.container(border=True):
        st.markdown("**Attention weights**")
        st.caption("Every layer and head of the three attention types, shaped (layers, heads, queries, keys), "
                   "with the tokens. Each file is built when you click (a long input's JSON is tens of MB).")
        # data as a callable: the file is made on the click, not held by every open Export tab (docs/limits.md)
        st.download_button("Download JSON", ctx.model.export_file(text, settings, (), "json"),
                           file_name="attention.json", mime="application/json", key="download_json",
                           icon=":material/data_object:", on_click="ignore")
        st.download_button("Download NPZ (numpy)", ctx.model.export_file(text, settings, (), "npz"),
                           file_name="attention.npz", mime="application/octet-stream", key="download_npz",
                           icon=":material/download:", on_click="ignore")
    with c2.container(border=True):
        previous = st.session_state.get(state.PREVIOUS_VIEW, state.DEFAULT_VIEW)
        st.markdown("**Figures and links**")
        st.caption("Every chart has a camera icon in its toolbar (top right, on hover) that saves it as a PNG. "
                   f"This link opens the {previous} view exactly as you left it (sentence, decoding settings and "
                   "the view's choices):")
        try:
            base = (st.context.url or "").split("?")[0]
        except Exception:  # no browser context (tests, bare mode)
            base = ""
        st.code(f"{base}?{state.share_query(previous)}", language=None, wrap_lines=True)
    offline_page(ctx)
    patching_numbers(ctx)


def patching_numbers(ctx: ViewContext) -> None:
    """What carries the change's numbers as NPZ: the last edit patched on this sentence (built on the click)."""
    with st.container(border=True):
        st.markdown("**What carries the change**")
        last = st.session_state.get(patching.LAST)
        if not last or last[:2] != (ctx.result.text, ctx.result.settings):
            st.caption("Open What carries the change and pick an edit of this sentence: its numbers (every site's "
                       "effect and patched metric, the step, target and foil) are then here as NPZ.")
            return
        edited, step, foil, direction = last[2]
        st.caption(f"The last edit patched: {controls.md_escape(edited)} ({direction}); every site's effect and "
                   "patched metric, the step, target and foil, and both sentences' pieces.")
        st.download_button("Download NPZ (numpy)", ctx.model.patching_file(*last), file_name="patching.npz",
                           mime="application/octet-stream", key="download_patching_export",
                           icon=":material/download:", on_click="ignore")


def page_html(tr: Translator, analysis: Analysis, checkpoint: str) -> str:
    """The offline page the download button builds (``app.report``'s default views)."""
    return report.build_page(analysis, tr, report.DEFAULT_VIEWS, model=checkpoint)


def offline_views() -> str:
    """The views the offline page holds (``report.DEFAULT_VIEWS``), by their names, in the registry's order."""
    names = [report.VIEW_TITLES[key] for key in report.DEFAULT_VIEWS]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def offline_page(ctx: ViewContext) -> None:
    """The sentence on screen as one self-contained HTML page (``app.report``), built only when asked."""
    with st.container(border=True):
        st.markdown("**Offline page**")
        st.caption("This translation as one HTML file that opens in any browser with no server and no network: the "
                   f"translation and its scores, and the views {offline_views()}, with their pickers (about 5 MB, "
                   "most of it the plotting library).")
        # data as a callable: the page is made on the click, in a heavy slot, and kept in the budgeted cache
        st.download_button("Download the page (HTML)", ctx.model.report_file(ctx.result.text, ctx.result.settings,
                                                                             page_html),
                           file_name="attention.html", mime="text/html", key="download_report",
                           icon=":material/description:", on_click="ignore")
