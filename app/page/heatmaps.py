"""The big chart of one attention matrix, shared by several views: a server-built picture (the first screen's) or
the plotly figure, with a window of a long sentence chosen by range sliders (bounded: what the browser must draw
stays small) and the captions that read it."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import streamlit as st

from ..analysis.inference import Analysis
from ..drawing import figures, svg
from ..drawing.analysis import AXIS_TITLES, first_numbers, one_head
from . import state
from .controls import REPEATS_NOTE, colour_range, has_repeats, keep_if, md_escape, range_caption
from .params import FROM_LINK, Param
from .plots import css_name, plotly, swipe_hint

PICTURE = "attn_picture_"  # the key (CSS class st-key-attn_picture_...) of every container of a server-built picture


def picture(image: str, key: str, title: str, rows: str | None = None) -> None:
    """A server-built SVG (``app.drawing.svg``) as an image in Markdown (no raw HTML; ``title`` its alt text, what a
    screen reader says of it): the browser draws it natively in the page's first frame, nothing in it can run, and
    its text is only what ``app.drawing.svg`` escaped. It keeps
    labels ``svg.MIN_FONT`` px tall at the least: on a narrow screen it scrolls sideways instead of shrinking, with
    its left band ``rows`` (``svg.heatmap_svg(rows_only=True)``: the row labels on white) kept at the box's left edge
    over it meanwhile (a frozen column; only while the box is narrower than the picture, a container query). On a
    session's first run the page then lets the browser paint it (``state.let_the_browser_paint``)."""
    key = css_name(key)  # as Streamlit writes it in the classes the CSS below names
    need = svg.min_width(image)
    # the swipe hint shows only while the box is narrower than the picture (a container query on the box)
    st.html(f"<style>.st-key-{PICTURE}{key} img {{min-width: {need}px;}}"
            f" .st-key-{PICTURE}{key} {{container-type: inline-size;}}"
            f" .st-key-{PICTURE}{key} > :has(> .st-key-swipe_{key}) {{min-width: {need}px;}}"  # the hint stays
            f" .st-key-{PICTURE}{key} .st-key-swipe_{key} {{position: sticky; left: 0; width: 100cqw;}}"  # put
            f" @container (min-width: {need}px) {{.st-key-swipe_{key} {{display: none;}}}}"
            + (_band_css(image, rows, key, need) if rows else "") + "</style>")
    box = st.container(key=PICTURE + key)
    swipe_hint(box, key)
    inner = box.container(key=f"rows_{key}") if rows else box
    inner.markdown(f"![{md_escape(title)}]({svg.data_uri(image)})")
    if rows:
        inner.html(f'<div class="{ROW_BAND}{key}"></div>')
    state.let_the_browser_paint()  # a new visitor: the picture painted before the page's controls are built


ROW_BAND = "attn-row-labels-"  # the CSS class of a picture's frozen column (its left band, drawn as a background)


def _band_css(image: str, rows: str, key: str, need: int) -> str:
    """The CSS of a picture's frozen column: the picture and the band in one grid cell; the band (the SVG ``rows``
    as a background, at the picture's scale) sticky at the box's left edge, above the picture and see-through to
    touches; only while the box is narrower than the picture."""
    size = re.compile(r'<svg[^>]* width="([0-9.]+)" height="([0-9.]+)"')
    width, _ = (float(v) for v in size.search(image).groups())
    band_w, band_h = (float(v) * need / width for v in size.search(rows).groups())  # drawn at the picture's scale
    inner, holder, band = f".st-key-rows_{key}", f":has(> * > .{ROW_BAND}{key})", f".{ROW_BAND}{key}"
    return (f" {inner} {{display: grid; grid-template-columns: minmax(0, 1fr); min-width: {need}px;}}"
            f" {inner} > * {{grid-area: 1 / 1; min-width: 0;}} {inner} > {holder} {{pointer-events: none;"
            f" display: none;}} {band} {{position: sticky; left: 0; z-index: 3; width: {band_w:.2f}px;"
            f" height: {band_h:.2f}px; background: url('{svg.data_uri(rows)}') 0 0 / 100% 100% no-repeat;}}"
            f" @container (max-width: {need - 0.5}px) {{{inner} > {holder} {{display: block;}}}}")


