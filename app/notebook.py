"""The explorer's views inline in a notebook (Jupyter, JupyterLab, VS Code), in BertViz's and inseq's manner::

    import transformer
    from app.notebook import show

    tr = transformer.load("checkpoints/multi30k-en-de")
    result = tr.translate("A man rides a bike.")
    show(result, "heatmap", kind="cross", layer=2)      # one head or the mean, as an SVG (no JavaScript)
    show(result, "all_heads", kind="encoder")           # every layer x head on one colour scale (SVG)
    show(result, "lines")                               # one view of the offline page (app.parts), inline
    show(result, "step_through", translator=tr)         # a view that needs the model: pass the translator
    show(result, "what_carries_the_change", translator=tr, word="man", substitute="woman")
    show(result, translator=tr)                         # every view of ``python -m app.report``, inline
    html = show(result, "heatmap", return_html=True)    # or: show(...).html

``show`` returns an object that notebooks draw (``_repr_html_``); ``return_html=True`` gives the HTML string.
The heatmap and the all-heads grid are plain SVG (a few KB each, drawn even where scripts are off); the other views
are the offline page's (:mod:`app.report`: the same descriptions, :mod:`app.parts`, that the app draws), drawn in
the notebook itself with plotly.js sent once per kernel (the first such output carries it, about 4.8 MB; the others
a few KB to a few hundred). Layers and heads count from 1, as on the page. Works with a ``TranslationResult`` of any
family (ours, Marian, M2M100 / NLLB); the views that need the model need ``translator=``. No Streamlit here.
"""

from __future__ import annotations

import base64
import html as _html
import io
from typing import Any

import numpy as np

from transformer import TranslationResult, Translator

from . import report
from .analysis.inference import Analysis
from .drawing import svg
from .drawing.analysis import AXIS_TITLES, KIND_NAMES, KINDS, one_head

SVG_VIEWS = ("heatmap", "all_heads")


class Inline:
    """HTML that a notebook draws inline (``_repr_html_``); ``html`` holds it, ``save(path)`` writes a file that
    opens on its own (``page``: that file's text, built when first asked for)."""

    def __init__(self, html: str, page: Any = None) -> None:
        self.html = html
        self._page = page  # the whole page's text, or a function that builds it

    @property
    def page(self) -> str:
        if callable(self._page):
            self._page = self._page()
        return self._page or ('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
                              f"{self.html}</body></html>")

    def _repr_html_(self) -> str:
        return self.html

    def save(self, path: str) -> None:
        """Write a file that opens on its own: the offline page of these views, or the SVG views in a minimal page."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.page)

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


def heatmap_html(a: Analysis, kind: str = "cross", layer: int | None = None, head: int | str | None = None) -> str:
    """One head (1-based) or the mean over heads (``head=None`` or ``"mean"``) of a layer (1-based; None: the last)
    as an SVG heatmap."""
    attn = a.attention(_kind(kind))  # (L, H, Q, K)
    picked = one_head(attn, kind, attn.shape[0] if layer is None else layer, head)
    queries, keys = a.axes(kind)
    qt, kt = AXIS_TITLES[kind]
    return svg.heatmap_svg(picked.weights, queries, keys, title=picked.title, query_title=qt, key_title=kt,
                           zmin=0.0, zmax=1.0)


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


_sent: dict[str, bool] = {"plotly": False}  # whether this kernel has sent plotly.js to its notebook


def plotly_once() -> str:
    """plotly.js in a script element the first time a kernel asks (later outputs use the same ``Plotly``), else
    nothing. Its loader is hidden from a page's AMD ``define`` (classic Jupyter's require.js), so it sets
    ``window.Plotly`` wherever it runs."""
    if _sent["plotly"]:
        return ""
    from plotly.offline import get_plotlyjs

    _sent["plotly"] = True
    return f"<script>(function (define, module, exports) {{ {get_plotlyjs()} }})();</script>"


def show(result: TranslationResult | Analysis, view: str | None = None, *, translator: Translator | None = None,
         return_html: bool = False, height: int | None = None, **options: Any) -> Inline | str:
    """Draw a translation's view inline in a notebook.

    ``view``: ``None`` for every view of ``python -m app.report`` (those that need the model only with
    ``translator``), or one of ``"heatmap"`` (options ``kind``, ``layer``, ``head``), ``"all_heads"`` (``kind``),
    or a view of the offline page by its key (``app.report.OFFLINE_VIEWS``: ``"lines"``, ``"step_through"``,
    ``"masks"``, ``"positional_encoding"``, ``"layer_by_layer"``, ``"source_or_prefix"``, ``"what_drives_each_word"``
    with option ``method``, ``"what_carries_the_change"`` with options ``word`` (its number from 1, or the word),
    ``substitute`` and ``direction``; an old short name, ``"step"``, still works: ``app.registry.ALIASES``).
    ``kind``: ``"encoder"``, ``"decoder"`` or ``"cross"`` (the default). ``height``: a box of that many pixels that
    scrolls. Returns an :class:`Inline` (the notebook draws it; ``.html`` is its HTML), or the HTML string with
    ``return_html=True``.
    """
    if view is not None:
        view = report.view_keys([view])[0]
    a = _analysis(result) if translator is None or view in SVG_VIEWS else report.analysis_for(result, translator)
    if view in SVG_VIEWS:
        allowed = {"heatmap": {"kind", "layer", "head"}, "all_heads": {"kind"}}[view]
        extra = set(options) - allowed
        if extra:
            raise TypeError(f"show(..., {view!r}) takes {', '.join(sorted(allowed))}, not {', '.join(sorted(extra))}")
        out = heatmap_html(a, **options) if view == "heatmap" else all_heads_html(a, **options)
        shown = Inline(out)
    else:
        extra = set(options) - {"method", "steps", "model", "word", "substitute", "direction"}
        if extra:
            raise TypeError(f"show(..., {view!r}) takes no option {', '.join(sorted(extra))}")
        views = report.DEFAULT_VIEWS if view is None else (view,)
        model = options.pop("model", "")
        body = report.fragment(a, translator, views, model, summary=view is None, **options)
        if view is not None and f'data-left-out="{view}"' in body:
            raise ValueError(f"the {view!r} view runs the model: pass translator=, the Translator that made this "
                             "translation")
        if height:
            body = f'<div style="max-height:{int(height)}px;overflow:auto">{body}</div>'
        shown = Inline(plotly_once() + body, lambda: report.build_page(a, translator, views, model=model, **options))
    return shown.html if return_html else shown
