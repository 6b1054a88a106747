"""Greedy and beam search, batched, with incremental decoding through a key/value cache."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .kv_cache import KVCache
from .model import Transformer, padding_mask


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


@dataclass
class Hypotheses:
    """Decoded output ids ``(B, L)`` (no BOS; EOS kept where produced; padded with ``pad_id``)
    and their scores ``(B,)`` (sum of log-probabilities, divided by the length penalty); ``trees``: one
    :class:`BeamTree` per sentence when beam search was asked to record it."""

    tokens: Tensor
    scores: Tensor
    trees: list[BeamTree] | None = None


def _inference(search: Callable[..., Hypotheses]) -> Callable[..., Hypotheses]:
    """Run a search under ``torch.inference_mode`` (like ``no_grad``, and it also skips view and
    version-counter bookkeeping on every op: ~10% off a decoding step) and hand back ordinary tensors."""

    @functools.wraps(search)
    def run(*args, **kwargs) -> Hypotheses:
        with torch.inference_mode():
            hyp = search(*args, **kwargs)
        return Hypotheses(hyp.tokens.clone(), hyp.scores.clone(), hyp.trees)

    return run


def length_penalty(length: Tensor, alpha: float) -> Tensor:
    """GNMT length penalty ((5 + |Y|) / 6)^alpha (Wu et al., 2016), used by the paper with alpha 0.6."""
    return ((5.0 + length.float()) / 6.0) ** alpha


def max_output_length(model: Transformer, src_len: int | Tensor, max_len_a: float, max_len_b: int) -> int | Tensor:
    """The one output-length formula: at most ``floor(a * src_len + b)`` generated tokens, within
    ``[1, max_len - 1]``. ``src_len`` an int (returns an int) or a tensor of lengths (returns a long tensor)."""
    lengths = torch.as_tensor(src_len, dtype=torch.float64)
    limit = (max_len_a * lengths + max_len_b).floor().long().clamp(1, model.config.max_len - 1)
    return int(limit) if not isinstance(src_len, Tensor) else limit


def output_limits(model: Transformer, src: Tensor, max_len_a: float, max_len_b: int) -> Tensor:
    """Each sentence's own maximum output length ``(B,)``, from its unpadded length, so a sentence
    decodes the same alone as in a padded batch."""
    return max_output_length(model, (src != model.config.pad_id).sum(dim=1), max_len_a, max_len_b)


def _never(logp: Tensor, model: Transformer) -> Tensor:
    """Padding and BOS are never outputs (BOS is, when decoding starts from ``</s>`` as in M2M100 / NLLB)."""
    logp[:, model.config.pad_id] = float("-inf")
    if model.config.bos_id != model.config.eos_id:
        logp[:, model.config.bos_id] = float("-inf")
    return logp


def _force(logp: Tensor, forced: Tensor | None, step: int) -> Tensor:
    """Forced first tokens, as transformers' ``forced_bos_token_id``: at step ``s <= P`` the token ``forced[:, s-1]``
    gets log-probability 0 and every other token -inf. ``logp (N, V)``, ``forced (N, P)`` (one row per row)."""
    if forced is None or step > forced.size(1):
        return logp
    return logp.fill_(float("-inf")).scatter_(1, forced[:, step - 1: step], 0.0)


def _workspace(work: dict[str, Tensor], name: str, rows: int, cols: int, dtype: torch.dtype,
               device: torch.device) -> Tensor:
    """A ``(rows, cols)`` tensor kept in ``work`` across the steps of one search (rows only ever shrink)."""
    buf = work.get(name)
    if buf is None or buf.size(0) < rows or buf.size(1) != cols or buf.dtype != dtype or buf.device != device:
        buf = work[name] = torch.empty(rows, cols, dtype=dtype, device=device)
    return buf[:rows]


def _step(model: Transformer, tokens: Tensor, memory: Tensor, src_mask: Tensor, cache: KVCache | None,
          head_mask: dict[str, Tensor] | None, work: dict[str, Tensor] | None = None) -> Tensor:
    """Log-probabilities ``(N, V)`` of the next token after ``tokens (N, t)``: with a ``cache``, one
    ``Transformer.decode_step`` (head masks or not); without, the full forward over the whole prefix (the oracle).
    With ``work`` (a dict kept for one search) the logits and log-probabilities go into the same two tensors every
    step, and the result is overwritten by the next step."""
    head_mask = head_mask or {}
    if cache is None:  # recompute the whole prefix
        out = model.decode(tokens, memory, src_mask, self_head_mask=head_mask.get("decoder"),
                           cross_head_mask=head_mask.get("cross"))
        return _never(out.logits[:, -1].float().log_softmax(dim=-1), model)
    if work is None:
        logits = model.decode_step(tokens[:, -1:], memory, src_mask, cache, head_mask=head_mask)
        return _never(logits.float().log_softmax(dim=-1), model)
    n, vocab, dev = tokens.size(0), model.config.tgt_vocab_size, tokens.device
    logits = model.decode_step(tokens[:, -1:], memory, src_mask, cache, head_mask=head_mask,
                               out=_workspace(work, "logits", n, vocab, memory.dtype, dev))
    return _never(torch.log_softmax(logits.float(), -1, out=_workspace(work, "logp", n, vocab, torch.float32, dev)),
                  model)


@_inference
def greedy_decode(model: Transformer, src: Tensor, max_len_a: float = 1.5, max_len_b: int = 10,
                  use_cache: bool = True, head_mask: dict[str, Tensor] | None = None,
                  forced: Tensor | None = None) -> Hypotheses:
    """Pick the most probable token at every step. ``src (B, S)`` -> ``Hypotheses``. ``forced (B, P)``: the first P
    output tokens, imposed (e.g. a target-language code), with log-probability 0."""
    cfg = model.config
    src_mask = padding_mask(src, cfg.pad_id)
    memory = model.encode(src, src_mask, head_mask=(head_mask or {}).get("encoder")).last_hidden_state
    b = src.size(0)
    tokens = torch.full((b, 1), cfg.bos_id, dtype=torch.long, device=src.device)
    scores = torch.zeros(b, device=src.device)
    finished = torch.zeros(b, dtype=torch.bool, device=src.device)
    cache = model.new_cache() if use_cache else None
    limits = output_limits(model, src, max_len_a, max_len_b)  # (B,)
    work: dict[str, Tensor] = {}
    for step in range(1, int(limits.max()) + 1):
        logp = _force(_step(model, tokens, memory, src_mask, cache, head_mask, work), forced, step)  # (B, V)
        best_logp, best = logp.max(dim=-1)
        best = best.masked_fill(finished, cfg.pad_id)
        scores += best_logp.masked_fill(finished, 0.0)
        tokens = torch.cat([tokens, best[:, None]], dim=1)
        finished |= (best == cfg.eos_id) | (step >= limits)
        if finished.all():
            break
    return Hypotheses(tokens[:, 1:], scores)


@_inference
def beam_search(model: Transformer, src: Tensor, beam_size: int = 4, alpha: float = 0.6,
                max_len_a: float = 1.5, max_len_b: int = 10, use_cache: bool = True,
                head_mask: dict[str, Tensor] | None = None, record_tree: bool = False,
                forced: Tensor | None = None) -> Hypotheses:
    """Batched beam search with the GNMT length penalty. ``src (B, S)`` -> best ``Hypotheses``. ``forced (B, P)``:
    the first P output tokens, imposed with log-probability 0 (as in :func:`greedy_decode`).

    Finished hypotheses (ending in EOS) are scored ``logprob / lp(length)``; a sentence stops when
    it has K of them or no live beam can beat its best one (live scores only fall; lp grows to
    lp(max)). ``record_tree``: also return, per sentence, every expanded hypothesis (``Hypotheses.trees``),
    recorded during this one search.
    """
    cfg = model.config
    dev = src.device
    b, k = src.size(0), beam_size
    src_mask = padding_mask(src, cfg.pad_id)
    memory = model.encode(src, src_mask, head_mask=(head_mask or {}).get("encoder")).last_hidden_state
    # every sentence's encoder output repeated once per beam: (B, S, D) -> (B*K, S, D)
    memory = memory.repeat_interleave(k, dim=0)
    src_mask = src_mask.repeat_interleave(k, dim=0)  # (B*K, 1, 1, S)
    limits = output_limits(model, src, max_len_a, max_len_b)  # (B,) each sentence's own
    max_steps = int(limits.max())
    max_lp = length_penalty(limits, alpha) if alpha > 0 else torch.ones(b, device=dev)  # (B,)

    tokens = torch.full((b * k, 1), cfg.bos_id, dtype=torch.long, device=dev)
    live = torch.zeros(b, k, device=dev)
    live[:, 1:] = float("-inf")  # all beams start identical: keep only the first
    fin_tokens = torch.full((b, k, max_steps + 1), cfg.pad_id, dtype=torch.long, device=dev)
    fin_scores = torch.full((b, k), float("-inf"), device=dev)
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    cache = model.new_cache() if use_cache else None
    batch_offset = (torch.arange(b, device=dev) * k)[:, None]  # (B, 1)
    in_top_k = torch.arange(2 * k, device=dev)[None, :] < k
    # finished sentences leave the batch; their results wait here, by original position
    active = torch.arange(b, device=dev)  # original position of each sentence still in the batch
    best_tokens = torch.full((b, max_steps + 1), cfg.pad_id, dtype=torch.long, device=dev)
    best_scores = torch.full((b,), float("-inf"), device=dev)
    trees: list[list[BeamNode]] = [[BeamNode(0, -1, 0, cfg.bos_id, 0.0, "kept")] for _ in range(b)]
    beam_node = [[0] * k for _ in range(b)]  # node id of each live beam, by current batch row
    fin_nodes = [[-1] * k for _ in range(b)]  # node id of each finished entry
    best_nodes = [-1] * b

    forced = forced.repeat_interleave(k, dim=0) if forced is not None else None  # (B, P) -> (B*K, P)
    work: dict[str, Tensor] = {}
    for step in range(1, max_steps + 1):
        logp = _force(_step(model, tokens, memory, src_mask, cache, head_mask, work), forced, step)  # (B*K, V)
        vocab = logp.size(-1)
        cand = logp.add_(live.view(b * k, 1)).view(b, k * vocab)  # (B*K, V) -> (B, K*V), in place
        top_scores, top_ids = cand.topk(2 * k, dim=-1)  # (B, 2K)
        top_beam, top_tok = top_ids // vocab, top_ids % vocab
        is_eos = top_tok == cfg.eos_id
        # as in fairseq, an ending counts only when it ranks among the K best candidates
        # (so beam size 1 is exactly greedy search)
        accept = is_eos & in_top_k & ~done[:, None]

        # finished candidates: normalise and merge into the K best finished per sentence
        eos_scores = (top_scores / length_penalty(torch.tensor(step), alpha)).masked_fill(~accept, float("-inf"))
        prefix = tokens.view(b, k, -1)[:, :, 1:]  # (B*K, t) -> (B, K, t-1), without BOS
        eos_seqs = torch.full((b, 2 * k, max_steps + 1), cfg.pad_id, dtype=torch.long, device=dev)
        eos_seqs[:, :, : step - 1] = prefix.gather(1, top_beam[:, :, None].expand(-1, -1, step - 1))
        eos_seqs[:, :, step - 1] = cfg.eos_id
        all_scores = torch.cat([fin_scores, eos_scores], dim=1)  # (B, 3K)
        fin_scores, keep = all_scores.topk(k, dim=1)
        fin_tokens = torch.cat([fin_tokens, eos_seqs], dim=1).gather(1, keep[:, :, None].expand(-1, -1, max_steps + 1))

        # live beams: the K best candidates that did not end
        live_scores = top_scores.masked_fill(is_eos, float("-inf"))
        live, order = live_scores.topk(k, dim=1)  # (B, K)
        if record_tree:
            beam_node, fin_nodes = _record_step(trees, active.tolist(), beam_node, fin_nodes, step, top_beam, top_tok,
                                                top_scores, accept, eos_scores, keep, order, live, done, k)
        src_beam = (top_beam.gather(1, order) + batch_offset).view(-1)  # (B*K,) rows to carry on
        new_tok = top_tok.gather(1, order).view(-1, 1)  # (B*K, 1)
        tokens = torch.cat([tokens.index_select(0, src_beam), new_tok], dim=1)

        # stop a sentence when it has K endings, or when its best live beam, even at the best
        # length, cannot beat its best ending
        best_live_bound = live.max(dim=1).values / max_lp
        # a sentence at its own length limit without an ending takes its best live beam
        at_limit = (step >= limits) & ~done & (fin_scores[:, 0] == float("-inf"))
        if at_limit.any():
            live_norm = live / length_penalty(torch.tensor(step), alpha)
            best = live_norm.argmax(dim=1)
            rows = torch.arange(b, device=dev)
            seqs = tokens.view(b, k, -1)[rows, best, 1:]  # (B*K, t) -> (B, t-1) without BOS
            fin_tokens[at_limit, 0, : seqs.size(1)] = seqs[at_limit]
            fin_scores[at_limit, 0] = live_norm[rows, best][at_limit]
            if record_tree:
                _record_limit(trees, active.tolist(), beam_node, fin_nodes, at_limit, best, live_norm)
        done |= (fin_scores[:, -1] > float("-inf")) | (fin_scores[:, 0] >= best_live_bound) | (step >= limits)
        if done.all():
            break
        # stopped sentences with an ending leave the batch: no more work on their rows
        drop = done & (fin_scores[:, 0] > float("-inf"))
        cross_rows = None
        if drop.any():
            best_tokens[active[drop]] = fin_tokens[drop, 0]
            best_scores[active[drop]] = fin_scores[drop, 0]
            keep = (~drop).nonzero().squeeze(1)  # (B',) sentences that stay
            if record_tree:
                for row in drop.nonzero().squeeze(1).tolist():
                    best_nodes[int(active[row])] = fin_nodes[row][0]
                beam_node = [beam_node[r] for r in keep.tolist()]
                fin_nodes = [fin_nodes[r] for r in keep.tolist()]
            rows = cross_rows = (keep[:, None] * k + torch.arange(k, device=dev)).view(-1)  # (B'*K,) their rows
            active, live, done, fin_scores, fin_tokens, limits, max_lp = (
                t[keep] for t in (active, live, done, fin_scores, fin_tokens, limits, max_lp))
            tokens, memory, src_mask, src_beam = (t.index_select(0, rows) for t in (tokens, memory, src_mask, src_beam))
            forced = forced.index_select(0, rows) if forced is not None else None
            b = keep.numel()
            batch_offset = (torch.arange(b, device=dev) * k)[:, None]
        if cache is not None:  # the cached keys/values follow their beams (and leave with their sentences)
            cache.reorder(src_beam, cross_rows)

    # sentences with no finished hypothesis (hit max length): take the best live beam
    no_fin = fin_scores[:, 0] == float("-inf")
    if no_fin.any():
        live_norm = live / length_penalty(torch.tensor(tokens.size(1) - 1), alpha)
        best = live_norm.argmax(dim=1)
        seqs = tokens.view(b, k, -1)[torch.arange(b, device=dev), best, 1:]
        fin_tokens[no_fin, 0, : seqs.size(1)] = seqs[no_fin]
        fin_scores[no_fin, 0] = live_norm[torch.arange(b, device=dev), best][no_fin]
        if record_tree:
            _record_limit(trees, active.tolist(), beam_node, fin_nodes, no_fin, best, live_norm)
    best_tokens[active] = fin_tokens[:, 0]
    best_scores[active] = fin_scores[:, 0]
    if record_tree:
        for row, original in enumerate(active.tolist()):
            best_nodes[original] = fin_nodes[row][0]
    lengths = (best_tokens != cfg.pad_id).sum(dim=1)
    return Hypotheses(best_tokens[:, : max(int(lengths.max()), 1)], best_scores,
                      [BeamTree(nodes, best) for nodes, best in zip(trees, best_nodes)] if record_tree else None)


def _record_step(trees: list[list[BeamNode]], active: list[int], beam_node: list[list[int]],
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


def _record_limit(trees: list[list[BeamNode]], active: list[int], beam_node: list[list[int]],
                  fin_nodes: list[list[int]], rows: Tensor, best: Tensor, live_norm: Tensor) -> None:
    """Sentences at their length limit without an ending return their best live beam: mark it."""
    for row in rows.nonzero().squeeze(1).tolist():
        node = beam_node[row][int(best[row])]
        if node >= 0:
            entry = trees[active[row]][node]
            entry.status, entry.score = "finished at the length limit", float(live_norm[row, best[row]])
            fin_nodes[row][0] = node
