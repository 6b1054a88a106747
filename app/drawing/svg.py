"""The first screen's heatmap as a plain SVG string built on the server: no plotly.js to fetch and parse.

Same arrays and same colour scale as :func:`app.drawing.figures.attention_heatmap`; every cell is a ``<rect>`` whose
``<title>`` (the hover tooltip of the downloaded file) names the query token, the key token and the weight. Every
piece of text comes from the visitor's sentence, so every piece goes through :func:`app.drawing.analysis.escape`: the
SVG holds no markup but the markup built here. No Streamlit here.

The page shows it as an image (:func:`data_uri`): the browser draws it natively, like a PNG, in the page's first
frame (no JavaScript turns it into elements, no script in it could ever run). Lean on purpose: a row's cells are
one line with no whitespace between them and numbers carry no more digits than they need (whole pixels where
exact, else one decimal). The cells' tooltips show in the downloaded file; in the page's image they are the
numbers behind the picture, for whoever reads its source.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Sequence

import numpy as np

from .analysis import unique_labels
from .figures import ATTENTION_SCALE
from .layout import MIN_FONT, short_title

CSS_FONT = "'Source Sans', 'Source Sans Pro', sans-serif"  # the page's font; a generic one in a downloaded file
LABEL_CHARS = 24  # longer tick labels are cut with "…" (the full token is in the label's own tooltip)
COLOURBAR_W = 12
# MIN_FONT (from figures): the smallest label, also as drawn: the chart never shrinks below it (it scrolls sideways)


CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def escape(text: object) -> str:
    """Text for the SVG: HTML-escaped, control characters (newlines too) as spaces, so the SVG stays one block of
    HTML with no blank line in it and valid XML."""
    return html.escape(CONTROL.sub(" ", str(text)), quote=True)  # XML decodes &quot; (plotly does not)


def _rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.float64)


def colours(values: np.ndarray, zmin: float, zmax: float, scale: list = ATTENTION_SCALE) -> np.ndarray:
    """``#rrggbb`` per value: linear in RGB between the scale's stops (as plotly does), clipped to the range."""
    span = zmax - zmin if zmax > zmin else 1.0
    t = np.clip((np.asarray(values, dtype=np.float64) - zmin) / span, 0.0, 1.0)
    stops = np.array([s for s, _ in scale])
    rgb = np.stack([_rgb(c) for _, c in scale])  # (stops, 3)
    channels = np.stack([np.interp(t, stops, rgb[:, c]) for c in range(3)], axis=-1)  # (..., 3)
    ints = np.rint(channels).astype(int)
    return np.vectorize(lambda r, g, b: f"#{r:02x}{g:02x}{b:02x}")(ints[..., 0], ints[..., 1], ints[..., 2])


def _cut(label: str) -> str:
    """An escaped label cut to at most ``LABEL_CHARS`` characters of text (cut unescaped, escaped again)."""
    raw = html.unescape(label)
    return label if len(raw) <= LABEL_CHARS else escape(raw[:LABEL_CHARS - 1]) + "…"


def _text_width(label: str, size: int) -> float:
    return 0.6 * size * len(html.unescape(label))


