"""The view selector: the views in groups, each with one line of help."""

from __future__ import annotations

import streamlit as st

from . import state
from .controls import md_escape


def resolve(views: dict, groups: dict[str, list[str]]) -> str:
    """The view this run shows (a link, Back/Forward or a new group may have changed it), set in the session
    before the selector is drawn, so the page can plan its work for that view first."""
    ss = st.session_state
    if ss.get(state.VIEW) not in views:
        ss[state.VIEW] = state.DEFAULT_VIEW
    if ss.get(state.VIEW_GROUP) not in groups:
        ss[state.VIEW_GROUP] = views[ss[state.VIEW]].group
    names = groups[ss[state.VIEW_GROUP]]
    if ss[state.VIEW] not in names:  # a new group: the view last seen in it, else its first
        last = ss.get(f"_last_view_{ss[state.VIEW_GROUP]}")
        ss[state.VIEW] = last if last in names else names[0]
    return ss[state.VIEW]


def view_selector(views: dict, groups: dict[str, list[str]], row=None) -> str:
    """The views in groups: a group, then a view of it (each with one line of help); returns the view's key.
    A link or Back/Forward sets the view, and its group follows (:func:`resolve`, which the page calls first, once
    a run). ``row``: a horizontal container to draw in (the caller may add to it), else a new one."""
    ss = st.session_state
    if row is None:
        row = st.container(horizontal=True, vertical_alignment="center", gap="small")  # one row where it fits
    group = row.segmented_control("Views, in groups", list(groups), key=state.VIEW_GROUP, required=True,
                                  label_visibility="collapsed", wrap=True,
                                  help="  \n".join(f"**{g}**: {', '.join(views[v].title for v in names)}"
                                                    for g, names in groups.items()))
    names = groups[group]
    if ss[state.VIEW] not in names:  # a new group: the view last seen in it, else its first
        last = ss.get(f"_last_view_{group}")
        ss[state.VIEW] = last if last in names else names[0]
    name = row.segmented_control(f"{group}: its views", names, key=state.VIEW, required=True,
                                 format_func=lambda v: f"{views[v].icon} {views[v].title}",
                                 label_visibility="collapsed", wrap=True,
                                 help="  \n".join(f"**{md_escape(views[v].title)}**: {md_escape(views[v].help)}"
                                                   for v in names))
    with row.popover("", icon=":material/help:", type="tertiary", help="What each view shows"):
        for g, members in groups.items():
            st.markdown(f"**{md_escape(g)}**  \n" + "  \n".join(f"{views[v].icon} **{md_escape(views[v].title)}**: "
                                                                 f"{md_escape(views[v].help)}" for v in members))
    ss[f"_last_view_{group}"] = name
    return name
