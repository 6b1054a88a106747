"""The information-flow graph of a translation ("Information flow routes", Ferrando and Voita, 2024), for the
encoder, the decoder and the cross-attention between them.

Every residual block (attention or feed-forward) writes ``y_i = x_i + f(x_i, ...)`` (post-norm: through the
block's LayerNorm). Its output at each query is split into terms: for attention one per head and key,
``alpha^h_ij v^h_j W_O^h``, and the residual ``x_i``; for the feed-forward block its output and the residual. Each
term's importance is its proximity to the block's output, ``max(0, ||y_i||_1 - ||y_i - term||_1)``, normalised so
that a query's terms sum to 1 (ALTI's measure, as ``contributions`` computes it per key: the LayerNorm of a
post-norm block is linear given the real deviation of the whole sum, so each term goes through it; the same
:func:`~.alti.block_terms`, per head). The llm-transparency-tool measures the feed-forward block the same way
(``get_mlp_contributions``: the block's output and the residual against the stream after the block).

Nodes are the stream at each position after each block; an edge is one term, from the node its term reads (the
key's node for a head, the same position's node before the block for the residual and the feed-forward block) to
the node it writes. :meth:`Flow.graph` follows the edges at or above a threshold backwards from one output step.
Everything comes from one returned forward pass (``return_internals=True``): no hook, the model unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ..network.kinds import KINDS
from ..network.linear import linear
from ..network.model import FeedForward, Transformer
from .alti import DEFAULT_ALTI_BYTES, alti_rows, block_contributions, through_norm
from .methods import attention_module, full, internals, require_eval

SIDES = ("encoder", "decoder")
BLOCKS = {"encoder": ("encoder", "ffn"), "decoder": ("decoder", "cross", "ffn")}  # each layer's blocks, in order
EDGE_KINDS = (*KINDS, "ffn", "residual")


class Node(NamedTuple):
    """The stream of ``side`` at ``position`` after ``block`` (``"embed"``: the scaled embedding with its
    position, before layer 0, ``layer`` -1; else one of ``BLOCKS[side]`` of 0-based ``layer``)."""

    side: str
    layer: int
    block: str
    position: int


class Edge(NamedTuple):
    """One term of ``target``'s block: ``kind`` one of ``KINDS`` (then ``head`` its 0-based head), ``"ffn"`` or
    ``"residual"`` (``head`` None); ``layer`` the block's layer; ``weight`` its importance (a node's incoming
    weights sum to 1)."""

    source: Node
    target: Node
    kind: str
    layer: int
    head: int | None
    weight: float


@dataclass
class FlowGraph:
    """The subgraph reached backwards from output ``step`` through edges of weight at or above ``threshold``
    (and above 0). ``nodes`` sorted; ``edges`` from the output backwards."""

    step: int
    threshold: float
    nodes: list[Node]
    edges: list[Edge]

    def heads(self) -> set[tuple[str, int, int]]:
        """The heads with an edge in the graph, as ``(kind, layer, head)``."""
        return {(e.kind, e.layer, e.head) for e in self.edges if e.head is not None}


def stages(side: str, n_layers: int) -> list[tuple[int, str]]:
    """``(layer, block)`` of each of ``side``'s streams in order, the embedding first."""
    return [(-1, "embed")] + [(layer, block) for layer in range(n_layers) for block in BLOCKS[side]]


