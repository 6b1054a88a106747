"""A view that is only a description (``app.parts``) and its registry line: the page draws its parts itself
(``app.page.described``), the same parts the offline page and a notebook draw."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("streamlit")

from conftest import arr, assert_clean, new_app, set_view, translate  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

TEXT = "A dog runs in the park."


def _toy_page_script() -> None:
    """A description of every kind of part, drawn by the page's generic drawing (run by AppTest)."""
    import types

    import plotly.graph_objects as go

    from app.page import described
    from app.parts import Chart, Choice, Note, Table

    toy = types.SimpleNamespace(INTRO="A toy view.")
    bar = lambda title: go.Figure(go.Bar(x=["a", "b"], y=[1, 2]), layout={"title": {"text": title}})
    described.Page("toy", toy).draw([
        Choice("Type", [
            ("first", [Choice("Layer", [("layer 1", [Note("first, layer 1")]),
                                        ("layer 2", [Chart(bar("first L2"), "*not emphasis*", "bar-1")])], 1)]),
            ("second", [Table(["piece", "value"], [["<b>x</b>", "0.5"]], "a table")]),
        ]),
        Note("always shown", warning=True),
    ])


def _titles(at) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]


def test_the_page_draws_each_part_of_a_description_and_its_chosen_option():
    at = AppTest.from_function(_toy_page_script, default_timeout=30).run()
    assert_clean(at)
    # the pickers' defaults: the first type, its second layer (the Choice's own default)
    assert at.segmented_control(key="toy_choice1").value == 0
    assert at.segmented_control(key="toy_choice2").value == 1
    assert _titles(at) == ["first L2"]
    assert [c.value for c in at.caption] == [r"\*not emphasis\*"]  # shown as typed, never as Markdown
    assert [w.value for w in at.warning] == ["always shown"]
    at.segmented_control(key="toy_choice2").set_value(0).run()
    assert _titles(at) == [] and "first, layer 1" in [c.value for c in at.caption]
    at.segmented_control(key="toy_choice1").set_value(1).run()
    assert_clean(at)
    frame = at.dataframe[0].value
    assert list(frame.index) == ["<b>x</b>"] and list(frame["value"]) == ["0.5"]  # text, as written
    assert [w.value for w in at.warning] == ["always shown"]


def test_a_described_views_pickers_are_address_parameters_counted_from_one():
    from app.page import described, params
    from app.views import PAGES, VIEWS

    page = PAGES["layer_by_layer"]
    assert isinstance(page, described.Page) and not VIEWS["layer_by_layer"].page  # its description alone
    assert params.of_view("layer_by_layer") == page.PARAMS
    first = page.PARAMS[0]
    assert (first.name, first.key) == ("c1", "layer_by_layer_choice1")
    state: dict = {}
    assert first.take("2", state) is None and state["layer_by_layer_choice1"] == 1  # option 2 in the address, 1 there
    assert first.text(1) == "2"
    for bad in ("0", "-1", "x", "1e3"):
        assert first.take(bad, {}) is not None


def test_a_described_view_on_the_page_is_the_description_the_offline_page_draws(app_env, tr):
    from app import report
    from app.parts import Chart, Source, Table
    from app.parts import layer_by_layer as layers

    at = set_view(translate(new_app(), TEXT), "layer_by_layer")
    assert_clean(at)
    offline = layers.describe(Source(report.analysis_for(tr.translate(TEXT, return_attention=True), tr), tr))
    chart = next(p for p in offline if isinstance(p, Chart))
    drawn = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert [d["layout"]["title"]["text"] for d in drawn] == [chart.figure.layout.title.text]
    np.testing.assert_allclose(arr(drawn[0]["data"][0]["z"]), np.asarray(chart.figure.data[0].z, dtype=float),
                               atol=1e-6)
    table = next(p for p in offline if isinstance(p, Table))
    assert list(at.dataframe[0].value.index) == [row[0] for row in table.rows]
