"""Every plotly chart of the page: drawn with its own look and Streamlit's theme off (:func:`plotly`), a wide one at the
width its labels need, scrolled sideways with a hint where the page is narrower and its row labels kept at the box's
left edge meanwhile (:func:`chart`; the frozen column: :mod:`app.page.frozen`)."""

from __future__ import annotations

import copy
import re
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from ..drawing import figures, layout, row_labels
from . import frozen

SWIPE_HINT = ("↔ Scroll or swipe sideways for the whole chart (kept wide so that its labels stay readable; "
              "keyboard: Tab here, then ← →).")


def swipe_hint(box: Any, key: str) -> None:
    """The hint at the top of a box that scrolls sideways (``SWIPE_HINT``, in the container ``swipe_{key}``): a line
    the keyboard can reach (Tab), from which the arrow keys scroll the box, so that every part of the chart is
    reachable without a mouse (and the box holds something focusable, as WCAG 2.1.1 asks of a scrolling region)."""
    box.container(key=f"swipe_{key}").html(f'<p class="attn-swipe" tabindex="0">{SWIPE_HINT}</p>')


def plotly(where: Any, fig: go.Figure | dict, config: dict, key: str, width: int | None = None,
           fixed_rows: bool = False, **events: Any) -> Any:
    """``where.plotly_chart`` of ``fig`` as the page draws every chart: with its own look (``layout.own_look``, on a
    copy: a figure may be a cached one, shared) and Streamlit's theme off, so that it is drawn once. At ``width`` px
    (a wide chart: the figure's layout says so too, and its data arrays count as unchanged while the chart stays),
    Streamlit's element hands plotly the same figure after mounting, and nothing is drawn again; without one it
    fills its column, whose width the element measures after a first drawing. ``fixed_rows``: no zoom or pan along
    the rows (the frozen labels stay on them). ``events``: ``st.plotly_chart``'s selection arguments; its answer is
    returned."""
    spec = layout.own_look(fig.to_dict() if isinstance(fig, go.Figure) else copy.deepcopy(fig))
    if width is not None:
        spec["layout"].update(width=width, datarevision=1)  # a new figure is a new element, drawn afresh
    if fixed_rows:
        for name, axis in spec["layout"].items():
            if name.startswith("yaxis") and isinstance(axis, dict):
                axis["fixedrange"] = True
    drawn = go.Figure(spec, _validate=False)  # checked once, by its builder (plotly's private switch: a test holds
    # the figure equal to the checked one)
    drawn.layout.template = None  # not plotly's default one again (a new figure takes it)
    return where.plotly_chart(drawn, config=config, key=key, theme=None,
                              **({"width": width} if width is not None else {}), **events)


def chart(fig: Any, filename: str, key: str, where: Any = st, width: int | None = None, **events: Any) -> Any:
    """``st.plotly_chart`` at a width where no two labels touch (``layout.min_width``, or ``width``): a figure
    wider than its column scrolls sideways, with a hint above it that shows only while it does (a container
    query on the box, so a wide screen never sees it), and its row labels kept at the box's left edge while it
    scrolls (``row_labels.row_labels``: a frozen column over the chart, shown only while the box is narrower; such a
    chart zooms and pans along its columns only, as a zoom along its rows would move them under the frozen labels).
    A chart of :data:`layout.OWN_WIDTH` or more is drawn at that width on every screen (:func:`plotly`).
    ``events``: ``st.plotly_chart``'s selection arguments; its answer is returned."""
    need = width if width is not None else layout.min_width(fig)
    config = figures.plotly_config(filename)
    if need <= layout.PHONE_PLOT:
        return plotly(where, fig, config, key, **events)
    plot, key = key, css_name(key)  # the chart's own key; the rest's (and their CSS classes) as Streamlit writes it
    box = where.container(key=f"wide_{key}")
    rows = row_labels.row_labels(fig)
    box.html(f"<style>.st-key-wide_{key} {{overflow-x: auto; overflow-y: hidden; container-type: inline-size;}}"
             f" .st-key-wide_{key} > div:has([data-testid=stPlotlyChart]) {{min-width: {need}px;}}"
             f" .st-key-wide_{key} > :has(> .st-key-swipe_{key}) {{min-width: {need}px;}}"  # the hint stays put:
             f" .st-key-swipe_{key} {{position: sticky; left: 0; width: 100cqw;}}"  # in a row as wide as the chart
             f" @container (min-width: {need}px) {{.st-key-swipe_{key} {{display: none;}}}}"
             + (frozen.frozen_css(key, need, rows) if rows else "") + "</style>")
    swipe_hint(box, key)
    inner = box.container(key=f"rows_{key}") if rows else box
    answer = plotly(inner, fig, config, plot, width=need if need >= layout.OWN_WIDTH else None,
                    fixed_rows=rows is not None, **events)
    if rows:
        frozen.band(inner, key, rows)
    return answer


def css_name(key: str) -> str:
    """A widget key as the CSS class Streamlit gives its element (``st-key-`` and this): every character but ASCII
    letters, digits, ``_`` and ``-`` becomes ``-``. A page's own CSS names an element by this, never by the raw key
    (a space in it once left a chart's frozen column under the chart and its swipe hint on a desktop)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "-", key.strip())