@dataclass
class Flow:
    """Importances of every term of one teacher-forced pass; for each query, a block's terms sum to 1.

    ``heads[kind][layer]`` ``(B, n_heads, Q, K)``: each head and key; ``residual[kind][layer]`` ``(B, Q)``: the
    residual of that attention block; ``ffn[side][layer]`` ``(B, Q)``: the feed-forward block (its residual is
    ``1 - ffn``). ``kind`` in ``KINDS``, ``side`` in ``SIDES``, layers from 0."""

    heads: dict[str, tuple[Tensor, ...]]
    residual: dict[str, tuple[Tensor, ...]]
    ffn: dict[str, tuple[Tensor, ...]]

    def n_layers(self, side: str) -> int:
        return len(self.ffn[side])

    def previous(self, node: Node) -> Node:
        """The stream at the same position before ``node``'s block."""
        order = stages(node.side, self.n_layers(node.side))
        layer, block = order[order.index((node.layer, node.block)) - 1]
        return Node(node.side, layer, block, node.position)

    def incoming(self, node: Node, batch: int = 0, threshold: float | None = None) -> list[Edge]:
        """The terms of ``node``'s block at its position (none for an embedding): every one, or with a
        ``threshold`` those of weight at or above it and above 0 (picked from the weights before any edge is made:
        a head's keys are most of a graph's terms)."""
        if node.block == "embed":
            return []
        before, q, layer = self.previous(node), node.position, node.layer
        kept = (lambda w: True) if threshold is None else (lambda w: w > 0 and w >= threshold)  # noqa: E731
        if node.block == "ffn":
            w = float(self.ffn[node.side][layer][batch, q])
            edges = [Edge(before, node, "ffn", layer, None, w), Edge(before, node, "residual", layer, None, 1.0 - w)]
            return [e for e in edges if kept(e.weight)]
        kind = node.block
        rows = torch.as_tensor(self.heads[kind][layer][batch, :, q]).double()  # (H, K), float64 as .tolist() gives
        if kind == "cross":
            n_enc = self.n_layers("encoder")
            source = Node("encoder", n_enc - 1, "ffn", 0) if n_enc else Node("encoder", -1, "embed", 0)
        else:
            source = before
        if threshold is None:
            heads, keys = (i.reshape(-1) for i in torch.meshgrid(torch.arange(rows.shape[0]),
                                                                  torch.arange(rows.shape[1]), indexing="ij"))
        else:
            heads, keys = torch.nonzero((rows > 0) & (rows >= threshold), as_tuple=True)
        edges = [Edge(source._replace(position=j), node, kind, layer, h, w)
                 for h, j, w in zip(heads.tolist(), keys.tolist(), rows[heads, keys].tolist())]
        residual = Edge(before, node, "residual", layer, None, float(self.residual[kind][layer][batch, q]))
        return edges + [residual] * kept(residual.weight)

    def graph(self, step: int, threshold: float, batch: int = 0) -> FlowGraph:
        """The subgraph reached backwards from the last decoder stream at output ``step`` (the one that predicts
        the piece of step ``step``) through edges with ``weight >= threshold`` and ``weight > 0``."""
        n_dec = self.n_layers("decoder")
        last = stages("decoder", n_dec)[-1]
        root = Node("decoder", last[0], last[1], step)
        seen, todo, edges = {root}, [root], []
        while todo:
            node = todo.pop()
            for edge in self.incoming(node, batch, threshold):
                edges.append(edge)
                if edge.source not in seen:
                    seen.add(edge.source)
                    todo.append(edge.source)
        return FlowGraph(step, threshold, sorted(seen), edges)


def ffn_rows(ffn: FeedForward, stream: Tensor, norm: torch.nn.LayerNorm, norm_first: bool) -> Tensor:
    """The feed-forward block's importance at each position, ``(B, Q)``, from the stream before it ``(B, Q, D)``:
    two terms, the block's output ``ffn(x)`` (its bias included) and the residual ``x``, against the block's output
    (post-norm: both through ``norm`` as :func:`~.alti.through_norm` does)."""
    h = ffn(norm(stream) if norm_first else stream)  # (B, Q, D)
    terms, y = through_norm(torch.stack([h, stream], dim=2), None, None if norm_first else norm)  # (B, Q, 2, D)
    own = torch.ones(stream.size(1), dtype=torch.long, device=stream.device)  # the residual is the last term
    return alti_rows(terms, y, own)[..., 0]


def after_attention(model: Transformer, kind: str, layer: int, weights: Tensor, inputs,
                    norm: torch.nn.LayerNorm) -> Tensor:
    """The stream after an attention block ``(B, Q, D)``, from the weights and inputs the pass returned."""
    module = attention_module(model, kind, layer)
    _, v = module.project_kv(inputs.key_value)  # (B, H, K, d)
    z = inputs.residual + module.merge_heads(weights.to(v.dtype) @ v)  # (B, Q, D), as the model computes it
    return z if model.config.norm_first else norm(z)


