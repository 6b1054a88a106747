"""Every chart's look is its own (``app.drawing.layout.own_look``): no template, the same on the page, the offline
page and in a notebook; the page draws it with Streamlit's theme off (``app.page.plots.plotly``), a wide chart at
its own width."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from app.drawing import layout

pytest.importorskip("streamlit")

from conftest import assert_clean, new_app, set_view, translate  # noqa: E402
from test_report import charts_of  # noqa: E402

LONG = ("A man in a blue shirt and a woman in a red dress walk with their two small dogs along the busy street "
        "next to the old market while children play football in the park near the river on a sunny day")


def test_a_chart_s_look_is_its_own_and_what_its_builder_set_stays():
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 2]), layout=dict(
        template="plotly", title=dict(text="Bars", font=dict(size=20)), font=dict(size=13),
        yaxis=dict(gridcolor="#eeeeee", automargin=False), xaxis2=dict(domain=[0.6, 1.0])))
    spec = layout.own_look(fig.to_dict())
    lay = spec["layout"]
    assert "template" not in lay  # plotly's default look (the blue-grey plot) is gone with it
    assert lay["font"] == {"color": layout.LABEL_COLOUR, "size": 13}
    assert lay["title"]["font"] == {**layout.TITLE_FONT, "size": 20}  # the builder's size, the page's weight
    assert lay["yaxis"]["gridcolor"] == "#eeeeee" and lay["yaxis"]["automargin"] is False  # the builder's own
    for name in ("xaxis", "xaxis2"):  # every axis, the ones the builder named and the default one
        assert lay[name]["automargin"] is True and lay[name]["gridcolor"] == layout.LINE_COLOUR
    assert lay["plot_bgcolor"] == "white" and lay["hoverlabel"]["bgcolor"] == "white"
    pie = layout.own_look(go.Figure(go.Pie(labels=["a"], values=[1])).to_dict())["layout"]
    assert not [k for k in pie if k.startswith(("xaxis", "yaxis"))]  # no axes where nothing is cartesian


def test_every_offline_view_s_charts_keep_a_valid_figure_with_their_own_look(tr):
    """The page draws a chart without validating it again (``plots.plotly``): what the look adds must be valid
    plotly, and the figure drawn must be the one plotly would validate, for every chart of every described view."""
    from app import report

    text = "Two dogs play in the park."
    analysis = report.analysis_for(tr.translate(text, beam_size=2, return_attention=True), tr, text=text)
    drawn, _ = report.views_parts(analysis, tr, report.OFFLINE_VIEWS, method="input_x_gradient")
    charts = [c for _, parts in drawn for c in charts_of(parts)]
    assert len(charts) > 20
    for chart in charts:
        fig = chart.figure if isinstance(chart.figure, go.Figure) else go.Figure(chart.figure)
        spec = layout.own_look(fig.to_dict())
        checked = go.Figure(spec)  # raises on anything plotly does not know
        unchecked = go.Figure(spec, _validate=False)
        unchecked.layout.template = checked.layout.template = None
        assert _differences(json.loads(pio.to_json(unchecked)), json.loads(pio.to_json(checked))) == [], chart.name


def _differences(a, b, path: str = "") -> list[str]:
    """Where two JSON values differ (their paths)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:60]} != {str(b)[:60]}"]


def test_the_page_draws_every_chart_with_its_own_look_and_a_wide_one_at_its_width(app_env):
    at = translate(new_app(), LONG)
    specs = []
    for view in ("source_or_prefix", "all_heads", "positional_encoding", "step_through"):
        at = set_view(at, view)
        assert_clean(at)
        for element in at.get("plotly_chart"):
            assert element.proto.theme == ""  # Streamlit's theme off: it would draw the chart again
            specs.append(json.loads(element.proto.spec))
    assert specs
    for spec in specs:
        lay = spec["layout"]
        assert "template" not in lay or not lay["template"]
        assert lay["font"]["color"] == layout.LABEL_COLOUR
        assert all(a["automargin"] in (True, False) for k, a in lay.items() if k.startswith(("xaxis", "yaxis")))
    wide = [s for s in specs if "width" in s["layout"]]
    assert wide, "the long sentence's charts include one drawn at its own width"
    for spec in wide:
        assert spec["layout"]["width"] >= layout.OWN_WIDTH and spec["layout"]["datarevision"] == 1
