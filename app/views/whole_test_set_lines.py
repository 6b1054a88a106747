"""Which line of the Whole test set is open, and how a visitor opens one: a selected row of the table, a clicked
point of the scatter, or a link's ``line=`` (the page's address holds the open line beside its table and preset).
Opening a line puts its source in the text box (so in the address's ``text=``), and every view shows it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from .. import registry
from ..page import state
from ..page.params import int_in

OPENED = "_testset_opened"  # (table name, line id, source text or None) the last line opened
SEEN = "_testset_seen"  # (table key, selected rows) last followed, so a selection opens its line once
LINE = "testset_line"  # a link's line=, opened once its table is shown
POINT_SEEN = "_testset_point_seen"  # the scatter's selection last followed
JUMPED = "_testset_jumped"  # the line last opened from outside the table: the table starts anew, that row selected
SCATTER = "testset_scatter"  # the scatter's key (its selection: a clicked point)
MAX_LINE = 10**9


def line_of(text: str) -> int | None:
    """A link's ``line=``: a line id (a whole number from 0, in ASCII digits), else None."""
    return int_in(0, MAX_LINE - 1)(text.strip())


def open_id(ss: Mapping[str, Any], choice: object) -> int | None:
    """The line of table ``choice`` that is open now: the last one opened, while the text box still holds its
    source (None when the visitor has typed another sentence since, or opened a line of another table)."""
    opened = ss.get(OPENED)
    if not opened or opened[0] != choice:
        return None
    _, line, text = opened
    return line if text is None or ss.get(state.SOURCE_TEXT) == text else None


def line_name(choice: str, line: int) -> str:
    """How the page names line ``line`` of table ``choice``: "test_2016_flickr line 57"."""
    table = {":paste": "the pasted list", ":file": "the table file"}.get(str(choice), str(choice))
    return f"{table} line {line}"


def _get(obj: object, name: str) -> object:
    """``obj[name]`` or ``obj.name`` (a widget's event is a dict with attributes; what a client sent, anything)."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _whole(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def selected_row(event: object) -> int | None:
    """The row a dataframe's selection names: None when none is selected, -1 when what the browser sent is not a
    list of whole numbers (a client may send anything)."""
    rows = _get(_get(event, "selection"), "rows")
    if rows is None or (isinstance(rows, (list, tuple)) and not rows):
        return None
    row = rows[0] if isinstance(rows, (list, tuple)) else rows
    return int(row) if _whole(row) and row >= 0 else -1


def clicked_line(event: object) -> int | None:
    """The line id of the scatter's clicked point (its ``customdata``), None when no point is selected, -1 when
    what the browser sent names no line."""
    points = _get(_get(event, "selection"), "points")
    if not points:
        return None
    point = points[0] if isinstance(points, (list, tuple)) else None
    data = point.get("customdata") if isinstance(point, Mapping) else None
    data = data[0] if isinstance(data, (list, tuple)) and data else data
    if isinstance(data, float) and data.is_integer():
        data = int(data)
    return int(data) if _whole(data) and 0 <= data <= MAX_LINE else -1


def open_line(row: pd.Series, choice: str, manifest: dict) -> bool:
    """Open the table's ``row``: its source into the text box (a multilingual model: the table's languages too).
    Returns whether the text changed (the page must run again to translate it)."""
    ss = st.session_state
    line = int(row["id"])
    if row["source"] is None or not str(row["source"]).strip():
        ss[OPENED] = (choice, line, None)
        return False
    text = state.take_text(str(row["source"]))
    changed = ss.get(state.SOURCE_TEXT) != text
    ss[state.SOURCE_TEXT] = text
    ss.pop(state.SENTENCE, None)
    given = manifest.get("input") if isinstance(manifest.get("input"), dict) else {}
    for lang_key, name in ((state.SRC_LANG, "src_lang"), (state.TGT_LANG, "tgt_lang")):
        if given.get(name) and ss.get(lang_key) is not None and ss[lang_key] != str(given[name]):
            ss[lang_key] = str(given[name])  # a multilingual model: the table's languages
            changed = True
    ss[OPENED] = (choice, line, text)
    return changed


def row_of_line(frame: pd.DataFrame, line: int) -> pd.Series | None:
    """The row of ``frame`` whose id is ``line`` (the first), or None."""
    found = frame.index[frame["id"].to_numpy() == line]
    return frame.loc[found[0]] if len(found) else None


def jump(frame: pd.DataFrame, line: int, choice: str, manifest: dict, asked_by: str) -> None:
    """Open ``line`` from outside the table (a link, a point): the table shows that row selected; the page runs again
    when the text changed. A line the table lacks: a caption saying so."""
    row = row_of_line(frame, line)
    if row is None:
        st.caption(f"The {asked_by} names line {line}, which this table does not have: nothing was opened.")
        return
    st.session_state[JUMPED] = (choice, line)
    if open_line(row, choice, manifest):
        st.rerun()


def open_asked(frame: pd.DataFrame, choice: str, manifest: dict) -> None:
    """A link's ``line=``, once its table is shown."""
    asked = st.session_state.pop(LINE, None)
    if _whole(asked) and open_id(st.session_state, choice) != asked:
        jump(frame, int(asked), choice, manifest, "link")


