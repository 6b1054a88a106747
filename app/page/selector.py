"""The view selector: the views in groups, each with one line of help; and the place where the chosen view is drawn
(its top, scrolled into sight when a view is picked, and its box)."""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from . import state
from .controls import md_escape


def resolve(views: dict, groups: dict[str, list[str]]) -> str:
    """The view this run shows (a link or Back/Forward may have changed it), set in the session before the selector
    is drawn, so the page can plan its work for that view first. A group picked shows its views without opening
    one: the view stays the one last shown (not drawn meanwhile) until one of them is picked (no work starts on a
    group's button)."""
    ss = st.session_state
    if ss.get(state.VIEW) not in views:
        ss[state.VIEW] = state.DEFAULT_VIEW
    if ss.get(state.VIEW_GROUP) not in groups:
        ss[state.VIEW_GROUP] = views[ss[state.VIEW]].group
    return ss[state.VIEW]


# the hidden last pill of a group's row that holds the view shown from another group (``view_selector``)
HIDE_SHOWN_PILL = ("<style>.st-key-view [role=radiogroup] > button:last-child {display: none !important;}"
                   "</style>")


def view_selector(views: dict, groups: dict[str, list[str]], row=None, pills=None) -> str:
    """The views in groups: a group, then a view of it (each with one line of help); returns the view's key.
    A link or Back/Forward sets the view, and its group follows (:func:`resolve`, which the page calls first, once
    a run). A group picked shows its views, none chosen (the view last shown keeps its pill, hidden, at the end of
    the row: the widget's value must be one of its options; the page draws no view meanwhile); the work starts when
    one is picked.
    ``row``: a horizontal container for the group (the caller may add to it), else a new one; ``pills``: where the
    view pills go (always a row of their own, so that nothing beside them moves when the group changes), else
    below the row."""
    ss = st.session_state
    if row is None:
        row = st.container(horizontal=True, vertical_alignment="center", gap="small")  # one row where it fits
    if pills is None:
        pills = st.container()
    group = row.segmented_control("Views, in groups", list(groups), key=state.VIEW_GROUP, required=True,
                                  label_visibility="collapsed", wrap=True,
                                  help="  \n".join(f"**{g}**: {', '.join(views[v].title for v in names)}"
                                                    for g, names in groups.items()))
    with row.popover("", icon=":material/help:", type="tertiary", help="What each view shows"):
        for g, members in groups.items():
            st.markdown(f"**{md_escape(g)}**  \n" + "  \n".join(f"{views[v].icon} **{md_escape(views[v].title)}**: "
                                                                 f"{md_escape(views[v].help)}" for v in members))
    names = groups[group]
    shown = ss[state.VIEW]
    elsewhere = shown not in names  # a group just picked: none of its views chosen yet
    if elsewhere:
        pills.html(HIDE_SHOWN_PILL)
    name = pills.segmented_control(f"{group}: its views", names + [shown] * elsewhere, key=state.VIEW,
                                   required=True, format_func=lambda v: f"{views[v].icon} {views[v].title}",
                                   label_visibility="collapsed", wrap=True,
                                   help="  \n".join(f"**{md_escape(views[v].title)}**: {md_escape(views[v].help)}"
                                                     for v in names))
    if elsewhere:
        pills.caption(f"Pick one of the views of {md_escape(group)} above.")
    return name


# A view just picked is brought into view where it starts far down the screen (on a phone: below the title, the
# text box, the groups, the pills and the translation, about 1,000 px down, so that a tap seemed to change only the
# pill). Sent only on a run whose view differs from the last run's (never on a first visit); it waits for the run to
# end (what is drawn above the view may still grow), then scrolls the view's top under the header, unless it already
# shows in the upper three quarters of the screen (a laptop or desktop, where the view is in sight).
BRING_INTO_VIEW_JS = """<script>
(() => {
  const started = performance.now();  // %s
  const go = () => {
    const app = document.querySelector("[data-testid=stApp]");
    const top = document.querySelector(".st-key-view_top");
    const running = !app || app.getAttribute("data-test-script-state") !== "notRunning";
    if ((running || !top) && performance.now() - started < 5000) return requestAnimationFrame(go);
    if (top && top.getBoundingClientRect().top > 0.75 * window.innerHeight) top.scrollIntoView({block: "start"});
  };
  requestAnimationFrame(go);
})();
</script>"""
VIEW_TOP = "view_top"  # the key of the empty box at the top of the view (CSS: app.page.frame)
VIEW_SHOWN = "_view_shown"  # the view the last run showed


def bring_into_view(view: str) -> bool:
    """The top of the view ``view`` (a box of no height), and when it is not the view the last run showed (a pill
    tapped, Back or Forward; never a first visit), the script that scrolls it into sight (``BRING_INTO_VIEW_JS``).
    Whether it is such a view."""
    ss = st.session_state
    last, ss[VIEW_SHOWN] = ss.get(VIEW_SHOWN), view
    box = st.container(key=VIEW_TOP)  # an empty box is not drawn: it holds a mark, or the script
    changed = last is not None and last != view
    if changed:
        box.html(BRING_INTO_VIEW_JS % f"{last} -> {view} {time.monotonic_ns()}", unsafe_allow_javascript=True)
    else:
        box.html('<span class="attn-view-top"></span>')
    return changed


VIEW_SLOT = "_view_slot"  # which of two places on the page the view's container takes (0 or 1)


def view_box(changed: bool) -> Any:
    """The container a view is drawn in. Two places follow each other, one holding the view and the other an empty
    element; another view (``changed``) takes the other place. There the page had an element, so it starts the view
    afresh, and the last view's box becomes the empty element: the page drops what the last view drew at once,
    rather than keeping it (faded) under this view's title until this run ends. The same view keeps its place, whose
    elements stay until this run replaces them (no blank, no jump). (One place would not do: Streamlit keeps a box's
    old elements whenever the page had a box there, and sends an empty element and the box that replaces it in the
    same run as one message.)"""
    ss = st.session_state
    slot = ss[VIEW_SLOT] = (1 - ss.get(VIEW_SLOT, 0)) if changed else ss.get(VIEW_SLOT, 0)
    if slot:
        st.empty()
    box = st.container()
    if not slot:
        st.empty()
    return box
