"""The view "How each word is built" and its figure builder (``app.drawing.flowgraph``): the graph of
``transformer.interpret.flow`` drawn as it is, a head opened from the address or a click."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")

from conftest import arr, assert_clean, chart, new_app, plain, set_view, translate  # noqa: E402

from app.drawing import flowgraph  # noqa: E402
from transformer.interpret import flow, head_logits, head_output  # noqa: E402
from transformer.interpret.flow import Edge, FlowGraph, Node  # noqa: E402

torch.set_num_threads(1)
TEXT = "A man rides a red bike."


def small_graph() -> FlowGraph:
    """A hand-made graph: one cross head edge, a residual and a feed-forward block, from output step 1."""
    root = Node("decoder", 0, "ffn", 1)
    cross = Node("decoder", 0, "cross", 1)
    self_ = Node("decoder", 0, "decoder", 1)
    enc = Node("encoder", 0, "ffn", 2)
    edges = [Edge(cross, root, "ffn", 0, None, 0.3), Edge(cross, root, "residual", 0, None, 0.7),
             Edge(enc, cross, "cross", 0, 1, 0.6), Edge(self_, cross, "residual", 0, None, 0.4)]
    return FlowGraph(1, 0.1, sorted({root, cross, self_, enc}), edges)


def traces(fig, name: str) -> list:
    return [t for t in fig.data if t.name == name]


def test_the_figure_draws_every_edge_in_its_columns_with_its_colour_and_width():
    g = small_graph()
    fig = flowgraph.flow_figure(g, ["▁a", "▁b", "<x>", "</s>"], ["▁c", "▁d"], (1, 1))
    cross_lines = [t for t in traces(fig, "Cross-attention") if t.mode == "lines" and t.x[0] is not None]
    assert len(cross_lines) == 1
    line = cross_lines[0]
    assert line.line.color == flowgraph.COLOURS["cross"] and line.line.width == 5.5  # weight 0.6: the widest
    enc_x, cross_x = flowgraph.column_x(Node("encoder", 0, "ffn", 2), 1), flowgraph.column_x(g.edges[2].target, 1)
    assert list(line.x[:2]) == [enc_x, cross_x] and list(line.y[:2]) == [-2, -1]
    assert enc_x < flowgraph.column_x(Node("decoder", -1, "embed", 0), 1) < cross_x  # encoder columns, then decoder
    residual = [t for t in traces(fig, "Residual") if t.mode == "lines" and t.x[0] is not None]
    assert sorted(t.line.width for t in residual) == [3.5, 5.5]  # 0.4 and 0.7
    (ffn,) = traces(fig, "Feed-forward")
    assert ffn.marker.color == flowgraph.COLOURS["ffn"] and list(ffn.marker.size) == [6 + 16 * 0.3]
    (heads,) = traces(fig, "heads")
    assert [list(c) for c in heads.customdata] == [["cross", 0, 1, 1, 2]]  # a click names kind, layer, head, q, k
    assert "head 2" in heads.hovertext[0] and "&lt;x&gt;" in heads.hovertext[0]  # escaped, never markup
    (nodes,) = traces(fig, "nodes")
    assert len(nodes.x) == len(g.nodes)
    (out,) = traces(fig, "output")
    assert out.y[0] == -1 and out.x[0] == flowgraph.column_x(Node("decoder", 0, "ffn", 1), 1)
    # rows: the source pieces on the left axis, the output steps on the right, each named by the piece it produces
    assert list(fig.layout.yaxis.ticktext) == ["▁a 1", "▁b 2", "&lt;x&gt; 3", "&lt;/s&gt; 4"]
    assert list(fig.layout.yaxis2.ticktext) == ["1 → ▁c", "<b>2 → ▁d</b>"]
    # one name per step: the edge's hover names its query as the row does (step 2, the piece it produces)
    assert "to step 2 → ▁d" in heads.hovertext[0] and "from source 3: &lt;x&gt;" in heads.hovertext[0]
    # the opened head is drawn dark; a window of positions keeps only what lies inside it
    fig = flowgraph.flow_figure(g, ["▁a", "▁b", "<x>", "</s>"], ["▁c", "▁d"], (1, 1), ("cross", 0, 1, 1))
    assert traces(fig, "the head opened below")[0].line.color == flowgraph.SELECTED
    inside, outside = flowgraph.in_window(g, 0, 2)
    assert outside == 1 and all(n.position < 2 for n in inside.nodes)


def test_the_strongest_edges_are_kept_when_there_are_too_many():
    g = small_graph()
    kept, left_out = flowgraph.strongest(g, most=2)
    assert left_out == 2 and sorted(e.weight for e in kept.edges) == [0.6, 0.7]
    assert Node("decoder", 0, "ffn", 1) in kept.nodes
    assert flowgraph.strongest(g)[1] == 0


def test_head_bars_promote_and_suppress():
    fig = flowgraph.head_bars([("▁Mann", 3.0), ("<b>", 1.0)], [("▁Frau", -2.0)])
    bar = fig.data[0]
    assert list(arr(bar.x)) == [3.0, 1.0, -2.0] and list(fig.layout.yaxis.ticktext) == ["▁Mann", "&lt;b&gt;", "▁Frau"]


def test_the_view_draws_the_models_graph_and_opens_a_head(app_env, tr):
    at = set_view(translate(new_app(), TEXT), "how_each_word_is_built")
    assert_clean(at)
    ref = tr.translate(TEXT)
    src = torch.tensor([ref.source_ids])
    tgt = torch.tensor([[tr.config.bos_id, *ref.target_ids[:-1]]])
    expected = flow(tr.model, src, tgt).graph(0, flowgraph.DEFAULT_THRESHOLD)
    fig = chart(at, "How output piece 1")
    heads = [t for t in fig["data"] if t.get("name") == "heads"][0]
    assert len(heads.get("customdata", [])) == sum(e.head is not None for e in expected.edges)
    nodes = [t for t in fig["data"] if t.get("name") == "nodes"][0]
    assert len(arr(nodes["x"])) == len(expected.nodes)
    # a higher threshold: a smaller graph, and the address holds it
    at.slider(key="flow_threshold").set_value(0.25)
    at.run()
    assert_clean(at)
    smaller = [t for t in chart(at, "How output piece 1")["data"] if t.get("name") == "nodes"][0]
    assert len(arr(smaller["x"])) == len(flow(tr.model, src, tgt).graph(0, 0.25).nodes) <= len(expected.nodes)
    assert at.query_params["ft"] == "0.25"
    # open the strongest head: its attention row and what it promotes, the model's own numbers
    options = at.selectbox(key="flow_head").options
    assert options
    at.selectbox(key="flow_head").set_value(at.selectbox(key="flow_head").options[0])
    at.run()
    assert_clean(at)
    text = at.query_params["fh"]
    kind, rest = text.split(".", 1)
    layer, head_q = rest.split(".")
    head, query = (int(x) - 1 for x in head_q.split("@"))
    row, vector = head_output(tr.model, src, tgt, kind, int(layer) - 1, head, query)
    shown = [t for t in chart(at, "attention of")["data"]][0]
    np.testing.assert_allclose(arr(shown["x"]), row.numpy(), atol=1e-6)
    best = int(head_logits(tr.model, vector).argmax())
    bars = chart(at, "promotes and suppresses")
    assert bars["layout"]["yaxis"]["ticktext"][0] == tr.tokenizer.pieces([best])[0].replace("<", "&lt;").replace(
        ">", "&gt;")


def test_a_link_opens_the_view_on_its_piece_threshold_and_head(app_env, tr):
    at = new_app()
    at = translate(at, TEXT)
    link = {**{k: v[0] if isinstance(v, list) else v for k, v in at.query_params.items()},
            "view": "how_each_word_is_built", "fs": "2", "ft": "0.1"}
    at = new_app(link)
    assert_clean(at)
    assert at.selectbox(key="flow_step").value == 2 and at.slider(key="flow_threshold").value == 0.1
    chart(at, "How output piece 2")


def test_the_notebook_and_the_offline_page_draw_each_pieces_graph(tr):
    from app import notebook, parts, report

    result = tr.translate(TEXT)
    # the one description
    described = parts.how_each_word_is_built.describe(parts.Source(report.analysis_for(result, tr), tr))
    choice = next(p for p in described if isinstance(p, parts.Choice))
    assert len(choice.options) == len(result.target_ids)
    src = torch.tensor([result.source_ids])
    tgt = torch.tensor([[tr.config.bos_id, *result.target_ids[:-1]]])
    f = flow(tr.model, src, tgt)
    for t, (_, [graph_chart]) in enumerate(choice.options):
        fig = report.figure_json(graph_chart.figure)
        graph = f.graph(t, flowgraph.DEFAULT_THRESHOLD)
        heads = [d for d in fig["data"] if d.get("name") == "heads"][0]
        assert len(heads.get("customdata", [])) == sum(e.head is not None for e in graph.edges)
        assert f"How output piece {t + 1}" in graph_chart.figure.layout.title.text
    shown = notebook.show(result, "flow", translator=tr)  # the notebook draws that description
    assert "How each word is built" in shown.html
    with pytest.raises(ValueError, match="translator"):
        notebook.show(result, "flow")


def test_the_graph_runs_only_within_the_work_limit(app_env, tr, monkeypatch):
    from app.limits import work

    w = work.flow_work(tr, 10, 12)
    assert work.flow_work(tr, 20, 12) > w and work.flow_work(tr, 10, 24) > w
    assert w > work.alti_work(tr, 10, 12)  # each head's terms, not each key's: more than ALTI+
    monkeypatch.setenv("ATTN_MAX_WORK", str(w * 1.01))
    assert work.plan_flow(tr, 10, 12) == (True, [])
    fits, notices = work.plan_flow(tr, 20, 12)
    assert not fits and "not computed" in notices[0]
    monkeypatch.setenv("ATTN_MAX_WORK", "0.0001")
    at = new_app({"text": TEXT, "view": "how_each_word_is_built"})
    assert not at.exception
    assert any("not computed for this sentence" in i.value for i in at.info)
    assert not [c for c in at.get("plotly_chart") if "How output piece" in c.proto.spec]


def test_a_long_sentence_shows_a_window_of_its_positions(app_env):
    from app.page import heatmaps

    at = new_app({"text": " ".join(["a man rides a red bike in the park"] * 10), "view": "how_each_word_is_built"})
    assert_clean(at)
    window = at.slider(key="flow_swin")
    assert window.value == (1, heatmaps.WINDOW)
    fig = chart(at, "How output piece 1")
    nodes = [t for t in fig["data"] if t.get("name") == "nodes"][0]
    assert -arr(nodes["y"]).min() < heatmaps.WINDOW  # only the rows in the window
    assert len(fig["layout"]["yaxis"]["ticktext"]) == heatmaps.WINDOW


def test_a_link_with_values_out_of_range_opens_the_defaults(app_env):
    at = new_app({"text": TEXT, "view": "how_each_word_is_built", "fs": "999", "ft": "0.9",
                  "fh": "cross.9.9@99", "fw": "1-2"})
    assert_clean(at)
    assert at.selectbox(key="flow_step").value == 1
    assert at.slider(key="flow_threshold").value == flowgraph.DEFAULT_THRESHOLD
    assert at.selectbox(key="flow_head").value is None
    chart(at, "How output piece 1")


def test_the_graph_at_threshold_0_is_planned_within_the_work_limit_and_cached(app_env, tr, monkeypatch):
    """Issue #54: at threshold 0 a long sentence's graph has hundreds of thousands of edges. Its size is bounded
    from the weights before it is built, a higher threshold is drawn (with a notice) when it does not fit, and a
    step's graph at a threshold is built once."""
    from app.analysis import cached
    from app.limits import work
    from transformer.interpret.flow import Flow

    ref = tr.translate(TEXT)
    f = flow(tr.model, torch.tensor([ref.source_ids]), torch.tensor([[tr.config.bos_id, *ref.target_ids[:-1]]]))
    step = len(ref.target_ids) - 1
    for threshold in (0.0, 0.01, 0.05, 0.2, 0.5):
        graph = f.graph(step, threshold)  # the oracle: the graph itself, within its bound
        nodes, edges = work.flow_graph_size(f, step, threshold)
        assert len(graph.nodes) <= nodes and len(graph.edges) <= edges
    full = work.flow_graph_work(f, step, 0.0)
    assert work.plan_flow_graph(f, step, 0.0, ceiling=full) == (0.0, full, [])
    used, estimate, notices = work.plan_flow_graph(f, step, 0.0, ceiling=full / 3)
    assert 0 < used <= 0.5 and estimate == work.flow_graph_work(f, step, used) <= full / 3
    assert work.flow_graph_work(f, step, round(used - 0.01, 6)) > full / 3  # the lowest on the slider's grid
    assert notices == [f"the information-flow graph drawn at threshold {used:g} instead of 0 (about "
                       f"{work.amount(full)} units asked)"]

    built = []
    graph_of = Flow.graph
    monkeypatch.setattr(Flow, "graph", lambda self, *args: built.append(args) or graph_of(self, *args))
    monkeypatch.setattr(work, "FLOW_EDGE", 1.0)  # an edge a unit: the whole graph is over the limit
    monkeypatch.setenv("ATTN_MAX_WORK", "1000")
    cached.RESULTS.clear()
    at = new_app({"text": TEXT, "view": "how_each_word_is_built", "ft": "0"})
    assert_clean(at)
    said = next(plain(c.value) for c in at.caption if "head edges at threshold" in c.value)
    drawn = float(re.search(r"head edges at threshold ([0-9.]+[0-9])", said).group(1))
    assert drawn > 0 and any(f"drawn at threshold {drawn:g} instead of 0" in plain(i.value) for i in at.info)
    nodes = [t for t in chart(at, "How output piece 1")["data"] if t.get("name") == "nodes"][0]
    assert len(arr(nodes["x"])) == len(graph_of(f, 0, drawn).nodes)
    assert built == [(0, drawn)]
    at.run()  # the same step and threshold again: from the cache
    assert_clean(at)
    assert built == [(0, drawn)]


