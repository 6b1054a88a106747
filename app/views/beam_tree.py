"""Beam tree: every hypothesis beam search expanded for this sentence, the chosen path highlighted."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from ..drawing import figures, layout
from ..page import heatmaps, plots
from ..page.state import ViewContext

# a long search: the output steps drawn (steps=1-25 at first: a label per node stays readable on a laptop)
STEPS = heatmaps.span_param("steps", "beam_tree_swin", size=25)
PARAMS = (STEPS,)

NODE_COLOURS = {"kept": "#3182bd", "pruned": "#bbbbbb", "finished": "#2e7d32",
                "finished at the length limit": "#8c6d31"}


def tree_figure(tree, pieces, steps: tuple[int, int] | None = None) -> go.Figure:
    """Nodes by step (x) and by cumulative log-probability order within the step (y); edges to parents; the
    returned hypothesis in red. ``steps``: draw only the nodes of steps ``first <= step <= last`` (and the edges
    into them)."""
    first, last = steps or (0, max(n.step for n in tree.nodes))
    shown = [n for n in tree.nodes if first <= n.step <= last]
    nodes = tree.nodes
    best_path = set()
    node = tree.best
    while node >= 0:
        best_path.add(node)
        node = nodes[node].parent
    by_step: dict[int, list] = {}
    for n in nodes:
        by_step.setdefault(n.step, []).append(n)
    y = {}
    for group in by_step.values():
        for rank, n in enumerate(sorted(group, key=lambda n: -n.logprob)):
            y[n.id] = rank
    fig = go.Figure()
    ex, ey, bx, by = [], [], [], []
    for n in shown:
        if n.parent < 0 or nodes[n.parent].step < first:
            continue
        xs, ys = (ex, ey) if not (n.id in best_path and n.parent in best_path) else (bx, by)
        xs += [nodes[n.parent].step, n.step, None]
        ys += [y[n.parent], y[n.id], None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#cccccc", width=1), hoverinfo="skip",
                             showlegend=False))
    fig.add_trace(go.Scatter(x=bx, y=by, mode="lines", line=dict(color="#d62728", width=3), hoverinfo="skip",
                             name="returned translation"))
    for status, colour in NODE_COLOURS.items():
        group = [n for n in shown if n.status == status]
        if not group:
            continue
        fig.add_trace(go.Scatter(
            x=[n.step for n in group], y=[y[n.id] for n in group], mode="markers+text", name=status,
            text=[figures.escape(pieces[n.id]) for n in group], textfont=dict(size=10),
            # above the node on even steps, below on odd ones: two neighbouring steps' labels never meet
            textposition=["top center" if n.step % 2 == 0 else "bottom center" for n in group],
            marker=dict(color=colour, size=9, line=dict(color="#d62728", width=[2 if n.id in best_path else 0
                                                                                  for n in group])),
            customdata=[[figures.escape(pieces[n.id]), n.logprob, "" if n.score is None else f"{n.score:.3f}"]
                        for n in group],
            hovertemplate="%{customdata[0]}<br>log-prob %{customdata[1]:.3f}<br>score %{customdata[2]}"
                          "<extra>" + status + "</extra>"))
    deepest = max((y[n.id] for n in shown), default=0)
    longest = max((layout.text_px(figures.escape(pieces[n.id]), 10) for n in shown), default=0.0)
    width = (last - first + 1) * (longest / 2 + 2 * layout.LABEL_GAP) + 120  # every other step's labels side by side
    fig.update_layout(meta={"min_width": int(width)},  # app.drawing.layout.min_width: its labels readable
                      height=520, margin=dict(l=10, r=10, t=64, b=10), font=layout.FONT, plot_bgcolor="white",
                      # ranges of its own (each step's labels within half a step; a label over the first rank or under
                      # the last within 0.6 of a rank), so that a phone's frozen rank labels fall on the same ranks
                      # (app.drawing.row_labels)
                      xaxis=dict(title=dict(text="output step"), dtick=1, range=[first - 0.5, last + 0.5]),
                      title=dict(text="Beam search tree", x=0),
                      yaxis=dict(title=dict(text="rank within the step (by log-probability)"),
                                 range=[deepest + 0.6, -0.6]),
                      # the legend on a line of its own under the title, from the plot's left edge: a wide chart
                      # scrolls on a phone, and a legend further right started beyond its screen
                      legend=dict(orientation="h", x=0.0, xanchor="left", y=1.0, yanchor="bottom"))
    return layout.fit_margins(fig)


def render(ctx: ViewContext) -> None:
    """The tree of the sentence's beam search."""
    result = ctx.result
    if result.settings.beam_size <= 1:
        st.info("Greedy search keeps one hypothesis: choose Beam search in the sidebar to see a tree.",
                icon=":material/account_tree:")
        return
    st.caption(f"Every hypothesis beam search (beam {result.settings.beam_size}) looked at: at each step the "
               f"{2 * result.settings.beam_size} best extensions of the live beams; blue = kept as a live beam, grey "
               "= pruned, green = ended with </s> and entered the finished list; the red path is the translation "
               "returned (best score = log-probability / length penalty). Hover a node for its numbers.")
    if ctx.tr.scoring != "gnmt":
        st.caption("This model's translations use transformers' beam-search rules (length penalty |Y|^α, the "
                   "search stops by its own heuristic); the tree is recorded by the same beam search with GNMT's "
                   "length penalty ((5 + |Y|) / 6)^α, so its red path can end on a different hypothesis than the "
                   "translation above.")
    tree = ctx.model.beyond("beam_tree", result)
    pieces = ctx.tr.tokenizer.pieces([n.token for n in tree.nodes])
    n_steps = max(n.step for n in tree.nodes)  # the start node is step 0, the first output step 1
    s0, s1 = heatmaps.span_slider(st, "Output steps", n_steps, STEPS)  # a long search: a window of its steps
    plots.chart(tree_figure(tree, pieces, (s0 + 1 if s0 else 0, s1)), "beam-tree", "beam_tree_chart")
    same = "the translation's score above" if ctx.tr.scoring == "gnmt" else "under GNMT's length penalty"
    st.caption(f"{len(tree.nodes) - 1} hypotheses expanded; the returned one scores "
               f"{tree.nodes[tree.best].score:.3f} ({same}).")
