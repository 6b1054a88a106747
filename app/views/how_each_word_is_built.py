"""How each word is built: the information-flow graph of one output piece ("Information flow routes", Ferrando and
Voita, 2024) through the encoder, the cross-attention and the decoder; a click on a head's edge opens that head."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from transformer.interpret.flow import FlowGraph

from ..drawing import figures, flowgraph, layout
from ..drawing.analysis import KIND_NAMES, escape, first_numbers
from ..limits import ledger, work
from ..page import controls, heatmaps, plots
from ..page.params import Param, float_in, int_in
from ..page.state import ViewContext
from ..parts import how_each_word_is_built as described  # this view's description (the offline page's too)

FLOW_STEP, FLOW_THRESHOLD, FLOW_HEAD, FLOW_WINDOW, FLOW_COMPARE = ("flow_step", "flow_threshold", "flow_head",
                                                                   "flow_swin", "flow_compare")
_HEAD = re.compile(r"(encoder|decoder|cross)\.([0-9]{1,3})\.([0-9]{1,3})@([0-9]{1,5})")


def parse_head(text: str) -> str | None:
    """``"cross.2.3@4"`` (kind, layer, head, query position, all from 1) as it is; None when malformed."""
    match = _HEAD.fullmatch(str(text).strip())
    return match.group(0) if match and min(int(g) for g in match.groups()[1:]) >= 1 else None


def head_of(text: str | None) -> tuple[str, int, int, int] | None:
    """``"cross.2.3@4"`` -> ``("cross", 1, 2, 3)`` (0-based), or None."""
    match = _HEAD.fullmatch(str(text or ""))
    if not match:
        return None
    return match.group(1), int(match.group(2)) - 1, int(match.group(3)) - 1, int(match.group(4)) - 1


def head_text(kind: str, layer: int, head: int, query: int) -> str:
    return f"{kind}.{layer + 1}.{head + 1}@{query + 1}"


def query_name(kind: str, query: int, source: list[str], outputs: list[str]) -> str:
    """A head's query by its one name: a source piece (encoder self-attention), else the output step by the piece it
    produces (``flowgraph.step_name``), as the graph's hovers and rows name it."""
    return f"source {query + 1}: {escape(source[query])}" if kind == "encoder" else flowgraph.step_name(query, outputs)


def fits_sentence(tr, head: tuple[str, int, int, int], n_source: int, n_outputs: int) -> bool:
    """Whether a head at a query exists for this model and sentence (an opened head stays open while it does)."""
    kind, layer, h, query = head
    return (0 <= layer < controls.n_layers(tr, kind) and 0 <= h < tr.config.n_heads
            and 0 <= query < (n_source if kind == "encoder" else n_outputs))


PARAMS = (Param("fs", FLOW_STEP, int_in(1, 10_000), 1),
          Param("ft", FLOW_THRESHOLD, float_in(0.0, 0.5), flowgraph.DEFAULT_THRESHOLD, lambda v: f"{float(v):g}"),
          Param("fh", FLOW_HEAD, parse_head), heatmaps.span_param("fw", FLOW_WINDOW),
          Param("fc", FLOW_COMPARE, int_in(1, 10_000)))


