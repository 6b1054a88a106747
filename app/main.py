"""The attention explorer: translate a sentence and look inside every head of the Transformer.

Run from the repository root with ``streamlit run app/main.py`` (after ``pip install -e .[app]``). The
checkpoint defaults to ``checkpoints/multi30k-en-de``; ``ATTN_CHECKPOINT`` or the sidebar can name another
directory or a Hugging Face Hub repo id.
"""

from __future__ import annotations

import sys

import streamlit as st

# a fresh server's first run imports PyTorch and the app (seconds): say so, instead of a blank page (emptied once
# the page starts; a warm server never draws it). The box itself is the first element of every run, so that each
# element keeps its place from one run to the next: without it in a later run, every element of the first visitor's
# next run would land one place up, over the last run's faded copies (a second title, the controls out of order).
FRESH = "torch" not in sys.modules
STARTING = st.empty()
if FRESH:
    STARTING.info("Starting the explorer: loading PyTorch and the model, a few seconds on a fresh server…",
                  icon=":material/hourglass_top:")

import torch  # noqa: E402 (after the notice above)

from app.analysis import cached, inference  # noqa: E402
from app.limits import budget, ledger, work  # noqa: E402
from app.models import card, catalog  # noqa: E402
from app.page import controls, frame, languages, selector, sidebar, state  # noqa: E402
from app.page.controls import md_escape  # noqa: E402
from app.views import GROUPS, VIEWS, render, whole_test_set  # noqa: E402
from transformer import environment  # noqa: E402
from transformer.checkpoint import hub  # noqa: E402
from transformer.network import linear  # noqa: E402


def torch_threads() -> int:
    """``$ATTN_TORCH_THREADS`` (a whole number from 1), else 1: on a small model several threads gain nothing, and
    on a busy CPU their spinning slows decoding down many times over; visitors are served in parallel by Streamlit's
    threads anyway."""
    return int(environment.number("ATTN_TORCH_THREADS", 1, whole=True))


def gemm() -> str:
    """``$ATTN_GEMM``, read where every product reads it (``transformer.network.linear.gemm_setting``: the network
    imports nothing above it); a value it refuses is this module's one line naming the variable."""
    try:
        return linear.gemm_setting()
    except ValueError as err:
        raise environment.SettingError(str(err)) from None


# every number and choice this server reads from its environment (transformer.environment's rule: docs/limits.md)
SETTINGS = (catalog.max_model_mb, catalog.model_dtype, catalog.default_device, hub.max_download_mb,
            budget.budget_bytes, ledger.max_work, work.work_bytes, ledger.heavy_slots, torch_threads, gemm)


def settings_problems() -> list[str]:
    """What this server's environment holds that the app does not understand: one line each, naming the variable."""
    problems = []
    for read in SETTINGS:
        try:
            read()
        except environment.SettingError as err:
            problems.append(str(err))
    return problems


try:
    _threads = torch_threads()
except environment.SettingError:  # one thread, and the page says why
    _threads = 1
torch.set_num_threads(_threads)


def analyse(model: cached.Model, sub: state.Submitted | None) -> inference.Analysis | None:
    """The analysis of the shown sentence (the picked one of a longer text), or None with a message."""
    if sub is None:
        return None
    picked = frame.pick_sentence(model, sub)  # a longer text's picked sentence, with its pieces
    try:  # the beam capped to what is left of the request's work (the cut goes in the request's one notice)
        with st.spinner("Translating…"):
            if picked is None:
                return model.analysis(sub.text, sub.settings, ())
            return model.analysis(picked.text, sub.settings, (), pieces=picked.pieces)
    except Exception as err:  # never a stack trace
        st.error(f"The translation failed: {type(err).__name__}: {md_escape(catalog.visitor_message(err))}",
                 icon=":material/error:")
        return None


def main() -> None:
    """The page as one request of bounded work (``app.limits.ledger.request``: every job it starts shares one ceiling
    and at most one wait for a heavy slot; one notice says what was cut)."""
    with ledger.request() as req:
        page(req)