WINDOW = 60  # rows and columns a chart of a long sentence shows at first
MOST = 120  # and at the most (what the browser must draw stays bounded)
MOST_CELLS = 5_000  # and rows x columns at the most: a larger window makes a picture of megabytes
_SPAN = re.compile(r"([0-9]{1,5})-([0-9]{1,5})")


def _parse_span(text: str) -> tuple[int, int] | None:
    match = _SPAN.fullmatch(text.strip())
    if not match:
        return None
    a, b = int(match.group(1)), int(match.group(2))
    return (a, b) if 1 <= a <= b else None


def window_params(key: str) -> tuple[Param, Param]:
    """The address parameters of a long sentence's window in the chart ``key``: rows ``qw=1-60`` and columns
    ``kw=1-60`` (positions counted from 1, both ends included)."""
    return tuple(span_param(name, f"{key}_{axis}") for name, axis in (("qw", "qwin"), ("kw", "kwin")))


def window(n_queries: int, n_keys: int, key: str,
           labels: tuple[str, str] = ("Query rows", "Key columns")) -> tuple[int, int, int, int]:
    """``(q0, q1, k0, k1)``, as slice bounds: everything for a short sentence; for a longer axis a window of it,
    chosen with a range slider (positions from 1, at first ``WINDOW`` of them, at the most ``MOST``) labelled
    ``labels`` (what the chart's rows and columns are)."""
    if max(n_queries, n_keys) <= WINDOW:
        for param in window_params(key):  # no window to choose: a link's window does not apply
            keep_if(param.key, False)
        return 0, n_queries, 0, n_keys
    st.caption(f"Long sentence: a window of it at a time (at most {MOST} rows and columns); choose it below, or "
               "drag on an interactive chart to zoom.")
    bounds = []
    for column, label, n, param in zip(st.columns(2), labels, (n_queries, n_keys), window_params(key)):
        bounds += span_slider(column, label, n, param)
    q0, q1, k0, k1 = bounds
    if (q1 - q0) * (k1 - k0) > MOST_CELLS:  # both axes wide: fewer columns, so the chart's cells stay bounded
        k1 = k0 + max(1, MOST_CELLS // (q1 - q0))
        st.caption(f"Showing {labels[1].split(' (')[0].lower()} {k0 + 1}–{k1} of the chosen "
                   f"{k0 + 1}–{bounds[3]}: at most {MOST_CELLS:,} cells at a time (rows × columns).")
    return q0, q1, k0, k1


def span_param(name: str, key: str, size: int = WINDOW) -> Param:
    """The address parameter of one window slider (``name=1-60``, positions from 1, both ends included), whose
    window is at first ``size`` positions."""
    return Param(name, key, _parse_span, (1, size), lambda v: f"{v[0]}-{v[1]}")


def span_slider(container: Any, label: str, n: int, param: Param, most: int | None = None) -> tuple[int, int]:
    """Slice bounds of one axis of ``n`` positions: all of it when it fits the window ``param`` starts with
    (``WINDOW`` positions unless it says otherwise), else the window a range slider under ``param`` chooses (at
    the most ``most`` positions, default ``MOST``: what the browser must draw stays bounded)."""
    most = MOST if most is None else most
    size = param.default[1]
    if n <= size:
        keep_if(param.key, False)
        return 0, n
    span = st.session_state.get(param.key)
    keep_if(param.key, isinstance(span, tuple) and len(span) == 2 and 1 <= span[0] <= span[1] <= n)
    st.session_state.get(FROM_LINK, {}).pop(param.key, None)
    st.session_state.setdefault(param.key, (1, size))
    first, last = container.slider(label, 1, n, key=param.key, persist_state="session")
    if last - first + 1 > most:
        last = first + most - 1
        container.caption(f"Showing {first}–{last}: at most {most} at a time.")
    return first - 1, last


def draw_heatmap(result: Analysis, kind: str, layer: int, head: str, key: str, attn: np.ndarray | None = None,
                 value_name: str = "weight", as_svg: bool = False,
                 bounds: tuple[int, int, int, int] | None = None) -> None:
    """The big heatmap of one head (or the mean), with a window for long sentences (``attn``: other numbers of the
    same shape to draw instead of the weights, e.g. the weighted norms). ``as_svg``: drawn as an SVG built here
    (no plotly.js for the browser to load), with a row reader under it. ``bounds``: a window the view chose already
    (:func:`window`), else its sliders are drawn here."""
    picked = one_head(result.attention(kind) if attn is None else attn, kind, layer, head)
    weights = picked.weights
    queries, keys = result.axes(kind)
    q0, q1, k0, k1 = window(len(queries), len(keys), key) if bounds is None else bounds
    qt, kt = AXIS_TITLES[kind]
    zmin, zmax = colour_range(weights[q0:q1, k0:k1]) if value_name == "weight" else \
        (0.0, max(float(weights.max()), 1e-9))
    qf, kf = first_numbers(kind)
    args = dict(title=picked.title, query_title=qt, key_title=kt, query_offset=q0, key_offset=k0,
                zmin=zmin, zmax=zmax, value_name=value_name, query_first=qf, key_first=kf)
    name = picked.name
    if as_svg:
        svg_heatmap(weights[q0:q1, k0:k1], queries[q0:q1], keys[k0:k1], key, name,
                    alt=picture_alt(result.text, args["title"], qt, kt), **args)
    else:
        fig = figures.attention_heatmap(weights[q0:q1, k0:k1], queries[q0:q1], keys[k0:k1], **args)
        plotly(st, fig, figures.plotly_config(name), key)
    if value_name == "weight":
        range_caption(weights, kind)
    if has_repeats(queries, keys):
        st.caption(REPEATS_NOTE)


ALT_CHARS = 120  # characters of the sentence a picture's alt text quotes at the most


def picture_alt(text: str, title: str, query_title: str, key_title: str) -> str:
    """A heatmap picture's text alternative (what a screen reader says of it): its sentence, its head (the chart's
    title) and what its rows and columns are."""
    sentence = " ".join(str(text).split())
    sentence = sentence if len(sentence) <= ALT_CHARS else sentence[:ALT_CHARS - 1].rstrip() + "…"
    return (f"Heatmap of {title} for the sentence “{sentence}”: rows are the {short(query_title)}, columns the "
            f"{short(key_title)}; darker cells carry more weight.")


def short(axis_title: str) -> str:
    """An axis title without its explanation in brackets, in the plural: "output token (query = ...)" -> "output
    tokens"."""
    return re.sub(r"\s*\(.*\)$", "", axis_title).strip() + "s"


def svg_heatmap(weights: np.ndarray, queries: list[str], keys: list[str], key: str, name: str,
                alt: str | None = None, **args) -> None:
    """The heatmap as a server-built SVG shown as an image (``picture``, ``alt`` its text alternative, else the
    title), a "Read a row" picker that outlines a query row and lists its largest values (what a click or a hover on
    a cell of the plotly chart gives), and an SVG download (with a tooltip on every cell)."""
    rows = list(range(len(queries)))
    qfirst = args.get("query_offset", 0) + args.get("query_first", 1)  # numbered as the chart's labels
    kfirst = args.get("key_offset", 0) + args.get("key_first", 1)
    row_key = f"{key}_row"
    if st.session_state.get(row_key) not in rows:
        st.session_state.pop(row_key, None)
    chosen = st.session_state.get(row_key)
    image = svg.heatmap_svg(weights, queries, keys, highlight_row=chosen, **args)
    picture(image, key, alt or args.get("title", "attention heatmap"),
            svg.heatmap_svg(weights, queries, keys, rows_only=True, **args))
    c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
    row = c1.selectbox("Read a row", rows, index=None, key=row_key, placeholder="Pick a query row to read its values…",
                       format_func=lambda i: f"{i + qfirst}: {queries[i]}")
    c2.download_button("SVG", image, file_name=f"{name}.svg", mime="image/svg+xml", icon=":material/download:",
                       key=f"{key}_svg", width="stretch")
    if row is not None:
        top = svg.row_summary(weights[row])
        numbered = [f"{t} ({j})" for j, t in enumerate(keys, kfirst)]  # which ▁a: the key's number, as on the axis
        listed = " · ".join(f"{md_escape(numbered[j])} {value:.3f}" for j, value in top)
        st.caption(f"Query {row + qfirst} ({md_escape(queries[row])}) takes the most from: {listed}"
                   + (f" (the largest {len(top)} of {len(keys)})" if len(keys) > len(top) else ""))
