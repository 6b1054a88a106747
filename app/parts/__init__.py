"""What each view draws, described once as parts (charts from the figure builders, tables, notes, choices), for the
three places that draw it: the Streamlit page (``app/views/``), the offline page (``python -m app.report``) and a
notebook (``app.notebook.show``). No Streamlit here.

A view that works offline has a module here with ``INTRO`` (one caption) and ``describe(src: Source) -> list[Part]``
(named in the registry by the view's key alone); optionally ``PROBE``, the key of the probe ``describe`` runs in
``app.analysis.probes.PROBES`` (its record's cost is counted against a page request's work, its words are the page's
spinner while it runs). Its line in
the registry (:mod:`app.registry`, ``described=``) names it; the page draws its parts itself
(:mod:`app.page.described`) unless the view has a module of its own in ``app/views/`` that adds widgets (it then
calls the same functions for the same charts).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go

from transformer import Translator

from ..analysis.inference import Analysis


@dataclass
class Chart:
    """One plotly figure from a builder of :mod:`app.drawing.figures` / :mod:`app.drawing.grid` (or its plotly JSON, see
    :func:`variant`), with the caption under it and the name of its PNG."""

    figure: go.Figure | dict
    caption: str = ""
    name: str = "chart"


@dataclass
class Note:
    """A line of text (``warning``: said as a warning)."""

    text: str
    warning: bool = False


@dataclass
class Table:
    """A small table of text (every cell shown as text)."""

    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Choice:
    """A picker: one list of parts per option (the page shows the chosen one)."""

    label: str
    options: list[tuple[str, list[Part]]]
    default: int = 0


Part = Chart | Note | Table | Choice


class NeedsModel(Exception):
    """A description asked for the translator and there is none (the view is left out, and the page says so)."""


@dataclass
class Source:
    """What a description draws from: the analysed sentence, the translator that made it (None: only what the
    attentions hold) and the options of the offline page (``method``, ``steps``)."""

    analysis: Analysis
    translator: Translator | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def tr(self) -> Translator:
        """The translator; raises :class:`NeedsModel` without one."""
        if self.translator is None:
            raise NeedsModel
        return self.translator


def planned(plan: tuple[bool, list[str]]) -> tuple[bool, list[Part]]:
    """A work plan's answer (``app.limits.work``'s ``plan_*``: whether the view's job fits the work allowed, and
    its notices) with the notices as the view's first parts, one :class:`Note` each."""
    fits, notices = plan
    return fits, [Note(text) for text in notices]


def plain(text: str) -> str:
    """A plotly text (HTML-like: ``<b>``, ``&lt;``) as plain text."""
    return html.unescape(re.sub(r"<[^>]*>", "", str(text or "")))


def as_json(chart: Chart) -> Chart:
    """``chart`` with its figure as plotly JSON, made once: the base of many :func:`variant` copies."""
    return chart if isinstance(chart.figure, dict) else Chart(chart.figure.to_plotly_json(), chart.caption, chart.name)


def variant(chart: Chart, z: np.ndarray, title: str, name: str) -> Chart:
    """``chart`` with other numbers of the same shape in its first trace and another title: what its builder would
    make of them, copied instead of built again (the offline page holds hundreds). Only what differs is new; the
    rest (the hover's tokens, the axes) is ``chart``'s own JSON, shared, never changed in place (the page rounds a
    copy: ``app.report.figure_json``). Give it :func:`as_json` of a chart, else its figure is read each time."""
    spec = chart.figure if isinstance(chart.figure, dict) else chart.figure.to_plotly_json()
    layout = spec["layout"]
    return Chart({**spec, "data": [{**spec["data"][0], "z": np.asarray(z, dtype=np.float64)}, *spec["data"][1:]],
                  "layout": {**layout, "title": {**layout["title"], "text": title}}}, chart.caption, name)
