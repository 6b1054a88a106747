"""The explorer's views inline in a notebook (Jupyter, JupyterLab, VS Code), in BertViz's and inseq's manner::

    import transformer
    from app.notebook import show

    tr = transformer.load("checkpoints/multi30k-en-de")
    result = tr.translate("A man rides a bike.")
    show(result, "heatmap", kind="cross", layer=2)      # one head or the mean, as an SVG (no JavaScript)
    show(result, "all_heads", kind="encoder")           # every layer x head on one colour scale (SVG)
    show(result, translator=tr)                         # the whole page of ``python -m app.report``, inline
    html = show(result, "heatmap", return_html=True)    # or: show(...).html

``show`` returns an object that notebooks draw (``_repr_html_``); ``return_html=True`` gives the HTML string.
The heatmap and the all-heads grid are plain SVG (a few KB each, drawn even where scripts are off); the page and
the other views (``"lines"``, ``"step"``, ``"masks"``, ``"positional"``, ``"attribution"``, ``"lens"``,
``"flow"``) are the page of :mod:`app.report` in an ``<iframe srcdoc>``, so its script is isolated, with
plotly.js inside (about 4.8 MB per output). Layers and heads count from 1, as on the page. Works with a
``TranslationResult`` of any family (ours, Marian, M2M100 / NLLB); the views that run the model again need
``translator=``. No Streamlit here.
"""

from __future__ import annotations

import base64
import html as _html
import io
from typing import Any

import numpy as np

from transformer import TranslationResult, Translator

from . import report, svg
from .analysis import AXIS_TITLES, KIND_NAMES, KINDS
from .inference import Analysis

SVG_VIEWS = ("heatmap", "all_heads")


class Inline:
    """HTML that a notebook draws inline (``_repr_html_``); ``html`` holds it, ``save(path)`` writes it."""

    def __init__(self, html: str, page: str | None = None) -> None:
        self.html = html
        self.page = page  # the whole self-contained page, where this is an iframe of one

    def _repr_html_(self) -> str:
        return self.html

    def save(self, path: str) -> None:
        """Write a file that opens on its own: the page itself, or the SVG views in a minimal page."""
        text = self.page or f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{self.html}</body></html>'
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def __repr__(self) -> str:
        return f"<Inline HTML, {len(self.html):,} characters: display it in a notebook, or read .html>"


def _analysis(result: TranslationResult | Analysis) -> Analysis:
    if isinstance(result, Analysis):
        return result
    if isinstance(result, TranslationResult):
        return report.analysis_from_result(result)
    raise TypeError(f"show() takes a TranslationResult (translator.translate(...)), not {type(result).__name__}")


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    return kind


def _layer(attn: np.ndarray, layer: int | None) -> int:
    """0-based layer of a 1-based ``layer`` (None: the last)."""
    n = attn.shape[0]
    if layer is None:
        return n - 1
    if not isinstance(layer, (int, np.integer)) or not 1 <= layer <= n:
        raise ValueError(f"layer counts from 1 to {n} here, not {layer!r}")
    return int(layer) - 1


def heatmap_html(a: Analysis, kind: str = "cross", layer: int | None = None, head: int | str | None = None) -> str:
    """One head (1-based) or the mean over heads (``head=None`` or ``"mean"``) as an SVG heatmap."""
    attn = a.attention(_kind(kind))  # (L, H, Q, K)
    li = _layer(attn, layer)
    if head in (None, "mean"):
        weights, name = attn[li].mean(axis=0), "mean over heads"
    elif isinstance(head, (int, np.integer)) and 1 <= head <= attn.shape[1]:
        weights, name = attn[li, int(head) - 1], f"head {int(head)}"
    else:
        raise ValueError(f"head counts from 1 to {attn.shape[1]} here (or 'mean'), not {head!r}")
    queries, keys = a.axes(kind)
    qt, kt = AXIS_TITLES[kind]
    return svg.heatmap_svg(weights, queries, keys, title=f"{KIND_NAMES[kind]} · layer {li + 1} · {name}",
                           query_title=qt, key_title=kt, zmin=0.0, zmax=1.0)