def _n(value: float) -> str:
    """A coordinate as short as it is exact to 0.1 px: ``40``, ``37.6``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def heatmap_svg(weights: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str], title: str = "",
                query_title: str = "query", key_title: str = "key", zmin: float = 0.0, zmax: float | None = None,
                value_name: str = "weight", query_offset: int = 0, key_offset: int = 0,
                highlight_row: int | None = None, query_first: int = 1, key_first: int = 1,
                rows_only: bool = False) -> str:
    """One attention matrix ``(Q, K)`` as an SVG document: rows queries, columns keys, a colour bar; hover a cell
    for "query (position) → key (position): weight 0.123" (positions numbered as everywhere on the page: from
    ``query_first``/``key_first`` at the start of the whole axis, see ``app.drawing.analysis.FIRST_NUMBER``).
    ``highlight_row`` outlines one query row. ``rows_only``: the picture's left band alone (its row labels and the
    query axis' title on white, at the same places, as tall as the picture and as wide as its left margin), which
    the page keeps at the left edge while the picture scrolls sideways (a frozen column)."""
    w = np.asarray(weights, dtype=np.float64)
    q, k = w.shape
    zmax = max(float(w.max()), 1e-9) if zmax is None else float(zmax)
    query_tokens = [CONTROL.sub(" ", str(t)) for t in query_tokens]
    key_tokens = [CONTROL.sub(" ", str(t)) for t in key_tokens]
    ylabels = unique_labels(query_tokens, query_offset + query_first)
    xlabels = unique_labels(key_tokens, key_offset + key_first)
    qtext, ktext = [escape(t) for t in query_tokens], [escape(t) for t in key_tokens]
    vname = escape(value_name)
    font = 12 if max(q, k) <= 30 else MIN_FONT
    ch = 18 if max(q, k) <= 40 else 14  # cell height: a short sentence fits a laptop's
    cw = max(ch, min(40.0, 640.0 / k))  # first screen; cell width: wider cells for short sentences
    xwidth = max(_text_width(_cut(s), font) for s in xlabels)
    angle = 60 if k > 8 or xwidth > cw - 4 else 0  # upright only where every label fits its column
    ywidth = max(_text_width(_cut(s), font) for s in ylabels)
    left = math.ceil(28 + ywidth + 8)  # axis title, labels, gap (whole pixels: shorter coordinates)
    top = 28 if title else 10
    grid_w, grid_h = cw * k, ch * q
    bottom = 4 + (xwidth * math.sin(math.radians(angle)) if angle else font) + 8 + 20
    width = left + grid_w + 24 + COLOURBAR_W + 60
    # the query axis' title runs down beside the rows; on a short sentence it is longer than the rows, so it gets
    # room of its own below the chart's title (never over it) and the picture grows to hold it
    if _text_width(escape(query_title), 12) > grid_h:  # a few rows: the title without its explanation
        query_title = short_title(query_title)
    ytitle = _text_width(escape(query_title), 12)
    cy = max(top + grid_h / 2, top + ytitle / 2)
    height = max(top + grid_h + bottom, cy + ytitle / 2 + 6)
    if rows_only:
        return _rows_band(ylabels, qtext, font, left, top, ch, grid_h, height, query_title, cy)
    fill = colours(w, zmin, zmax)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="attn-heatmap" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" style="max-width:100%;min-width:{width * MIN_FONT / font:.0f}px;'
           f'height:auto" font-family="{escape(CSS_FONT)}" '
           f'role="img" aria-label="{escape(title)}" data-zmin="{zmin:.6g}" data-zmax="{zmax:.6g}">']
    if title:
        out.append(f'<text class="title" x="0" y="18" font-size="15" font-weight="600">{escape(title)}</text>')
    xs = [_n(left + j * cw) for j in range(k)]
    size = f'width="{_n(cw - 1)}" height="{_n(ch - 1)}"'
    keys = [f"{ktext[j]} ({j + key_offset + key_first}): {vname} " for j in range(k)]
    rows = []
    for i in range(q):  # one line per row, no whitespace between its cells
        y, query = _n(top + i * ch), f"{qtext[i]} ({i + query_offset + query_first}) → "
        rows.append("".join(f'<rect x="{xs[j]}" y="{y}" {size} fill="{fill[i, j]}"><title>{query}{keys[j]}'
                            f'{w[i, j]:.3f}</title></rect>' for j in range(k)))
    out.append('<g class="cells">' + "\n".join(rows) + "</g>")
    if highlight_row is not None and 0 <= highlight_row < q:
        out.append(f'<rect class="row-highlight" x="{left - 1:.1f}" y="{top + highlight_row * ch - 1:.1f}" '
                   f'width="{grid_w + 1:.1f}" height="{ch + 1:.1f}" fill="none" stroke="#d62728" stroke-width="2"/>')
    out += _row_texts(ylabels, qtext, font, left, top, ch)
    ty = top + grid_h + 8
    for j, label in enumerate(xlabels):
        x = left + (j + 0.5) * cw
        rotate = f' transform="rotate(-{angle} {_n(x)} {_n(ty)})"' if angle else ""
        anchor = "end" if angle else "middle"
        out.append(f'<text class="xtick" x="{_n(x)}" y="{_n(ty)}" font-size="{font}" text-anchor="{anchor}" '
                   f'dominant-baseline="hanging"{rotate}><title>{ktext[j]}</title>{_cut(label)}</text>')
    out.append(f'<text class="axis-title" x="{left + grid_w / 2:.1f}" y="{top + grid_h + bottom - 6:.0f}" '
               'font-size="12" '
               f'text-anchor="middle">{escape(key_title)}</text>')
    out.append(_query_title(query_title, cy))
    out.append(_colourbar(left + grid_w + 24, top, min(grid_h, 260.0), zmin, zmax, value_name))
    out.append("</svg>")
    return "\n".join(out)


def _row_texts(ylabels: list[str], qtext: list[str], font: int, left: float, top: float, ch: float) -> list[str]:
    """The row labels: right-aligned before the rows, each in the middle of its row."""
    return [f'<text class="ytick" x="{_n(left - 6)}" y="{_n(top + (i + 0.5) * ch)}" font-size="{font}" '
            f'text-anchor="end" dominant-baseline="middle"><title>{qtext[i]}</title>{_cut(label)}</text>'
            for i, label in enumerate(ylabels)]


def _query_title(query_title: str, cy: float) -> str:
    """The query axis' title, turned, down the left edge."""
    return (f'<text class="axis-title" x="14" y="{cy:.1f}" font-size="12" text-anchor="middle" '
            f'transform="rotate(-90 14 {cy:.1f})">{escape(query_title)}</text>')