@torch.no_grad()
def flow(model: Transformer, src: Tensor, tgt: Tensor, max_bytes: int | None = None) -> Flow:
    """The information flow of one teacher-forced pass (``src (B, S)``, ``tgt (B, T)`` the decoder input): the
    importance of each head and key, each residual and each feed-forward block for every query (see the module's
    docstring). ``max_bytes`` (default ``DEFAULT_ALTI_BYTES``) bounds the per-term vectors held at once (queries in
    chunks; the result does not depend on it). The model must be in eval mode; it is neither changed nor hooked."""
    require_eval(model, "flow")
    budget = DEFAULT_ALTI_BYTES if max_bytes is None else max_bytes
    out = internals(model, src, tgt)
    pre = model.config.norm_first
    weights = out.attentions()
    heads: dict[str, list[Tensor]] = {k: [] for k in KINDS}
    residual: dict[str, list[Tensor]] = {k: [] for k in KINDS}
    ffn: dict[str, list[Tensor]] = {s: [] for s in SIDES}

    def attention(kind: str, i: int, norm: torch.nn.LayerNorm) -> Tensor:
        inputs, w = out.attention_inputs[kind][i], weights[kind][i]
        b, h, q, k = w.shape
        rows = block_contributions(attention_module(model, kind, i), w, inputs.key_value, inputs.residual,
                                   None if pre else norm, kind == "cross", budget, per_head=True)  # (B, Q, H*K+1)
        heads[kind].append(rows[..., :-1].reshape(b, q, h, k).transpose(1, 2))  # (B, Q, H, K) -> (B, H, Q, K)
        residual[kind].append(rows[..., -1])
        return after_attention(model, kind, i, w, inputs, norm)

    for i, layer in enumerate(model.encoder_layers):
        stream = attention("encoder", i, layer.norm1)
        ffn["encoder"].append(ffn_rows(layer.ffn, stream, layer.norm2, pre))
    for i, layer in enumerate(model.decoder_layers):
        attention("decoder", i, layer.norm1)
        stream = attention("cross", i, layer.norm2)
        ffn["decoder"].append(ffn_rows(layer.ffn, stream, layer.norm3, pre))
    return Flow({k: tuple(map(full, vs)) for k, vs in heads.items()},  # a bfloat16 model's: in float32
                {k: tuple(map(full, vs)) for k, vs in residual.items()},
                {s: tuple(map(full, vs)) for s, vs in ffn.items()})


def final_norm(model: Transformer) -> torch.nn.LayerNorm | None:
    """The last LayerNorm before the output projection: the decoder's final norm (pre-norm), else the last
    decoder layer's feed-forward norm (post-norm)."""
    if model.decoder_norm is not None:
        return model.decoder_norm
    return model.decoder_layers[-1].norm3 if len(model.decoder_layers) else None


@torch.no_grad()
def head_logits(model: Transformer, vector: Tensor) -> Tensor:
    """What a head's output ``vector (..., D)`` says of the next piece, logit-lens style: through the linear part
    of the final norm (centred, times its weight; its scaling by the whole stream's deviation only scales every
    logit alike) and the output embedding (no bias): ``(..., V)``, high for the pieces it promotes, low for those it
    suppresses."""
    v = vector - vector.mean(dim=-1, keepdim=True)
    norm = final_norm(model)
    if norm is not None and norm.weight is not None:
        v = v * norm.weight
    weight = model.generator.weight  # (V, D), in the model's dtype (no float32 copy of a large vocabulary)
    return full(linear(v.to(weight.dtype), weight))  # (..., D) @ (D, V)


@torch.no_grad()
def head_output(model: Transformer, src: Tensor, tgt: Tensor, kind: str, layer: int, head: int, query: int,
                batch: int = 0) -> tuple[Tensor, Tensor]:
    """One head's attention row ``(K,)`` at ``query`` and its output there through its slice of W_O ``(D,)``
    (value bias included, output bias not), from one returned pass."""
    out = internals(model, src, tgt)
    module = attention_module(model, kind, layer)
    _, v = module.project_kv(out.attention_inputs[kind][layer].key_value)  # (B, H, K, d)
    row = out.attentions()[kind][layer][batch, head, query]  # (K,)
    d = module.d_head
    w_o = full(module.out_proj.weight[:, head * d:(head + 1) * d])  # (D, d); a bfloat16 model's in float32
    return row, w_o @ (row.to(w_o.dtype) @ full(v[batch, head]))
