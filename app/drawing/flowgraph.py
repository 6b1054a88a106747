"""The information-flow graph as a plotly figure (``transformer.interpret.flow``): columns are the encoder's layers,
then, past a divider, the decoder's (each layer's blocks side by side: attention, then feed-forward; the decoder's
self-attention, cross-attention, feed-forward); rows are the positions (on the encoder's side its source pieces, on
the decoder's its output steps, each named by the piece it produces); each edge's width is its weight and its colour
the kind of block that made it. Plain functions of the graph's data (no Streamlit), for the app, the offline page and
tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from transformer.interpret.flow import Edge, FlowGraph, Node

from .analysis import escape
from .layout import FONT, MIN_FONT, fit_margins, text_px

COLOURS = {"encoder": "#1f77b4", "decoder": "#2ca02c", "cross": "#ff7f0e", "ffn": "#9467bd", "residual": "#a8a8a8"}
NAMES = {"encoder": "Encoder self-attention", "decoder": "Decoder self-attention", "cross": "Cross-attention",
         "ffn": "Feed-forward", "residual": "Residual"}
WIDTHS = ((0.0, 0.1, 1.0), (0.1, 0.25, 2.0), (0.25, 0.5, 3.5), (0.5, 1.01, 5.5))  # (from, below, line width)
DECODER_GAP = 0.8  # x units between the encoder's last column and the decoder's embedding column
DEFAULT_THRESHOLD = 0.08  # chosen on val by ``python -m bench.flow`` for both shipped models (docs/flow.md)
MOST_EDGES = 3000  # edges drawn at the most (the strongest): what the browser draws stays bounded
SELECTED = "#111111"
TOUCH_PX = 24  # px: the least distance between two columns' points, and the least target a tap must hit (WCAG 2.5.8)
HOVER_PX = 12  # px around a point where a hover or a tap still finds it (plotly's hoverdistance)
DIVIDER = "#eeeeee"  # the band between the encoder's columns and the decoder's
HEAD_DOT = 7  # px: the smallest head's dot; with HOVER_PX round it, a target 7 + 2 x 12 = 31 px across (>= TOUCH_PX)


def column_x(node: Node, n_encoder: int) -> float:
    """x of a node's column: the encoder's embedding at 0, its layer ``l`` at ``l + 0.5`` (attention) and
    ``l + 1`` (feed-forward); the decoder's after a gap, its layer's three blocks at thirds."""
    if node.side == "encoder":
        return 0.0 if node.block == "embed" else node.layer + (0.5 if node.block == "encoder" else 1.0)
    base = n_encoder + DECODER_GAP
    if node.block == "embed":
        return base
    return base + node.layer + {"decoder": 1 / 3, "cross": 2 / 3, "ffn": 1.0}[node.block]


def strongest(graph: FlowGraph, most: int = MOST_EDGES) -> tuple[FlowGraph, int]:
    """The graph with its ``most`` strongest edges (and the nodes they touch, the output's node always), and how
    many edges were left out."""
    if len(graph.edges) <= most:
        return graph, 0
    kept = sorted(graph.edges, key=lambda e: -e.weight)[:most]
    nodes = {e.source for e in kept} | {e.target for e in kept}
    root = max((n for n in graph.nodes if n.side == "decoder" and n.position == graph.step and n.block == "ffn"),
               key=lambda n: n.layer, default=None)
    nodes |= {root} if root is not None else set()
    return FlowGraph(graph.step, graph.threshold, sorted(nodes), kept), len(graph.edges) - most


def in_window(graph: FlowGraph, first: int, end: int) -> tuple[FlowGraph, int]:
    """The graph's nodes at positions ``first .. end-1`` and the edges between them; how many edges were left
    out."""
    inside = lambda n: first <= n.position < end  # noqa: E731
    edges = [e for e in graph.edges if inside(e.source) and inside(e.target)]
    return FlowGraph(graph.step, graph.threshold, [n for n in graph.nodes if inside(n)], edges), \
        len(graph.edges) - len(edges)


def step_name(position: int, outputs: Sequence[str]) -> str:
    """An output step by the piece it produces (``position`` 0-based, steps counted from 1), escaped: ``step 8 →
    ▁fährt``. The one name of a decoder position in the graph, its hovers, its head picker and the opened head."""
    return f"step {position + 1} → {escape(outputs[position])}"


def piece(node: Node, source: Sequence[str], outputs: Sequence[str]) -> str:
    """A node's position, escaped: a source piece with its number (from 1), or an output step (:func:`step_name`)."""
    if node.side == "encoder":
        return f"source {node.position + 1}: {escape(source[node.position])}"
    return step_name(node.position, outputs)


def place(node: Node, n_encoder: int) -> str:
    side = "encoder" if node.side == "encoder" else "decoder"
    if node.block == "embed":
        return f"{side} embedding"
    return f"{side} layer {node.layer + 1}, after {NAMES[node.block].lower()}"


def head_point(edge: Edge) -> list:
    """What a click on a head's edge gives back: ``[kind, layer, head, query, key]`` (0-based)."""
    return [edge.kind, edge.layer, edge.head, edge.target.position, edge.source.position]


def no_source_note(graph: FlowGraph) -> str | None:
    """What to say when no term from the source reaches the piece at the graph's threshold (its route stays in the
    decoder, as the last piece ``</s>``'s often does); None when one does."""
    if any(n.side == "encoder" for n in graph.nodes):
        return None
    return (f"No term from the source reaches this piece at threshold {graph.threshold:g}: every cross-attention "
            "term on its route is below it, so the route stays in the decoder (lower the threshold to see weaker "
            "routes).")


def flow_figure(graph: FlowGraph, source: Sequence[str], outputs: Sequence[str], n_layers: tuple[int, int],
                selected: tuple[str, int, int, int] | None = None, rows: tuple[int, int] | None = None,
                title: str = "") -> go.Figure:
    """The graph of one output piece: ``source`` the source pieces (the encoder's rows), ``outputs`` the output
    pieces (the decoder's rows, each step named by the piece it produces; ``outputs[graph.step]`` the chosen one),
    ``n_layers`` ``(encoder, decoder)``. ``selected`` ``(kind, layer, head, query)`` draws that head's edges dark;
    ``rows`` ``(first, end)``: the positions shown (default all). A click on a head's edge selects a point whose
    ``customdata`` is :func:`head_point`; ``meta["min_width"]`` keeps every two columns ``TOUCH_PX`` apart (a
    narrower screen scrolls)."""
    n_enc, n_dec = n_layers
    output = outputs[graph.step]
    n_rows = max(len(source), len(outputs))
    first, end = rows if rows is not None else (0, n_rows)
    x_of = lambda n: column_x(n, n_enc)  # noqa: E731
    traces = []
    # edges, one trace per kind and width (plotly draws one width per trace); a legend entry per kind
    by_kind: dict[str, list[Edge]] = {}
    for e in graph.edges:
        by_kind.setdefault(e.kind, []).append(e)
    for kind in ("residual", "encoder", "decoder", "cross"):
        edges = by_kind.get(kind, [])
        traces.append(dict(
            type="scatter", x=[None], y=[None], mode="lines", line=dict(color=COLOURS[kind], width=3), name=NAMES[kind],
            legendgroup=kind, hoverinfo="skip"))
        for low, high, width in WIDTHS:
            chosen = [e for e in edges if low <= e.weight < high]
            if not chosen:
                continue
            xs = np.array([[x_of(e.source), x_of(e.target), np.nan] for e in chosen]).ravel()
            ys = np.array([[-e.source.position, -e.target.position, np.nan] for e in chosen]).ravel()
            traces.append(dict(
                type="scatter", x=xs, y=ys, mode="lines", line=dict(color=COLOURS[kind], width=width),
                opacity=0.75 if kind != "residual" else 0.9, legendgroup=kind, showlegend=False, hoverinfo="skip",
                name=NAMES[kind]))
    if selected is not None:
        mine = [e for e in graph.edges if (e.kind, e.layer, e.head, e.target.position) == selected]
        if mine:
            xs = np.array([[x_of(e.source), x_of(e.target), np.nan] for e in mine]).ravel()
            ys = np.array([[-e.source.position, -e.target.position, np.nan] for e in mine]).ravel()
            traces.append(dict(
                type="scatter", x=xs, y=ys, mode="lines", line=dict(color=SELECTED, width=3),
                name="the head opened below", hoverinfo="skip"))
    # the feed-forward blocks: a square on the node they write, its size their weight
    ffn = by_kind.get("ffn", [])
    traces.append(dict(
        type="scatter", x=[x_of(e.target) for e in ffn] or [None], y=[-e.target.position for e in ffn] or [None],
        mode="markers",
        marker=dict(symbol="square", color=COLOURS["ffn"], size=[6 + 16 * e.weight for e in ffn] or [0]),
        name=NAMES["ffn"], legendgroup="ffn", hoverinfo="text",
        hovertext=[f"<b>Feed-forward</b>, {escape(place(e.target, n_enc))}<br>{piece(e.target, source, outputs)}"
                   f"<br>weight {e.weight:.3f}" for e in ffn]))
    # a point in the middle of every head's edge: hover names the head, a click opens it
    heads = [e for e in graph.edges if e.head is not None]
    traces.append(dict(
        type="scatter", x=[(x_of(e.source) + x_of(e.target)) / 2 for e in heads],
        y=[-(e.source.position + e.target.position) / 2 for e in heads], mode="markers",
        marker=dict(size=[HEAD_DOT + 8 * e.weight for e in heads], color=[COLOURS[e.kind] for e in heads],
                    line=dict(color="white", width=1)),
        customdata=[head_point(e) for e in heads], showlegend=False, name="heads", hoverinfo="text",
        hovertext=[f"<b>{NAMES[e.kind]}</b> · layer {e.layer + 1} · head {e.head + 1}<br>from "
                   f"{piece(e.source, source, outputs)}<br>to {piece(e.target, source, outputs)}<br>"
                   f"weight {e.weight:.3f} (click to open this head)" for e in heads]))
    # the nodes, and the output piece's node ringed
    nodes = graph.nodes
    traces.append(dict(
        type="scatter", x=[x_of(n) for n in nodes], y=[-n.position for n in nodes], mode="markers",
        marker=dict(size=5, color="#555"), showlegend=False, name="nodes", hoverinfo="text",
        hovertext=[f"{escape(place(n, n_enc))}<br>{piece(n, source, outputs)}" for n in nodes]))
    root = Node("decoder", n_dec - 1, "ffn", graph.step)
    traces.append(dict(
        type="scatter", x=[x_of(root)], y=[-graph.step], mode="markers",
        marker=dict(size=14, color="rgba(0,0,0,0)", line=dict(color="#d62728", width=2.5)), showlegend=False,
        hoverinfo="text", name="output", hovertext=[f"output piece {graph.step + 1}: {escape(output)}"]))
    # where no term from the source reaches the piece, its half says so (not an empty encoder without a word)
    empty = no_source_note(graph)
    notes = [dict(x=n_enc / 2, y=-(first + end - 1) / 2, xref="x", yref="y", showarrow=False, text="no route from<br>"
                  f"the source at<br>threshold {graph.threshold:g}", font=dict(size=12, color="#555555"),
                  name="no source")] if empty else []
    # row labels as axis ticks (the axes make room for them): the source pieces on the left, the output steps on
    # the right, beside the last column, each named by the piece it produces (the chosen step's in bold)
    font = 12 if n_rows <= 30 else MIN_FONT
    src_rows = [i for i in range(len(source)) if first <= i < end]
    dec_rows = [i for i in range(len(outputs)) if first <= i < end and i <= graph.step]  # later: unread
    dec_text = [f"<b>{i + 1} → {escape(outputs[i])}</b>" if i == graph.step else f"{i + 1} → {escape(outputs[i])}"
                for i in dec_rows]
    traces.append(dict(
        type="scatter", x=[column_x(root, n_enc)] * len(dec_rows), y=[-i for i in dec_rows], mode="markers",
        marker=dict(size=1, opacity=0), yaxis="y2", showlegend=False, hoverinfo="skip", name="decoder rows"))
    ticks = [(0.0, "emb")] + [(i + 1.0, f"E{i + 1}") for i in range(n_enc)]  # short: they fit a phone
    base = n_enc + DECODER_GAP
    ticks += [(base, "emb")] + [(base + i + 1.0, f"D{i + 1}") for i in range(n_dec)]
    height = int(min(max(380, 170 + 30 * (end - first)), 2400))
    y_range = [-(end - 1) - 0.6, -first + 0.6]
    x_range = [-0.3, base + n_dec + 0.3]
    right = max((text_px(t, font) for t in dec_text), default=0) + 30  # the output steps' labels, right of the plot
    # the divider: a band between the encoder's last column and the decoder's first, saying which rows are which
    # (source piece i and output step i share a height, not a meaning)
    divider = dict(type="rect", xref="x", yref="paper", x0=n_enc + 0.2, x1=base - 0.2, y0=0, y1=1, layer="below",
                   fillcolor=DIVIDER, line=dict(width=0))
    notes += [dict(x=x, y=1.0, xref="x", yref="paper", yanchor="bottom", yshift=22, showarrow=False, text=text,
                   font=dict(size=12, color="#555555"), name="side")
              for x, text in ((n_enc / 2, "<b>encoder</b> · rows: source pieces"),
                              (base + n_dec / 2, "<b>decoder</b> · rows: output steps"))]
    return fit_margins(go.Figure(traces, dict(
        title=dict(text=title, x=0.0), font=FONT, height=height, plot_bgcolor="white", dragmode="pan",
        margin=dict(l=10, r=10, t=100 if title else 60, b=90), shapes=[divider], annotations=notes,  # b: the legend
        hoverdistance=HOVER_PX, meta={"min_width": int(3 * TOUCH_PX * (x_range[1] - x_range[0]) + right)},
        xaxis=dict(tickmode="array", tickvals=[t for t, _ in ticks], ticktext=[t for _, t in ticks], side="top",
                   tickfont=dict(size=11), range=x_range, showgrid=True, gridcolor="#eeeeee",
                   zeroline=False),
        yaxis=dict(range=y_range, tickmode="array", tickvals=[-i for i in src_rows], automargin=True,
                   ticktext=[f"{escape(source[i])} {i + 1}" for i in src_rows], tickfont=dict(size=font),
                   showgrid=False, zeroline=False),
        yaxis2=dict(range=y_range, overlaying="y", side="right", tickmode="array", tickvals=[-i for i in dec_rows],
                    ticktext=dec_text, tickfont=dict(size=font), automargin=True, showgrid=False, zeroline=False),
        legend=dict(orientation="h", y=-0.01, x=0.0, yanchor="top", font=dict(size=12)),
        clickmode="event+select",
    )))


def step_figures(data, source: Sequence[str], outputs: Sequence[str], n_layers: tuple[int, int],
                 threshold: float = DEFAULT_THRESHOLD, most_steps: int = 60) -> list[go.Figure]:
    """The figure of each output piece (the first ``most_steps``) at ``threshold``, from a ``Flow`` ``data`` (the
    offline page's view, which has no slider)."""
    return [flow_figure(strongest(data.graph(t, threshold))[0], source, outputs, n_layers, title=title(t, outputs))
            for t in range(min(len(outputs), most_steps))]


def title(step: int, outputs: Sequence[str]) -> str:
    """The title of output piece ``step``'s graph (0-based)."""
    return f"How output piece {step + 1} ({escape(outputs[step])}) is built"


def head_bars(promoted: Sequence[tuple[str, float]], suppressed: Sequence[tuple[str, float]],
              title: str = "") -> go.Figure:
    """The pieces one head promotes (its output through the final norm and the output embedding: the highest
    logits) and suppresses (the lowest), as horizontal bars."""
    labels = [escape(p) for p, _ in promoted] + [escape(p) for p, _ in suppressed]
    values = [v for _, v in promoted] + [v for _, v in suppressed]
    colours = ["#2ca02c"] * len(promoted) + ["#d62728"] * len(suppressed)
    n = len(labels)
    bars = dict(type="bar", x=values, y=list(range(n)), orientation="h", marker=dict(color=colours),
                hovertext=[f"{label}: {v:+.2f}" for label, v in zip(labels, values)], hoverinfo="text")
    fig = go.Figure(bars, dict(title=dict(text=title, x=0.0), font=FONT, height=int(90 + 22 * max(n, 4)),
                               margin=dict(l=10, r=10, t=60 if title else 20, b=30), plot_bgcolor="white",
                               yaxis=dict(tickmode="array", tickvals=list(range(n)), ticktext=labels,
                                          autorange="reversed", tickfont=dict(size=12), automargin=True),
                               xaxis=dict(title=dict(text="logit (promotes > 0 > suppresses)", font=dict(size=12)),
                                          zeroline=True, zerolinecolor="#888")))
    return fit_margins(fig)