def follow(event: object, key: str, shown: pd.DataFrame, choice: str, manifest: dict) -> None:
    """A newly selected row opens its sentence, and the page runs again to translate it."""
    row_at = selected_row(event)
    ss = st.session_state
    rows = [row_at]
    if row_at is not None and not 0 <= row_at < len(shown):
        st.caption("The row selection the browser sent names no row of this page: nothing was opened.")
        return
    if row_at is None or ss.get(SEEN) == (key, rows):
        return
    ss[SEEN] = (key, rows)
    if open_line(shown.iloc[row_at], choice, manifest):
        st.rerun()


def follow_point(event: object, frame: pd.DataFrame, choice: str, manifest: dict) -> None:
    """A newly clicked point of the scatter opens its line."""
    line = clicked_line(event)
    ss = st.session_state
    if line is None or ss.get(POINT_SEEN) == (choice, line):
        return
    ss[POINT_SEEN] = (choice, line)
    if line < 0:
        st.caption("The point the browser sent names no line of this table: nothing was opened.")
        return
    jump(frame, line, choice, manifest, "clicked point")


def selection_of(shown: pd.DataFrame, key: str, choice: str) -> dict | None:
    """The table's selection to start with: the open line's row where this page shows it (marked followed)."""
    line = open_id(st.session_state, choice)
    if line is None:
        return None
    at = np.flatnonzero(shown["id"].to_numpy() == line)
    if not len(at):
        return None
    st.session_state[SEEN] = (key, [int(at[0])])
    return {"selection": {"rows": [int(at[0])], "columns": []}}


JUMPS = ("heatmap", "source_or_prefix", "step_through")  # views' keys


def _go(view: str) -> None:
    """Callback: show ``view``; its group follows (``app.page.selector.resolve`` sets a view's group)."""
    st.session_state.pop(state.VIEW_GROUP, None)
    st.session_state[state.VIEW] = view


def opened_line(choice: str) -> None:
    """What the last selected row or clicked point opened, and buttons to its heatmap and its ALTI+ per step."""
    opened = st.session_state.get(OPENED)
    if not opened or opened[0] != choice:
        return
    _, line, text = opened
    if text is None:
        st.warning(f"Line {line} cannot be opened in the other views: its source sentence is not on this server.",
                   icon=":material/link_off:")
        return
    if open_id(st.session_state, choice) is None:
        return  # the visitor typed another sentence since
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    row.caption(f"Open in every view: {line_name(choice, line)} (it is in the text box and the page's address, "
                "and marked on both charts). See it in:")
    for view in JUMPS:
        row.button(registry.VIEWS[view].title, key=f"testset_go_{view}", on_click=_go, args=(view,), type="tertiary")
