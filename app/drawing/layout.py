"""A figure's fonts, sizes and margins, estimated from its labels before plotly draws it: the font, the least
label size, text widths, each chart's minimum width (the page scrolls it on a phone below that) and margins that
already hold its tick labels, titles, colour bar and legend (:func:`fit_margins`: plotly then draws it once). No
Streamlit; the builders of :mod:`app.drawing.figures` and the other drawing modules use it."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

FONT = dict(family="Inter, 'Source Sans Pro', sans-serif", size=13)
TEXT_COLOUR = "#31333f"  # the page's text colour: a chart's title
LABEL_COLOUR = "#5c5f6e"  # its labels and axis titles (7:1 on white)
LINE_COLOUR = "#e6eaf1"  # grid, axis and zero lines: faint, under the data
PAGE_FONT = "'Source Sans', 'Source Sans Pro', sans-serif"  # the page's own font (its headings')
TITLE_FONT = dict(family=PAGE_FONT, size=16, weight=700, color=TEXT_COLOUR)  # a chart's own title, above it
NOT_CARTESIAN = {"pie", "table", "sankey", "sunburst", "treemap", "icicle", "indicator"}  # traces without x/y axes

MIN_FONT = 10  # px: no chart label is smaller (a phone's visitor must read it)


def tick_font(n: int) -> int:
    return 12 if n <= 30 else MIN_FONT


def cell_size(n: int) -> int:
    return 26 if n <= 20 else 20 if n <= 40 else 14


AXIS_TITLE_CHAR = 7.0  # px per character of a 12 px axis title (a generous average, so the estimate is not short)


def axis_title_room(title: str) -> float:
    """Pixels a 12 px vertical axis title needs along the plot's height (so it never runs into the chart title)."""
    return AXIS_TITLE_CHAR * len(html.unescape(str(title))) + 10


def tick_room(labels: Sequence[str], angled: bool) -> float:
    """Pixels under the plot for the x tick labels (turned by 60 degrees when ``angled``) and the axis title."""
    longest = max((len(html.unescape(str(t))) for t in labels), default=1)
    return (0.87 * 7.0 * longest if angled else 16) + 30


CHAR_EM = 0.62  # the advance of an average character, in font sizes (a generous mean for the sans-serif faces used)
LABEL_GAP = 3  # px between two tick labels side by side
PHONE_PLOT = 300  # px: a figure wider than this scrolls on a phone
PHONE_AXIS = 200  # px: the x axis of a heatmap on a phone (its labels, colour bar and margins take the rest)
OWN_WIDTH = 960  # px: a figure at least this wide is drawn at its own width on every screen (it scrolls on a phone
# and most laptops; a desktop's column holds it, about as wide): plotly draws it once, not again at the column's width


def text_px(text: object, size: float) -> float:
    """Pixels a one-line label takes at ``size`` px (tags such as ``<b>`` left out, entities counted once)."""
    plain = html.unescape(re.sub(r"<[^>]+>", "", str(text)))
    return len(plain) * CHAR_EM * size


def _labels(axis: dict) -> list:
    """An axis' named tick labels (``ticktext``, a list or an array), as a list."""
    texts = axis.get("ticktext")
    return [] if texts is None else list(texts)


def _size(font: dict | None, default: float) -> float:
    """A font's size, or ``default`` where it sets none."""
    return (font or {}).get("size") or default


def min_width(fig: go.Figure) -> int:
    """Pixels wide ``fig`` must be drawn so that no two labels of an x axis with named ticks touch: each tick needs
    its label's thickness (turned labels: the font size over the sine of the angle; upright ones: the longest
    label) in the axis' share of the plot; plus the y labels, titles and colour bar beside it. 0 for a figure
    without named x ticks (plotly thins numeric ticks itself). ``fig.layout.meta["min_width"]``, when a builder
    set it (text drawn inside the plot, as the beam tree's), counts too. The layout is read as one plain dict
    (plotly's property objects validate every read: most of a long sentence's chart's server time)."""
    layout = fig.layout.to_plotly_json()
    meta = layout.get("meta") if isinstance(layout.get("meta"), dict) else {}
    need = float(meta.get("min_width", 0))
    default = _size(layout.get("font"), FONT["size"])
    left = 0.0
    for axis in (v for k, v in layout.items() if k.startswith("xaxis")):
        texts = _labels(axis)
        if axis.get("tickmode") not in ("array", None) or not texts or axis.get("showticklabels") is False:
            continue
        size = _size(axis.get("tickfont"), default)
        tilt = axis.get("tickangle")
        angle = abs(float(tilt)) % 180 if isinstance(tilt, (int, float)) else 0.0
        sine = float(np.sin(np.radians(angle)))
        longest = max(text_px(t, size) for t in texts)
        pitch = (size + LABEL_GAP) / sine if sine > 0.3 else longest + 2 * LABEL_GAP
        domain = axis.get("domain")
        share = domain[1] - domain[0] if domain is not None and len(domain) else 1.0
        need = max(need, len(texts) * pitch / max(share, 0.05))
    if need <= 0:
        return 0
    for axis in (v for k, v in layout.items() if k.startswith("yaxis")):
        texts = _labels(axis)
        if axis.get("tickmode") in ("array", None) and texts and axis.get("showticklabels") is not False:
            size = _size(axis.get("tickfont"), default)
            left = max(left, max(text_px(t, size) for t in texts) + 30)
    scale = 90 if any(getattr(t, "showscale", None) is not False and t.type == "heatmap" for t in fig.data) else 0
    return int(need + left + scale + 20)  # the labels' own estimate beside the plot, as plotly's pushes were


