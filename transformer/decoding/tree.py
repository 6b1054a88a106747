"""The record of a beam search (``beam_search(..., record_tree=True)``): every hypothesis it expanded for one
sentence, with what became of it, as the app's Beam tree view draws it. The search's GNMT bookkeeping fills a
:class:`TreeRecorder` after each step, at the length limit and as sentences leave the batch."""

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


class TreeRecorder:
    """The record of one GNMT beam search as it runs, one tree per sentence. Its rows are the sentences still in the
    batch (``active``: their original positions); ``beam_node`` / ``fin_nodes``: the node id of each row's live beams
    and finished entries. :class:`NoTree` is the same interface recording nothing, so the search has one path."""

    def __init__(self, sentences: int, k: int, bos_id: int) -> None:
        self.k = k
        self.trees = [[BeamNode(0, -1, 0, bos_id, 0.0, "kept")] for _ in range(sentences)]
        self.beam_node = [[0] * k for _ in range(sentences)]  # node id of each live beam, by current batch row
        self.fin_nodes = [[-1] * k for _ in range(sentences)]  # node id of each finished entry
        self.best_nodes = [-1] * sentences  # by original position: the node each sentence returned

    def step(self, active: Tensor, step: int, top: tuple[Tensor, Tensor, Tensor], accept: Tensor,
             eos_scores: Tensor, keep: Tensor, order: Tensor, live: Tensor, done: Tensor) -> None:
        """Add this step's 2K candidates (``top``: their scores, the beams they extend and their tokens, ``(B, 2K)``
        each) of every unfinished sentence to its tree: ``accept``-ed ones finished with ``eos_scores``, the rest
        pruned unless ``order`` carries them on as live beams (``live``); ``keep`` reorders the finished lists."""
        top_scores, top_beam, top_tok = top
        beams, toks, scores = top_beam.tolist(), top_tok.tolist(), top_scores.tolist()
        accepted, eos, kept_rows, order_l = accept.tolist(), eos_scores.tolist(), keep.tolist(), order.tolist()
        live_l, done_l = live.tolist(), done.tolist()
        new_beams, new_fin = [], []
        for row, original in enumerate(active.tolist()):
            nodes = self.trees[original]
            ids = []
            for c in range(2 * self.k):
                if done_l[row] or scores[row][c] == float("-inf"):
                    ids.append(-1)
                    continue
                status = "finished" if accepted[row][c] else "pruned"
                nodes.append(BeamNode(len(nodes), self.beam_node[row][beams[row][c]], step, toks[row][c],
                                      scores[row][c], status, eos[row][c] if accepted[row][c] else None))
                ids.append(len(nodes) - 1)
            candidates = self.fin_nodes[row] + ids  # the order of torch.cat([fin_scores, eos_scores])
            new_fin.append([candidates[i] for i in kept_rows[row]])
            next_beams = []
            for j in range(self.k):
                node = ids[order_l[row][j]]
                if node >= 0 and live_l[row][j] > float("-inf"):
                    nodes[node].status = "kept"
                next_beams.append(node)
            new_beams.append(next_beams)
        self.beam_node, self.fin_nodes = new_beams, new_fin

    def limit(self, active: Tensor, rows: Tensor, best: Tensor, live_norm: Tensor) -> None:
        """Sentences (``rows``) at their length limit without an ending return their best live beam: mark it."""
        for row in rows.nonzero().squeeze(1).tolist():
            node = self.beam_node[row][int(best[row])]
            if node >= 0:
                entry = self.trees[int(active[row])][node]
                entry.status, entry.score = "finished at the length limit", float(live_norm[row, best[row]])
                self.fin_nodes[row][0] = node

    def leave(self, active: Tensor, drop: Tensor, keep: Tensor) -> None:
        """Sentences ``drop`` leave the batch with their best finished node; the rows ``keep`` stay."""
        for row in drop.nonzero().squeeze(1).tolist():
            self.best_nodes[int(active[row])] = self.fin_nodes[row][0]
        self.beam_node = [self.beam_node[r] for r in keep.tolist()]
        self.fin_nodes = [self.fin_nodes[r] for r in keep.tolist()]

    def result(self, active: Tensor) -> list[BeamTree]:
        """Every sentence's tree, once the search ends with the sentences ``active`` still in the batch."""
        for row, original in enumerate(active.tolist()):
            self.best_nodes[original] = self.fin_nodes[row][0]
        return [BeamTree(nodes, best) for nodes, best in zip(self.trees, self.best_nodes)]


class NoTree:
    """:class:`TreeRecorder`'s interface, recording nothing (a search without ``record_tree``)."""

    def step(self, *args: object) -> None:
        pass

    def limit(self, *args: object) -> None:
        pass

    def leave(self, *args: object) -> None:
        pass

    def result(self, active: Tensor) -> None:
        return None
