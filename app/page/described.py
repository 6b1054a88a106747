"""A view drawn from its description alone (``app.parts``): the registry line of a view with a description and no
page module of its own gets a :class:`Page` from here, which draws the same parts the offline page and a notebook
draw: a chart with its caption, a note, a table, a picker over options (its choice in the address). So a new view
that works offline is one module (its description) and its registry line."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from ..analysis import cached, probes
from ..limits import ledger
from ..parts import Chart, Choice, Note, Part, Source, Table
from . import controls, plots
from .params import Param, int_in
from .state import ViewContext

CHOICES = 6  # pickers of a description whose choice the address carries (``c1`` ... ``c6``, in drawing order)
SEGMENTED = 5  # a picker of at most this many short options is a row of buttons, else a drop-down list
SHORT = 24  # characters of the longest option of a row of buttons


class Page:
    """The page's side of a described view: ``PARAMS`` (one per picker, its option counted from 1) and
    ``render(ctx)``. ``view``: the view's key in the registry (its widgets' keys start with it)."""

    def __init__(self, view: str, description: ModuleType) -> None:
        self.view, self.description = view, description
        self.PARAMS = tuple(Param(f"c{i + 1}", self.key(i), _option_from_one, None, lambda v: str(int(v) + 1))
                            for i in range(CHOICES))

    def key(self, i: int) -> str:
        """The widget key of the description's ``i``-th picker (0-based, in drawing order)."""
        return f"{self.view}_choice{i + 1}"

    def render(self, ctx: ViewContext) -> None:
        """The description's intro, then its parts (computed once per sentence, within the request's work)."""
        st.caption(controls.md_escape(self.description.INTRO))
        self.draw(parts_of(ctx, self.view, self.description))

    def draw(self, parts: list[Part]) -> None:
        """Draw ``parts`` (a description's) with this view's widget keys."""
        _Drawing(self).parts(parts)


def _option_from_one(text: str) -> int | None:
    value = int_in(1, 10_000)(text)
    return None if value is None else value - 1


def parts_of(ctx: ViewContext, view: str, description: ModuleType) -> list[Part]:
    """``description.describe`` (the view ``view``'s) of the shown sentence, kept with the other results (within the
    byte budget). The probe it runs (``description.PROBE``, a key of ``app.analysis.probes.PROBES``), when it names
    one, is counted against the request's work and says what the page shows while it runs (``cached.job``)."""
    tr, a = ctx.tr, ctx.result
    probe = probes.PROBES[description.PROBE] if hasattr(description, "PROBE") else None
    ledger.spend(probe.cost(tr, a) if probe else 0.0)
    key = ctx.model.key("described", view, a.text, a.settings, a.ablated)
    run = lambda: description.describe(Source(a, tr))
    return cached.RESULTS.get(key, lambda: cached.job(run, probe.working, probe.heavy) if probe else cached.job(run))


class _Drawing:
    """One drawing of a description's parts: pickers are numbered in the order they are drawn."""

    def __init__(self, page: Page) -> None:
        self.page, self.pickers, self.charts = page, 0, 0

    def parts(self, parts: list[Part], row: Any = None) -> None:
        """Each part in order; a picker whose chosen option starts with another picker puts both in one row."""
        for part in parts:
            if isinstance(part, Choice):
                self.choice(part, row)
            elif isinstance(part, Chart):
                self.chart(part)
            elif isinstance(part, Note):
                (st.warning if part.warning else st.caption)(controls.md_escape(part.text))
            elif isinstance(part, Table):
                self.table(part)
            else:
                raise TypeError(f"not a part: {type(part).__name__}")
            row = None

    def choice(self, part: Choice, row: Any) -> None:
        """The picker, then the chosen option's parts."""
        labels = [label for label, _ in part.options]
        if not labels:
            return
        key = self.page.key(self.pickers)
        self.pickers += 1
        where = row if row is not None else st.container(horizontal=True, gap="small")
        options = list(range(len(labels)))
        short = len(labels) <= SEGMENTED and max(len(x) for x in labels) <= SHORT
        if short:
            chosen = controls.choose(where.segmented_control, part.label, options, key, part.default,
                                     format_func=labels.__getitem__, required=True)
        else:
            chosen = controls.choose(where.selectbox, part.label, options, key, part.default,
                                     format_func=labels.__getitem__)
        inner = part.options[chosen if chosen is not None else part.default][1]
        self.parts(inner, where if inner and isinstance(inner[0], Choice) else None)

    def chart(self, part: Chart) -> None:
        self.charts += 1
        name = f"{self.page.view}_{self.charts}_{part.name}".replace("-", "_")
        fig = part.figure if isinstance(part.figure, go.Figure) else go.Figure(part.figure)  # a variant: its JSON
        plots.chart(fig, part.name, name)
        if part.caption:
            st.caption(controls.md_escape(part.caption))

    def table(self, part: Table) -> None:
        if part.caption:
            st.caption(controls.md_escape(part.caption))
        frame = pd.DataFrame(part.rows, columns=part.columns)
        if len(part.columns) > 1:  # the first column stays in view while the others scroll
            frame = frame.set_index(part.columns[0])
        st.dataframe(frame, width="stretch")