def _png(weights: np.ndarray) -> str:
    """A ``(Q, K)`` matrix as a PNG data URL, one pixel a weight, in the heatmap's colours (0 to 1)."""
    from PIL import Image

    hexes = svg.colours(weights, 0.0, 1.0)  # (Q, K) '#rrggbb'
    rgb = np.array([[[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in row] for row in hexes], dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def all_heads_html(a: Analysis, kind: str = "cross") -> str:
    """Every layer x head of one type on one colour scale (0 white to 1 dark blue), rows = layers: one small image
    a head (a few KB in all; ``show(result, "heatmap", kind=..., layer=..., head=...)`` opens one with its tokens)."""
    attn = a.attention(_kind(kind))  # (L, H, Q, K)
    n_layers, n_heads, q, k = attn.shape
    cells = "".join(f'<figure style="margin:0"><figcaption style="font:12px sans-serif;color:#555">layer {layer + 1} '
                    f'· head {head + 1}</figcaption><img src="{_png(attn[layer, head])}" alt="layer {layer + 1} head '
                    f'{head + 1}" title="layer {layer + 1} · head {head + 1}" style="width:100%;aspect-ratio:{k}/{q};'
                    'image-rendering:pixelated;border:1px solid #9aa5b1"></figure>'
                    for layer in range(n_layers) for head in range(n_heads))
    queries, keys = a.axes(kind)
    qt, kt = AXIS_TITLES[kind]
    return (f'<div class="attn-all-heads" style="max-width:{min(1100, 260 * n_heads)}px">'
            f'<div style="font:600 15px sans-serif;margin:4px 0">{_html.escape(KIND_NAMES[kind])}: every head '
            f'(rows = layers, columns = heads)</div><div style="font:12px sans-serif;color:#555;margin-bottom:4px">'
            f"Rows: {_html.escape(qt)}, {q} pieces; columns: {_html.escape(kt)}, {k} pieces. Colours from 0 (white) "
            f"to 1 (dark blue).</div>"
            f'<div style="display:grid;grid-template-columns:repeat({n_heads},minmax(0,1fr));gap:8px">{cells}</div>'
            "</div>")


def _iframe(page: str, height: int) -> str:
    return (f'<iframe class="attn-page" srcdoc="{_html.escape(page, quote=True)}" style="width:100%;'
            f'height:{int(height)}px;border:1px solid #ddd" sandbox="allow-scripts allow-popups allow-downloads">'
            "</iframe>")


def show(result: TranslationResult | Analysis, view: str | None = None, *, translator: Translator | None = None,
         return_html: bool = False, height: int | None = None, **options: Any) -> Inline | str:
    """Draw a translation's view inline in a notebook.

    ``view``: ``None`` for the whole page of ``python -m app.report`` (the views that need the model only with
    ``translator``), or one of ``"heatmap"`` (options ``kind``, ``layer``, ``head``), ``"all_heads"`` (``kind``),
    ``"lines"``, ``"step"``, ``"masks"``, ``"positional"``, ``"attribution"`` (option ``method``), ``"lens"``,
    ``"flow"`` (how each word is built: the information-flow graph of each output piece).
    ``kind``: ``"encoder"``, ``"decoder"`` or ``"cross"`` (the default). Returns an :class:`Inline` (the notebook
    draws it; ``.html`` is its HTML), or the HTML string with ``return_html=True``.
    """
    a = _analysis(result)
    if view in SVG_VIEWS:
        allowed = {"heatmap": {"kind", "layer", "head"}, "all_heads": {"kind"}}[view]
        extra = set(options) - allowed
        if extra:
            raise TypeError(f"show(..., {view!r}) takes {', '.join(sorted(allowed))}, not {', '.join(sorted(extra))}")
        out = heatmap_html(a, **options) if view == "heatmap" else all_heads_html(a, **options)
        shown = Inline(out)
    else:
        if view is not None and view not in report.VIEWS:
            raise ValueError(f"unknown view {view!r}; choose from {', '.join(report.VIEWS)} (or None: the page)")
        if view in report.NEEDS_MODEL and translator is None:
            raise ValueError(f"the {view!r} view runs the model again: pass translator=, the Translator that made "
                             "this translation")
        extra = set(options) - {"method", "steps", "model"}
        if extra:
            raise TypeError(f"show(..., {view!r}) takes no option {', '.join(sorted(extra))}")
        views = report.DEFAULT_VIEWS if view is None else (view,)
        page = report.build_page(result, translator, views, text=a.text, **options)
        shown = Inline(_iframe(page, height or (900 if view is None else 700)), page)
    return shown.html if return_html else shown
