"""A wide chart's frozen column of row labels on the page (``app.drawing.row_labels`` says which chart has one and
which drawn pieces it repeats): a band at the left edge of the chart's scrolling box, shown only while the box is
narrower than the chart (a container query), in which a constant script (``FROZEN_ROWS_JS``, installed once per page)
copies the row labels and the row axis' title the browser drew for the chart, with a white ground along the rows.
The copy is plotly's own SVG, so each label sits at its row to the pixel; nothing is drawn twice (the column was once
a second plotly figure, which cost the browser as much as the chart)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from ..drawing import row_labels

ROW_LABELS_KEY = "row_labels_"  # the key (CSS class st-key-row_labels_...) of a chart's frozen column of row labels
BAND = "attn-frozen-rows"  # the class of the element the script draws a chart's row labels into
GROUND = "#ffffff"  # the band's ground along the rows: the page's white

# For each band on the page (``BAND``, its chart named by ``data-chart``, the pieces by ``data-subplot`` and
# ``data-title``), after any change to the page (a MutationObserver, at most once a frame): when what plotly drew for
# the rows changed, the band becomes an SVG as tall as the chart's and as wide as its left margin (plotly's
# ``_fullLayout._size.l``), white along the plot area's rows, with copies of the rows' tick labels and the row axis'
# title at the same coordinates. A band whose chart is not drawn yet waits for the next change. (No tag is written
# out in the script: Streamlit's sanitizer drops a script whose text holds one.)
FROZEN_ROWS_JS = """<script>
(() => {
  if (window.__attnFrozenRows) return;
  window.__attnFrozenRows = true;
  const copy = (band) => {
    const holder = band.closest("[class*=st-key-rows_]");
    const chart = holder && holder.querySelector(`.st-key-${band.dataset.chart} .js-plotly-plot`);
    const size = chart && chart._fullLayout && chart._fullLayout._size;
    const rows = chart && chart.querySelector(`.subplot.${band.dataset.subplot} .yaxislayer-above`);
    const paper = chart && chart.querySelector(".main-svg");
    if (!size || !rows || !paper) return;
    const title = chart.querySelector(`.${band.dataset.title}`), height = paper.getAttribute("height");
    const drawn = [size.l, size.t, size.h, height, rows.outerHTML, title ? title.outerHTML : ""].join("|");
    if (band.__attnDrawn === drawn) return;
    band.__attnDrawn = drawn;
    const NS = "http://www.w3.org/2000/svg", svg = document.createElementNS(NS, "svg");
    const ground = document.createElementNS(NS, "rect");
    svg.setAttribute("width", size.l);
    svg.setAttribute("height", height);
    for (const [name, value] of [["x", 0], ["y", size.t], ["width", size.l], ["height", size.h], ["fill", "GROUND"]])
      ground.setAttribute(name, value);
    svg.append(ground, rows.cloneNode(true));
    if (title) svg.append(title.cloneNode(true));
    band.replaceChildren(svg);
  };
  let queued = false;
  const run = () => { queued = false; document.querySelectorAll(".BAND").forEach(copy); };
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(run); } }).observe(
    document.body, {childList: true, subtree: true, characterData: true, attributes: true,
                    attributeFilter: ["transform", "width", "height"]});
  run();
})();
</script>""".replace("GROUND", GROUND).replace("BAND", BAND)
FROZEN_ROWS = "frozen_rows"  # the key of the hidden container that holds the script (CSS: app.page.frame)


def frozen_rows() -> None:
    """Once on the page, hidden: the script that draws every frozen column's row labels (``FROZEN_ROWS_JS``)."""
    st.container(key=FROZEN_ROWS).html(FROZEN_ROWS_JS, unsafe_allow_javascript=True)


def band(where: Any, key: str, frozen: row_labels.RowLabels) -> None:
    """The frozen column of the chart whose CSS name is ``key`` (``plots.css_name``), in ``where`` (the box that
    holds the chart): an empty band the page's script draws into (``FROZEN_ROWS_JS``)."""
    where.container(key=f"{ROW_LABELS_KEY}{key}").html(
        f'<div class="{BAND}" data-chart="{key}" data-subplot="{frozen.subplot}" data-title="{frozen.title}">'
        "</div>")


def frozen_css(key: str, need: int, frozen: row_labels.RowLabels) -> str:
    """The CSS of a wide chart's frozen column (``app.page.plots.chart``): the chart and its band in one grid cell,
    the band sticky at the box's left edge, above the chart and see-through to touches; only while the box is
    narrower than the chart (a container query), when the chart's own row labels, under the band, are hidden."""
    inner, band_, own = f".st-key-rows_{key}", f".st-key-{ROW_LABELS_KEY}{key}", f".st-key-wide_{key} .st-key-{key}"
    return (f" {inner} {{display: grid; grid-template-columns: minmax(0, 1fr); min-width: {need}px;}}"
            f" {inner} > * {{grid-area: 1 / 1; min-width: 0;}} {inner} > :has({band_}) {{pointer-events: none;}}"
            f" {band_} {{display: none; position: sticky; left: 0; z-index: 3; width: fit-content; gap: 0;}}"
            f" {band_} .{BAND}, {band_} .{BAND} svg {{display: block;}}"
            f" @container (max-width: {need - 0.5}px) {{{band_} {{display: flex;}}"
            f" {own} .subplot.{frozen.subplot} .yaxislayer-above, {own} .{frozen.title} {{visibility: hidden;}}}}")