def render(ctx: ViewContext) -> None:
    """The output piece and threshold pickers, the graph, and the opened head; another piece's graph to compare."""
    result, tr = ctx.result, ctx.tr
    st.caption(described.INTRO + " Click a head's edge (its dot) to see what that head reads and what it writes.")
    outputs, source = result.target_tokens, result.source_tokens
    fits, notices = work.plan_flow(tr, len(result.source_ids), len(result.target_ids))
    controls.capped(notices)
    if not fits or not outputs:
        return
    c1, c2 = st.columns([3, 2], vertical_alignment="bottom")
    steps = list(range(1, len(outputs) + 1))
    step = controls.choose(c1.selectbox, "Output piece", steps, FLOW_STEP, 1,
                           format_func=lambda i: f"{i}: {outputs[i - 1]}")
    st.session_state.setdefault(FLOW_THRESHOLD, flowgraph.DEFAULT_THRESHOLD)
    threshold = c2.slider("Hide terms below", 0.0, 0.5, step=0.01, key=FLOW_THRESHOLD, persist_state="session",
                          help="A term's weight: its share of the block's output at that position (a position's "
                               "terms sum to 1).")
    data = ctx.model.beyond("flow", result, work.work_bytes())
    # building the graph is work too (at threshold 0 a long sentence's has hundreds of thousands of edges): planned
    # within this request's limit, a higher threshold when it does not fit; cached per sentence, step and threshold
    drawn, used = planned_graph(ctx, data, step, float(threshold))
    if drawn is None:
        return
    graph, left_out = drawn.graph, drawn.left_out
    n_rows = max(len(source), len(outputs))
    first, end = heatmaps.span_slider(st, "Positions shown", n_rows, heatmaps.span_param("fw", FLOW_WINDOW))
    graph, outside = flowgraph.in_window(graph, first, end) if (first, end) != (0, n_rows) else (graph, 0)
    if left_out:
        st.caption(f"The {flowgraph.MOST_EDGES} strongest of {drawn.edges} edges drawn; raise the threshold to "
                   "see all of a smaller graph.")
    if outside:
        st.caption(f"{outside} edges reach outside the positions shown.")
    heads = drawn.heads
    strongest_edge = dict(heads)  # each head at each query: its strongest edge
    options = list(dict.fromkeys(head_text(*h) for h, _ in heads))
    # an opened head stays open whatever the threshold or the piece (the address and the page agree): it is
    # offered even where it has no edge, and said so
    opened = head_of(st.session_state.get(FLOW_HEAD))
    controls.keep_if(FLOW_HEAD, opened is None or fits_sentence(tr, opened, len(source), len(outputs)))
    selected = head_of(st.session_state.get(FLOW_HEAD))
    if selected is not None and head_text(*selected) not in options:
        options.append(head_text(*selected))

    def open_clicked() -> None:
        for point in ((st.session_state.get("flow_chart") or {}).get("selection") or {}).get("points", []):
            custom = point.get("customdata")
            if isinstance(custom, (list, tuple)) and len(custom) >= 4 and custom[0] in KIND_NAMES:
                text = head_text(str(custom[0]), int(custom[1]), int(custom[2]), int(custom[3]))
                if text in options:
                    st.session_state[FLOW_HEAD] = text
                    return

    n_layers = (tr.config.n_encoder_layers, tr.config.n_decoder_layers)
    fig = flowgraph.flow_figure(graph, source, outputs, n_layers, selected, (first, end),
                                title=flowgraph.title(step - 1, outputs))
    plots.chart(fig, f"flow-{step}", "flow_chart", on_select=open_clicked, selection_mode="points")
    if drawn.no_source is not None:
        st.caption(drawn.no_source)
    st.caption(f"{drawn.nodes} nodes, {drawn.edges} edges, {len(strongest_edge)} head edges at threshold "
               f"{used:g}. Columns: the encoder's embeddings (emb) and layers E1, E2, ..., then, past the grey "
               "divider, the decoder's; within a layer its blocks (encoder: self-attention, feed-forward; decoder: "
               "self-attention, cross-attention, feed-forward). Rows: on the encoder's side the source pieces (from "
               "1, named on the left), on the decoder's the output steps, each named by the piece it produces (on "
               "the right). Squares: the feed-forward block's weight.")
    labels = {head_text(*h): f"{KIND_NAMES[h[0]]} · L{h[1] + 1} · H{h[2] + 1} at "
                             f"{query_name(h[0], h[3], source, outputs)} ({w:.2f})" for h, w in heads}
    if selected is not None and head_text(*selected) not in labels:
        kind, layer, head, query = selected
        labels[head_text(*selected)] = (f"{KIND_NAMES[kind]} · L{layer + 1} · H{head + 1} at "
                                        f"{query_name(kind, query, source, outputs)} (no edge in this graph)")
    st.selectbox("Open a head (or click its edge)", options, key=FLOW_HEAD, index=None, placeholder="Pick a head…",
                 format_func=lambda t: html.unescape(labels.get(t, t)))
    if selected is not None:
        if selected not in strongest_edge:  # keyed (kind, layer, head, query)
            st.caption(f"This head has no edge in the graph of output piece {step} at threshold {used:g}; it "
                       "stays open (lower the threshold, or pick another head).")
        show_head(ctx, *selected)
    compare(ctx, data, (step, drawn), used, steps, (first, end), n_layers)


@dataclass(frozen=True)
class Drawn:
    """What the view keeps of one step's graph (cached, so small): the graph of its strongest edges
    (``flowgraph.strongest``), how many it left out, the whole graph's node and edge counts, each head at each
    query ``(kind, layer, head, query)`` with its strongest edge's weight, strongest first, and the note when no
    source term reaches the piece (``flowgraph.no_source_note``)."""

    graph: FlowGraph
    left_out: int
    nodes: int
    edges: int
    heads: tuple[tuple[tuple[str, int, int, int], float], ...]
    no_source: str | None


def summarise(full: FlowGraph) -> Drawn:
    """:class:`Drawn` of a whole graph."""
    graph, left_out = flowgraph.strongest(full)
    strongest_edge: dict[tuple[str, int, int, int], float] = {}  # each head at each query: its strongest edge
    for e in full.edges:
        if e.head is not None:
            at = (e.kind, e.layer, e.head, e.target.position)
            strongest_edge[at] = max(e.weight, strongest_edge.get(at, 0.0))
    return Drawn(graph, left_out, len(full.nodes), len(full.edges),
                 tuple(sorted(strongest_edge.items(), key=lambda kv: -kv[1])), flowgraph.no_source_note(full))


