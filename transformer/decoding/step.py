"""One step of a search, the next token's log-probabilities, shared by greedy and beam search
(:mod:`transformer.decoding.search`): through the model's key/value cache (``Transformer.decode_step``) or, as the
oracle, the full forward over the whole prefix; padding and BOS never, forced first tokens imposed; and for a large
batch on a CPU, the best pieces read a block of the vocabulary at a time (:func:`best_pieces`)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..network import projection
from ..network.kv_cache import KVCache
from ..network.model import Transformer


def never_ids(model: Transformer) -> list[int]:
    """The pieces that are never outputs: padding and BOS (BOS is, when decoding starts from ``</s>`` as in M2M100 /
    NLLB)."""
    cfg = model.config
    return [cfg.pad_id] + ([cfg.bos_id] if cfg.bos_id != cfg.eos_id else [])


def never(logp: Tensor, model: Transformer) -> Tensor:
    """``logp (N, V)`` with :func:`never_ids` at -inf, in place."""
    for t in never_ids(model):
        logp[:, t] = float("-inf")
    return logp


def force(logp: Tensor, forced: Tensor | None, step: int) -> Tensor:
    """Forced first tokens, as transformers' ``forced_bos_token_id``: at step ``s <= P`` the token ``forced[:, s-1]``
    gets log-probability 0 and every other token -inf. ``logp (N, V)``, ``forced (N, P)`` (one row per row)."""
    if forced is None or step > forced.size(1):
        return logp
    return logp.fill_(float("-inf")).scatter_(1, forced[:, step - 1: step], 0.0)


def workspace(work: dict[str, Tensor], name: str, rows: int, cols: int, dtype: torch.dtype,
              device: torch.device) -> Tensor:
    """A ``(rows, cols)`` tensor kept in ``work`` across the steps of one search (rows only ever shrink)."""
    buf = work.get(name)
    if buf is None or buf.size(0) < rows or buf.size(1) != cols or buf.dtype != dtype or buf.device != device:
        buf = work[name] = torch.empty(rows, cols, dtype=dtype, device=device)
    return buf[:rows]


def next_logp(model: Transformer, tokens: Tensor, memory: Tensor, src_mask: Tensor, cache: KVCache | None,
              head_mask: dict[str, Tensor] | None, work: dict[str, Tensor] | None = None,
              attentions: list[tuple[tuple[Tensor, ...], tuple[Tensor, ...]]] | None = None) -> Tensor:
    """Log-probabilities ``(N, V)`` of the next token after ``tokens (N, t)``: with a ``cache``, one
    ``Transformer.decode_step`` (head masks or not); without, the full forward over the whole prefix (the oracle).
    With ``work`` (a dict kept for one search) the logits and log-probabilities go into the same two tensors every
    step, and the result is overwritten by the next step. With ``attentions`` (a search's list; a cache only), the
    step's self- and cross-attention weights, one ``(N, H, 1, .)`` tensor a layer each, are appended to it."""
    head_mask = head_mask or {}
    if cache is None:  # recompute the whole prefix
        out = model.decode(tokens, memory, src_mask, self_head_mask=head_mask.get("decoder"),
                           cross_head_mask=head_mask.get("cross"))
        return never(out.logits[:, -1].float().log_softmax(dim=-1), model)
    n, vocab, dev = tokens.size(0), model.config.tgt_vocab_size, tokens.device
    out = None if work is None else workspace(work, "logits", n, vocab, memory.dtype, dev)
    logits = model.decode_step(tokens[:, -1:], memory, src_mask, cache, head_mask=head_mask, out=out,
                               need_weights=attentions is not None)
    if attentions is not None:
        logits, *weights = logits
        attentions.append(tuple(weights))
    if work is None:
        return never(logits.float().log_softmax(dim=-1), model)
    return never(torch.log_softmax(logits.float(), -1, out=workspace(work, "logp", n, vocab, torch.float32, dev)),
                 model)


BLOCKS_MIN_BYTES = 48 << 20  # a step's float32 logits from this size on are read a block at a time (below it the
# whole log-softmax measured as fast: docs/benchmarks.md)


def by_blocks(model: Transformer, cache: KVCache | None, head_mask: dict[str, Tensor] | None,
              forced: Tensor | None, step: int, rows: int) -> bool:
    """Whether a step reads its logits a block of the vocabulary at a time (:func:`best_pieces`): incremental
    decoding on a CPU without head masks or forced tokens, over a vocabulary of more than one block, of rows whose
    logits would take :data:`BLOCKS_MIN_BYTES` or more (elsewhere the whole ``(N, V)`` log-softmax of
    :func:`next_logp`)."""
    return (cache is not None and not head_mask and (forced is None or step > forced.size(1))
            and model.generator.weight.device.type == "cpu" and model.config.tgt_vocab_size > projection.VOCAB_BLOCK
            and rows > 1 and 4 * rows * model.config.tgt_vocab_size >= BLOCKS_MIN_BYTES)


def best_pieces(model: Transformer, hidden: Tensor, k: int, work: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """The ``k`` most probable next pieces of each row from the last positions' outputs ``hidden (N, D)``: their
    log-probabilities ``(N, k)`` (float32) and ids ``(N, k)``, best first, padding and BOS never (as
    :func:`never`). The logits come a block of the vocabulary at a time (``OutputProjection.blocks``) and are read
    while in cache: each block's ``k`` best and its share of the normaliser, ``max + log(sum(exp(x - max)))`` joined
    over the blocks at the end (``log_softmax``'s numbers up to float rounding; tested). No ``(N, V)`` tensor."""
    banned = never_ids(model)
    maxes, sums, values, ids = [], [], [], []
    for start, logits in model.generator.blocks(hidden):  # (N, C) each
        logits = logits.float()  # a bfloat16 model's too: the normaliser in float32, as next_logp's log-softmax
        n, c = logits.shape
        groups = c // TOPK_GROUP if c % TOPK_GROUP == 0 and c // TOPK_GROUP > k + len(banned) else 0
        if groups:  # each group's best: the row's best, and where its k best can be
            group_max = logits.view(n, groups, TOPK_GROUP).amax(dim=-1)  # (N, C) -> (N, C/G, G) -> (N, C/G)
            top = group_max.amax(dim=-1, keepdim=True)  # (N, 1)
        else:
            top = logits.amax(dim=-1, keepdim=True)  # (N, 1)
        shifted = torch.sub(logits, top, out=workspace(work, "block", n, c, logits.dtype, logits.device))
        sums.append(shifted.exp_().sum(dim=-1))  # (N,)
        maxes.append(top[:, 0])
        for t in banned:
            if start <= t < start + c:
                logits[:, t - start] = float("-inf")
        if groups:
            v, i = _topk_by_groups(logits, group_max, k, k + len(banned))
        else:
            v, i = logits.topk(min(k, c), dim=-1)  # (N, k)
        values.append(v)
        ids.append(i + start)
    block_max = torch.stack(maxes, dim=1)  # (N, blocks)
    peak = block_max.amax(dim=1, keepdim=True)  # (N, 1)
    log_norm = peak + (torch.stack(sums, dim=1) * (block_max - peak).exp()).sum(dim=1, keepdim=True).log()  # (N, 1)
    best, pick = torch.cat(values, dim=1).topk(k, dim=-1)  # (N, blocks * k) -> (N, k)
    return best - log_norm, torch.cat(ids, dim=1).gather(1, pick)


TOPK_GROUP = 64  # best_pieces and top_k find the k best among the groups of this many values with the best maxima


def _topk_by_groups(logits: Tensor, group_max: Tensor, k: int, m: int) -> tuple[Tensor, Tensor]:
    """``logits.topk(k)`` of ``logits (N, C)`` read in groups of :data:`TOPK_GROUP` whose maxima ``group_max
    (N, C/G)`` were taken before up to ``m - k`` pieces were set to -inf: the k best lie in the ``m`` groups with the
    largest maxima (a piece beaten by k others' groups' maxima is beaten by k pieces, or by a piece now -inf), so
    only those ``m * G`` pieces are ranked."""
    n, g = logits.size(0), TOPK_GROUP
    pick = group_max.topk(m, dim=-1).indices  # (N, m)
    grouped = logits.view(n, -1, g)  # (N, C) -> (N, C/G, G)
    candidates = grouped.gather(1, pick[:, :, None].expand(-1, -1, g)).view(n, m * g)  # (N, m, G) -> (N, m*G)
    v, i = candidates.topk(k, dim=-1)  # (N, k)
    return v, pick.gather(1, i // g) * g + i % g


def top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``x.topk(k, dim=-1)`` of ``x (N, C)``, best first: on a CPU, where ``C`` is a multiple of :data:`TOPK_GROUP`
    with more than ``k`` groups, read by groups (:func:`_topk_by_groups`: each value is read once for its group's
    maximum and only the ``k`` best groups are ranked; a wide ``topk`` on a CPU ranks every value); elsewhere
    ``topk`` itself. Values equal; among equal values either may be kept."""
    n, c = x.shape
    if x.device.type != "cpu" or c % TOPK_GROUP or c // TOPK_GROUP <= k or not x.is_contiguous():
        return x.topk(k, dim=-1)
    group_max = x.view(n, c // TOPK_GROUP, TOPK_GROUP).amax(dim=-1)  # (N, C) -> (N, C/G, G) -> (N, C/G)
    return _topk_by_groups(x, group_max, k, k)
