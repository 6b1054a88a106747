"""The record of a beam search (``beam_search(..., record_tree=True)``): every hypothesis it expanded for one
sentence, with what became of it, as the app's Beam tree view draws it. :func:`record_step` and
:func:`record_limit` are called by the search's GNMT bookkeeping after each step and at the length limit."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class BeamNode:
    """One expanded hypothesis: ``token`` appended to ``parent`` (node ids; the root, BOS, is node 0 with parent
    -1). ``logprob``: cumulative log-probability; ``score``: ``logprob / lp(length)`` for finished ones, else
    None. ``status``: ``"kept"`` (a live beam of the next step), ``"pruned"``, ``"finished"`` (ended in EOS and
    entered the finished list) or ``"finished at the length limit"``."""

    id: int
    parent: int
    step: int
    token: int
    logprob: float
    status: str
    score: float | None = None


@dataclass
class BeamTree:
    """Every hypothesis a beam search expanded for one sentence (the top 2K candidates of each step), and the
    id of the node it returned (a leaf whose ``score`` is the returned score)."""

    nodes: list[BeamNode]
    best: int

    def path(self, node: int) -> list[int]:
        """Token ids from the root to ``node`` (BOS excluded)."""
        out = []
        while node > 0:
            out.append(self.nodes[node].token)
            node = self.nodes[node].parent
        return out[::-1]


def record_step(trees: list[list[BeamNode]], active: list[int], beam_node: list[list[int]],
                 fin_nodes: list[list[int]], step: int, top_beam: Tensor, top_tok: Tensor, top_scores: Tensor,
                 accept: Tensor, eos_scores: Tensor, keep: Tensor, order: Tensor, live: Tensor, done: Tensor,
                 k: int) -> tuple[list[list[int]], list[list[int]]]:
    """Add this step's 2K candidates of every unfinished sentence to its tree; returns the node ids of the new
    live beams and of the finished list (which ``keep`` reordered)."""
    beams, toks, scores = top_beam.tolist(), top_tok.tolist(), top_scores.tolist()
    accepted, eos, kept_rows, order_l = accept.tolist(), eos_scores.tolist(), keep.tolist(), order.tolist()
    live_l, done_l = live.tolist(), done.tolist()
    new_beams, new_fin = [], []
    for row, original in enumerate(active):
        nodes = trees[original]
        ids = []
        for c in range(2 * k):
            if done_l[row] or scores[row][c] == float("-inf"):
                ids.append(-1)
                continue
            status = "finished" if accepted[row][c] else "pruned"
            nodes.append(BeamNode(len(nodes), beam_node[row][beams[row][c]], step, toks[row][c], scores[row][c],
                                  status, eos[row][c] if accepted[row][c] else None))
            ids.append(len(nodes) - 1)
        candidates = fin_nodes[row] + ids  # the order of torch.cat([fin_scores, eos_scores])
        new_fin.append([candidates[i] for i in kept_rows[row]])
        next_beams = []
        for j in range(k):
            node = ids[order_l[row][j]]
            if node >= 0 and live_l[row][j] > float("-inf"):
                nodes[node].status = "kept"
            next_beams.append(node)
        new_beams.append(next_beams)
    return new_beams, new_fin


def record_limit(trees: list[list[BeamNode]], active: list[int], beam_node: list[list[int]],
                  fin_nodes: list[list[int]], rows: Tensor, best: Tensor, live_norm: Tensor) -> None:
    """Sentences at their length limit without an ending return their best live beam: mark it."""
    for row in rows.nonzero().squeeze(1).tolist():
        node = beam_node[row][int(best[row])]
        if node >= 0:
            entry = trees[active[row]][node]
            entry.status, entry.score = "finished at the length limit", float(live_norm[row, best[row]])
            fin_nodes[row][0] = node