TICK_PAD = 12  # px between an axis and its tick labels, and spare
AXIS_TITLE_PX = 44  # px an axis title takes beside its tick labels: its 12 px line and plotly's gaps either side
COLOUR_BAR_PX = 100  # px right of the plot a colour bar takes: its bar, numbers, name and the gap to the plot (plus
# 2% of a wide chart's width, plotly placing it at x = 1.02: there automargin still pushes)
LEGEND_ROW_PX = 48  # px a row of legend above the plot takes
NUMBER_CHARS = 5  # characters of a numeric tick label ("0.125"), which plotly chooses


def fit_margins(fig: go.Figure) -> go.Figure:
    """``fig`` with margins that already hold its tick labels, axis titles and colour bar (estimated with
    :func:`text_px`, about what plotly's automargin would push; each at least the layout's own): automargin then
    finds nothing to push and draws the chart once. A margin pushed after the first drawing redraws the whole
    chart, labels measured again (on a 40-word sentence's charts, most of the browser's time); where this estimate
    is short, automargin still makes the room, with that second drawing. Not more than plotly would push: the
    builders' heights and widths leave the plot the room they meant (a generous margin squeezed a short chart's
    rows and colour bar). The axes on the figure's left, right and bottom edges count."""
    layout = fig.layout.to_plotly_json()  # one plain dict, as in min_width
    default = _size(layout.get("font"), FONT["size"])
    margin = layout.get("margin") or {}
    left, right, bottom = margin.get("l") or 0, margin.get("r") or 0, margin.get("b") or 0

    def starts_at_edge(axis_name: str | None, letter: str) -> bool:  # the axis an axis is anchored to starts at 0
        other = layout.get(f"{letter}axis{(axis_name or letter)[1:]}") if axis_name not in (None, "free") else None
        domain = None if other is None else other.get("domain")
        return domain is None or not len(domain) or domain[0] <= 0.001

    def label_px(axis: dict, along: bool) -> float:  # the labels' size across the axis
        size = _size(axis.get("tickfont"), default)
        texts = _labels(axis) if axis.get("tickmode") == "array" else []
        longest = max(text_px(t, size) for t in texts or ["0" * NUMBER_CHARS])
        if not along:
            return longest
        tilt = axis.get("tickangle")
        sine = abs(float(np.sin(np.radians(float(tilt))))) if isinstance(tilt, (int, float)) else 0
        return longest * sine + size * (1 - sine) + size * 0.5 * sine

    for axis in (v for k, v in layout.items() if k.startswith("yaxis")):
        if axis.get("visible") is False or (axis.get("side") != "right" and not starts_at_edge(axis.get("anchor"),
                                                                                                "x")):
            continue
        titled = bool((axis.get("title") or {}).get("text"))
        labels = label_px(axis, False) if axis.get("showticklabels") is not False else 0
        if axis.get("side") == "right":
            right = max(right, labels + TICK_PAD + (AXIS_TITLE_PX if titled else 0))
        else:
            left = max(left, labels + TICK_PAD + (AXIS_TITLE_PX if titled else 0))
    for axis in (v for k, v in layout.items() if k.startswith("xaxis")):
        if axis.get("visible") is False or axis.get("side") == "top" or not starts_at_edge(axis.get("anchor"), "y"):
            continue
        titled = bool((axis.get("title") or {}).get("text"))
        labels = label_px(axis, True) if axis.get("showticklabels") is not False else 0
        bottom = max(bottom, labels + TICK_PAD + (AXIS_TITLE_PX if titled else 0))
    scale = any(t.type == "heatmap" and t.showscale is not False and not getattr(t, "coloraxis", None)
                for t in fig.data) or any(v.get("showscale") is not False for k, v in layout.items()
                                          if k.startswith("coloraxis"))
    if scale:
        right = max(right, COLOUR_BAR_PX)
    top = margin.get("t") or 0
    legend = layout.get("legend") or {}
    if legend.get("orientation") == "h" and (legend.get("y") or 0) >= 1:  # a row of legend above the plot
        top = max(top, LEGEND_ROW_PX)
    return fig.update_layout(margin=dict(l=int(left), r=int(right), b=int(bottom), t=int(top)))