def test_each_side_has_its_rows_and_a_step_is_named_by_its_piece_everywhere():
    """Issue 57 §2: a divider between the encoder's columns and the decoder's, each side naming its rows; one name per
    output step (the piece it produces) in the rows, the hovers and the head picker; a note where no source term
    reaches the piece; columns far enough apart, and targets large enough, for a finger."""
    from app.drawing.layout import min_width
    from app.views.how_each_word_is_built import query_name

    g = small_graph()
    fig = flowgraph.flow_figure(g, ["▁a", "▁b", "<x>", "</s>"], ["▁c", "▁d"], (1, 1))
    (band,) = fig.layout.shapes
    last_encoder = flowgraph.column_x(Node("encoder", 0, "ffn", 0), 1)
    first_decoder = flowgraph.column_x(Node("decoder", -1, "embed", 0), 1)
    assert last_encoder < band.x0 < band.x1 < first_decoder and (band.y0, band.y1) == (0, 1)
    sides = [a for a in fig.layout.annotations if a.name == "side"]
    assert [a.x < band.x0 for a in sides] == [True, False] and "source pieces" in sides[0].text
    assert "output steps" in sides[1].text
    (heads,) = traces(fig, "heads")
    named = query_name("cross", 1, ["▁a", "▁b", "<x>", "</s>"], ["▁c", "▁d"])
    assert f"to {named}" in heads.hovertext[0] and fig.layout.yaxis2.ticktext[1] == "<b>2 → ▁d</b>"
    assert flowgraph.no_source_note(g) is None and not [a for a in fig.layout.annotations if a.name == "no source"]
    # a phone: every two block columns (a third of a layer apart) at least TOUCH_PX apart, so the chart scrolls
    x0, x1 = fig.layout.xaxis.range
    assert min_width(fig) >= 3 * flowgraph.TOUCH_PX * (x1 - x0)  # the plot alone; its labels besides (browser test)
    assert min(heads.marker.size) + 2 * fig.layout.hoverdistance >= flowgraph.TOUCH_PX  # a finger's target
    # no source term: the encoder's half says why it is empty
    decoder_only = FlowGraph(1, 0.3, [n for n in g.nodes if n.side == "decoder"],
                             [e for e in g.edges if e.source.side == "decoder"])
    note = flowgraph.no_source_note(decoder_only)
    assert note and "0.3" in note
    fig = flowgraph.flow_figure(decoder_only, ["▁a", "▁b", "<x>", "</s>"], ["▁c", "▁d"], (1, 1))
    (empty,) = [a for a in fig.layout.annotations if a.name == "no source"]
    assert empty.x < band.x0