def _rows_band(ylabels: list[str], qtext: list[str], font: int, left: float, top: float, ch: float, grid_h: float,
               height: float, query_title: str, cy: float) -> str:
    """The picture's left band (``heatmap_svg(rows_only=True)``): white along the rows, the row labels and the query
    axis' title where the picture has them; ``left`` px wide, as tall as the picture."""
    return "\n".join([f'<svg xmlns="http://www.w3.org/2000/svg" class="attn-row-labels" width="{left}" '
                      f'height="{height:.0f}" viewBox="0 0 {left} {height:.0f}" font-family="{escape(CSS_FONT)}">',
                      f'<rect x="0" y="{_n(top)}" width="{left}" height="{_n(grid_h)}" fill="#ffffff"/>',
                      *_row_texts(ylabels, qtext, font, left, top, ch), _query_title(query_title, cy), "</svg>"])


def data_uri(svg: str) -> str:
    """The SVG as a ``data:`` address for an image (base64: nothing in it can end the address early)."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def min_width(svg: str) -> int:
    """The narrowest the picture may be drawn (px) with its labels still ``MIN_FONT`` px tall."""
    match = re.search(r'min-width:(\d+)px', svg)
    return int(match.group(1)) if match else 0


def _colourbar(x: float, y: float, h: float, zmin: float, zmax: float, value_name: str) -> str:
    """A vertical colour bar: the scale as a gradient (top = ``zmax``), three tick values and its name."""
    stops = "".join(f'<stop offset="{1 - s:.3f}" stop-color="{c}"/>' for s, c in reversed(ATTENTION_SCALE))
    parts = [f'<g class="colourbar"><defs><linearGradient id="attn-scale" x1="0" y1="0" x2="0" y2="1">{stops}'
             f'</linearGradient></defs>',
             f'<rect x="{x:.1f}" y="{y:.1f}" width="{COLOURBAR_W}" height="{h:.1f}" fill="url(#attn-scale)" '
             'stroke="#ccc"/>']
    for frac in (0.0, 0.5, 1.0):
        value = zmax - frac * (zmax - zmin)
        parts.append(f'<text x="{x + COLOURBAR_W + 4:.1f}" y="{y + frac * h:.1f}" font-size="12" '
                     f'dominant-baseline="middle">{value:.3g}</text>')
    parts.append(f'<text x="{x:.1f}" y="{y + h + 16:.1f}" font-size="12">{escape(value_name)}</text></g>')
    return "".join(parts)


def row_summary(weights: np.ndarray, top: int = 8) -> list[tuple[int, float]]:
    """One query row's largest values, largest first: (key index, value) for at most ``top`` keys."""
    row = np.asarray(weights, dtype=np.float64)
    order = np.argsort(-row, kind="stable")[:top]
    return [(int(j), float(row[j])) for j in order]