def short_title(title: str) -> str:
    """An axis title without the explanation in its brackets: "output token (query = the step producing it)" ->
    "output token (query)"."""
    return re.sub(r" \((\w+) = [^)]*\)", r" (\1)", title)


def top_title(text: str) -> dict:
    """A chart title at the very top of the figure (plotly centres it in the top margin, where a legend that wraps
    on a narrow screen goes too)."""
    return dict(text=text, x=0.0, xanchor="left", yref="container", y=1.0, yanchor="top", pad=dict(t=12))


def colour_bar(name: str) -> dict:
    """A slim colour bar named along its side (a name on top would sit on the top value of a short bar)."""
    return dict(title=dict(text=name, side="right"), thickness=12)


# Plotly hides a tick label that would overflow the chart ("hide past div", its default on a linear axis) by measuring
# every label's box on every redraw (and a margin pushed by the colour bar or the legend redraws); on a 40-word
# sentence's charts that was most of the browser's time (Masks: 3 of its 4.8 s of plotly). Named ticks are spaced by
# ``min_width`` so that none overflows: they are drawn as they are.
TICKS_DRAWN = dict(ticklabeloverflow="allow")


def named_axis(labels: Sequence[str], title: str, **extra) -> dict:
    n = len(labels)
    return dict(title=dict(text=title, font=dict(size=12)), tickmode="array", tickvals=list(range(n)),
                ticktext=list(labels), tickfont=dict(size=tick_font(n)), showgrid=False, zeroline=False,
                **TICKS_DRAWN, **extra)


def own_look(spec: dict) -> dict:
    """A figure's plotly JSON (``fig.to_dict()``; changed in place and returned) with its whole look in its own layout
    and no template, as the page has always shown it (Streamlit's theme, written out): a bold title in the page's
    font (:data:`TITLE_FONT`), 12 px tick labels and 14 px axis titles set off from them, labels in
    :data:`LABEL_COLOUR`, faint grid lines (:data:`LINE_COLOUR`, none along x) and no tick marks, the plot 8 px from
    its labels, a white hover label, and every cartesian axis making room for its labels (automargin:
    :func:`fit_margins` estimates the room; where it is short, plotly pushes). Whatever a builder set stays.

    So a chart looks the same wherever it is drawn (the page, the offline page, a notebook), and it is drawn once:
    a template is an object of its own in the layout, and plotly.js draws the whole chart again whenever it is handed
    a copy of one, as Streamlit's chart element does after mounting (with its theme, every chart was drawn twice)."""
    layout = spec.setdefault("layout", {})
    layout.pop("template", None)
    if any(t.get("type", "scatter") not in NOT_CARTESIAN for t in spec.get("data") or ()):
        layout.setdefault("xaxis", {})
        layout.setdefault("yaxis", {})
    for name, axis in layout.items():
        if name.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            across = name.startswith("x")
            for key, value in (("automargin", True), ("ticks", ""), ("tickcolor", LINE_COLOUR),
                               ("gridcolor", LINE_COLOUR), ("zeroline", not across), ("zerolinecolor", LINE_COLOUR),
                               ("linecolor", LINE_COLOUR)):
                axis.setdefault(key, value)
            if across:
                axis.setdefault("showgrid", False)
            axis["tickfont"] = {"size": 12, "color": LABEL_COLOUR, **(axis.get("tickfont") or {})}
            title = axis.get("title") or {}
            title = title if isinstance(title, dict) else {"text": title}  # a plain title is its text
            axis["title"] = {"standoff": 20 if across else 24, **title,
                             "font": {"size": 14, "color": LABEL_COLOUR, **(title.get("font") or {})}}
    layout["font"] = {"color": LABEL_COLOUR, **(layout.get("font") or {})}
    title = layout.get("title")
    if isinstance(title, dict) and title.get("text"):
        title["font"] = {**TITLE_FONT, **(title.get("font") or {})}
        title.setdefault("pad", {"l": 4})
    layout["margin"] = {"pad": 8, **(layout.get("margin") or {})}
    legend = layout.get("legend")
    layout["legend"] = {**(legend if isinstance(legend, dict) else {}),
                        "font": {"size": 12, "color": TEXT_COLOUR, **((legend or {}).get("font") or {})}}
    layout.setdefault("hoverlabel", {"bgcolor": "white", "bordercolor": LINE_COLOUR,
                                     "font": {"size": 12, "color": TEXT_COLOUR}})
    layout.setdefault("paper_bgcolor", "white")
    layout.setdefault("plot_bgcolor", "white")
    return spec