def test_an_opened_head_stays_open_whatever_the_threshold_and_two_routes_compare(app_env, tr):
    """Issue 57 §2: a head the threshold hides stays open (the picker, the address and the panel agree), and back at
    the default it is still open; another piece's route is drawn below with the heads the two share (against
    ``transformer.interpret.flow``'s own graphs)."""
    at = set_view(translate(new_app(), TEXT), "how_each_word_is_built")
    picker = at.selectbox(key="flow_head")
    picker.set_value(picker.options[0])
    at.run()
    opened = at.query_params["fh"]
    no_edge = lambda: any("no edge in the graph" in c.value for c in at.caption)  # noqa: E731
    assert not no_edge()  # it was picked from this graph: it has an edge in it
    at.slider(key="flow_threshold").set_value(0.5)  # no head has an edge of 0.5 and more here
    at.run()
    assert_clean(at)
    assert at.selectbox(key="flow_head").value == opened and at.query_params["fh"] == opened
    assert no_edge()
    assert chart(at, "attention of")
    at.slider(key="flow_threshold").set_value(flowgraph.DEFAULT_THRESHOLD)
    at.run()
    assert at.selectbox(key="flow_head").value == opened and at.query_params["fh"] == opened
    assert not no_edge()
    # compare with piece 2's route
    at.selectbox(key="flow_compare").set_value(2)
    at.run()
    assert_clean(at)
    assert at.query_params["fc"] == "2" and chart(at, "How output piece 2")
    ref = tr.translate(TEXT)
    src = torch.tensor([ref.source_ids])
    tgt = torch.tensor([[tr.config.bos_id, *ref.target_ids[:-1]]])
    f = flow(tr.model, src, tgt)
    one, two = (f.graph(t, flowgraph.DEFAULT_THRESHOLD).heads() for t in (0, 1))
    said = next(c.value for c in at.caption if c.value.startswith("Heads on both routes"))
    assert f"Heads on both routes ({len(one & two)})" in said
    assert f"Only on piece 1's ({len(one - two)})" in said and f"Only on piece 2's ({len(two - one)})" in said