def page(req: ledger.Request) -> None:
    """The page: input, view selector, translation, the chosen view, the sidebar; then the address. The page's
    picture (the first screen's heatmap) is sent before the controls (the input area and the view selector above
    it, in places kept for them; the view's own controls; the sidebar), so that the browser draws it in the page's
    first frame, before it has built them."""
    st.set_page_config(page_title="Attention explorer · Transformer", page_icon="🔭", layout="wide",
                       initial_sidebar_state="auto")  # collapsed on a phone, open on a wider screen
    if FRESH:
        STARTING.empty()
    problems = settings_problems()
    if problems:  # never a silent default in their place
        st.error("This server's settings are not understood, so the page stops here:\n\n"
                 + "\n".join(f"- {md_escape(p)}" for p in problems), icon=":material/settings_alert:")
        st.stop()
    frame.page_style()
    frame.page_name()
    state.start_run()
    model, notices = sidebar.chosen_model()
    state.show_ignored()
    tr = frame.load_model(model)
    if tr is None:
        sidebar.sidebar(notices)  # to pick another model
        state.link_too_long_notice()
        return
    languages.settle(tr)  # a multilingual model: source and target language
    above = st.container()  # the input area, drawn in its place once the picture has been sent
    notice = st.empty()  # what the work limit cut, filled once the request's jobs are planned
    name = selector.resolve(VIEWS, GROUPS)  # the view, settled once, before its selector is drawn
    req.keep(VIEWS[name].work_share)  # for the view's own jobs
    sub = state.submitted()
    result = analyse(model, sub)
    req.keep(0.0)
    render_view(name, model, sub, result)
    with above:
        frame.input_area(tr)
    sidebar.sidebar(notices)
    sidebar.show_model_facts(tr, model.checkpoint)
    languages.pickers(tr)
    controls.work_notice(notice, req)
    state.link_too_long_notice()  # last: an element that shows nothing unless the link was dropped


def render_view(name: str, model: cached.Model, sub: state.Submitted | None,
                result: inference.Analysis | None) -> None:
    """The view selector (with the model card's switch in its row), the translation panel and the view ``name``
    (settled by ``selector.resolve``); then the address. The selector's row and the translation are placed first
    and filled once the view (its picture) has been sent."""
    tr = model.tr
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")  # wraps where it does not fit
    pills = st.container()  # the view pills, a row of their own (the row above keeps its place in every group)
    model_card = st.empty()
    translation = st.container()  # filled after the view: the picture goes first
    changed = selector.bring_into_view(name)  # a view just picked, far down the page (a phone): scrolled to
    picking = name not in GROUPS[st.session_state[state.VIEW_GROUP]]  # a group just picked: none of its views yet
    with selector.view_box(changed):
        draw_view(name, model, sub, result, picking)
    if result is not None:
        with translation:
            frame.show_translation(tr, result, whole_test_set.open_line_name(state.ViewContext(model, result, sub)))
    selector.view_selector(VIEWS, GROUPS, row, pills)
    readme = card.model_card(tr)
    if readme and row.toggle("Model card", key=state.SHOW_CARD,
                           help="Show the model card: how it was trained, its scores, its limits."):
        with model_card.container(border=True, height=420):
            st.markdown(readme)  # the checkpoint's own README: Markdown, never raw HTML
    state.end_run(name)


def draw_view(name: str, model: cached.Model, sub: state.Submitted | None, result: inference.Analysis | None,
              picking: bool) -> None:
    """The view ``name``; nothing while a group has just been picked (``picking``); a clear message, never a trace,
    when it fails."""
    try:
        if picking:
            pass  # nothing drawn, no work, until a view of the group is picked (the selector says so)
        elif VIEWS[name].needs_translation and result is None:
            st.info("Type or pick a sentence to see its attention.", icon=":material/translate:")
        else:
            render(name, state.ViewContext(model, result, sub))
    except Exception as err:  # never a stack trace
        st.error(f"This view could not be drawn: {type(err).__name__}: {md_escape(catalog.visitor_message(err))}",
                 icon=":material/error:")


main()