def planned_graph(ctx: ViewContext, data, step: int, threshold: float) -> tuple[Drawn | None, float]:
    """One output step's graph (1-based ``step``) as :class:`Drawn`, at ``threshold`` or the lowest higher one that
    fits what is left of this request's work (with the page's notice; None when none does), and the threshold used."""
    used, estimate, notices = work.plan_flow_graph(data, step - 1, threshold)
    controls.capped(notices)
    if used is None:
        return None, threshold
    ledger.spend(estimate)
    return ctx.model.flow_graph(ctx.result, data, step - 1, used, summarise), used


def compare(ctx: ViewContext, data, mine: tuple[int, Drawn], threshold: float, steps: list[int],
            rows: tuple[int, int], n_layers: tuple[int, int]) -> None:
    """Another output piece's graph below, at the same threshold (planned and cached as the first), and which heads
    the two routes share."""
    outputs, source = ctx.result.target_tokens, ctx.result.source_tokens
    step, drawn = mine
    controls.keep_if(FLOW_COMPARE, st.session_state.get(FLOW_COMPARE) in steps + [None])
    other = st.selectbox("Compare with the route of another output piece", steps, key=FLOW_COMPARE, index=None,
                         placeholder="Pick an output piece…", format_func=lambda i: f"{i}: {outputs[i - 1]}")
    if other is None:
        return
    theirs, used = planned_graph(ctx, data, other, threshold)
    if theirs is None:
        return
    graph = theirs.graph
    if rows != (0, max(len(source), len(outputs))):
        graph, _ = flowgraph.in_window(graph, *rows)
    fig = flowgraph.flow_figure(graph, source, outputs, n_layers, rows=rows, title=flowgraph.title(other - 1, outputs))
    plots.chart(fig, f"flow-{other}", "flow_compare_chart")
    if used != threshold:
        return  # the two routes were built at different thresholds: their heads are not comparable
    heads = lambda d: {h[:3] for h, _ in d.heads}  # noqa: E731 - (kind, layer, head) with an edge
    both, only_mine, only_theirs = (heads(drawn) & heads(theirs), heads(drawn) - heads(theirs),
                                    heads(theirs) - heads(drawn))
    name = lambda hs: ", ".join(f"{KIND_NAMES[k]} L{la + 1} H{h + 1}" for k, la, h in sorted(hs)[:8]) + (  # noqa: E731
        f" and {len(hs) - 8} more" if len(hs) > 8 else "")
    st.caption(f"Heads on both routes ({len(both)}): {name(both) or 'none'}. Only on piece {step}'s "
               f"({len(only_mine)}): {name(only_mine) or 'none'}. Only on piece {other}'s ({len(only_theirs)}): "
               f"{name(only_theirs) or 'none'}.")


def show_head(ctx: ViewContext, kind: str, layer: int, head: int, query: int) -> None:
    """One head at one query: its attention row, and the pieces its output promotes and suppresses."""
    result = ctx.result
    queries, keys = result.axes(kind)
    if not (0 <= layer < controls.n_layers(ctx.tr, kind) and 0 <= head < ctx.tr.config.n_heads
            and 0 <= query < len(queries)):
        return
    data = ctx.model.beyond("flow_head", result, kind, layer, head, query)
    key_first = first_numbers(kind)[1]
    name = f"{KIND_NAMES[kind]} · layer {layer + 1} · head {head + 1}"
    c1, c2 = st.columns(2)
    row = np.asarray(data["row"])
    labels = [f"{j}: {escape(t)}" for j, t in enumerate(keys, key_first)]
    fig = go.Figure(go.Bar(x=row, y=list(range(len(keys))), orientation="h", marker_color=flowgraph.COLOURS[kind],
                           hovertext=[f"{label}: {w:.3f}" for label, w in zip(labels, row)], hoverinfo="text"))
    asked = query_name(kind, query, ctx.result.source_tokens, ctx.result.target_tokens)
    fig.update_layout(title=dict(text=f"{name}<br>attention of {asked}", x=0.0),
                      font=layout.FONT, height=int(110 + 22 * max(len(keys), 4)), plot_bgcolor="white",
                      margin=dict(l=10, r=10, t=70, b=30),
                      yaxis=dict(tickmode="array", tickvals=list(range(len(keys))), ticktext=labels,
                                 autorange="reversed", automargin=True, tickfont=dict(size=12)),
                      xaxis=dict(title=dict(text="weight", font=dict(size=12)), range=[0, 1]))
    plots.plotly(c1, fig, figures.plotly_config("flow-head-row"), "flow_head_row")
    plots.plotly(c2, flowgraph.head_bars(data["promoted"], data["suppressed"],
                                            title=f"{name}<br>what its output promotes and suppresses"),
                    figures.plotly_config("flow-head-pieces"), "flow_head_pieces")
    st.caption("Promotes and suppresses: the head's output at this position alone, through the final layer norm and "
               "the output embedding (as the logit lens reads a layer), the highest and the lowest logits.")
