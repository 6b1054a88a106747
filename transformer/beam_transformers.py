"""Beam search with Hugging Face transformers' scoring rules, so a Marian / OPUS-MT checkpoint run here gives
exactly what ``MarianMTModel.generate(num_beams=K, length_penalty=alpha)`` gives.

How the two length penalties map. Our default (``transformer.beam_search``, fairseq's rules) divides a finished
hypothesis' log-probability by the GNMT penalty ``((5 + |Y|) / 6) ** alpha``; transformers divides it by
``|Y| ** alpha``, |Y| the generated tokens including ``</s>`` (the decoder start token not counted). The two agree
only at ``alpha = 0``; no alpha of one equals the other at every length (their ratio changes with |Y|). The
searches also stop differently:

- fairseq: a sentence stops once it has K finished hypotheses, or once no live beam can beat its best finished one
  (an exact bound: the live score divided by the largest penalty it could still reach).
- transformers (``early_stopping=False``, Marian's default): a sentence stops once it has K finished hypotheses
  *and* its best live beam, normalised at the *current* length, no longer beats the worst of them (a heuristic);
  at the length limit the K best candidates of that step become finished too, and the best of all is returned.

This module implements the second, step for step as ``GenerationMixin._beam_search`` (transformers 4.5x-5.x)
does; the tests check it against ``generate()``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .decoding import Hypotheses, _force, _inference, _step, output_limits
from .model import Transformer, padding_mask

_NEG = -1.0e9  # transformers' additive "never" (kept so candidates order exactly as there)


@_inference
def beam_search_transformers(model: Transformer, src: Tensor, beam_size: int = 4, alpha: float = 1.0,
                             max_len_a: float = 1.5, max_len_b: int = 10,
                             head_mask: dict[str, Tensor] | None = None, forced: Tensor | None = None) -> Hypotheses:
    """Beam search scored as transformers scores it. ``src (B, S)`` -> best ``Hypotheses`` (scores: log-probability
    divided by ``|Y| ** alpha``). Each sentence's own length limit plays transformers' ``max_new_tokens``.
    ``forced (B, P)``: the first P output tokens, as ``generate(forced_bos_token_id=...)`` imposes one (counted in
    |Y|, log-probability 0)."""
    cfg = model.config
    dev = src.device
    b, k = src.size(0), beam_size
    src_mask = padding_mask(src, cfg.pad_id)
    memory = model.encode(src, src_mask, head_mask=(head_mask or {}).get("encoder")).last_hidden_state
    memory = memory.repeat_interleave(k, dim=0)  # (B, S, D) -> (B*K, S, D)
    src_mask = src_mask.repeat_interleave(k, dim=0)  # (B*K, 1, 1, S)
    limits = output_limits(model, src, max_len_a, max_len_b)  # (B,)
    max_steps = int(limits.max())

    tokens = torch.full((b * k, 1), cfg.bos_id, dtype=torch.long, device=dev)
    running = torch.zeros(b, k, device=dev)
    running[:, 1:] = _NEG  # the K beams start identical: only the first one expands
    fin_tokens = torch.full((b, k, max_steps), cfg.pad_id, dtype=torch.long, device=dev)
    fin_scores = torch.full((b, k), _NEG, device=dev)
    fin_flags = torch.zeros(b, k, dtype=torch.bool, device=dev)
    improvable = torch.ones(b, dtype=torch.bool, device=dev)  # transformers' is_early_stop_heuristic_unsatisfied
    cache = model.new_cache()
    batch_offset = (torch.arange(b, device=dev) * k)[:, None]  # (B, 1)
    in_top_k = torch.arange(2 * k, device=dev)[None, :] < k

    forced = forced.repeat_interleave(k, dim=0) if forced is not None else None  # (B, P) -> (B*K, P)
    work: dict[str, Tensor] = {}
    for step in range(1, max_steps + 1):
        logp = _force(_step(model, tokens, memory, src_mask, cache, head_mask, work), forced, step)  # (B*K, V)
        vocab = logp.size(-1)
        cand = logp.add_(running.view(b * k, 1)).view(b, k * vocab)  # (B*K, V) -> (B, K*V), in place
        top_scores, top_ids = cand.topk(2 * k, dim=-1)  # (B, 2K)
        top_beam, top_tok = top_ids // vocab, top_ids % vocab
        hits = (top_tok == cfg.eos_id) | (step >= limits)[:, None]  # ended, or at the sentence's limit

        # sequences of the 2K candidates, without BOS: (B, 2K, max_steps)
        prefix = tokens.view(b, k, -1)[:, :, 1:]  # (B*K, t) -> (B, K, t-1)
        cand_seqs = torch.full((b, 2 * k, max_steps), cfg.pad_id, dtype=torch.long, device=dev)
        cand_seqs[:, :, : step - 1] = prefix.gather(1, top_beam[:, :, None].expand(-1, -1, step - 1))
        cand_seqs[:, :, step - 1] = top_tok

        # live beams: the K best candidates that did not hit a stop
        order = (top_scores + hits.float() * _NEG).topk(k, dim=1).indices  # (B, K)
        running = (top_scores + hits.float() * _NEG).gather(1, order)

        # finished: the candidates among the K best that hit a stop, normalised, merged into the K best so far
        normed = top_scores / (step ** alpha)
        normed = normed + (~improvable).float()[:, None] * _NEG + (~(hits & in_top_k)).float() * _NEG
        merged_scores = torch.cat([fin_scores, normed], dim=1)  # (B, 3K)
        keep = merged_scores.topk(k, dim=1).indices
        fin_scores = merged_scores.gather(1, keep)
        fin_flags = torch.cat([fin_flags, hits & in_top_k], dim=1).gather(1, keep)
        fin_tokens = torch.cat([fin_tokens, cand_seqs], dim=1).gather(1, keep[:, :, None].expand(-1, -1, max_steps))

        src_beam = (top_beam.gather(1, order) + batch_offset).view(-1)  # (B*K,) rows to carry on
        tokens = torch.cat([tokens.index_select(0, src_beam), top_tok.gather(1, order).view(-1, 1)], dim=1)
        cache.reorder(src_beam)  # the cached keys/values follow their beams

        # transformers' heuristic: can the best live beam, at the current length, still beat a finished one?
        worst = torch.where(fin_flags, fin_scores.min(dim=1, keepdim=True).values, torch.full_like(fin_scores, _NEG))
        improvable &= ((running[:, :1] / (step ** alpha)) > worst).any(dim=1)
        if not (improvable & (step < limits)).any():
            break

    lengths = (fin_tokens[:, 0] != cfg.pad_id).sum(dim=1)
    return Hypotheses(fin_tokens[:, 0, : max(int(lengths.max()), 1)], fin_scores[:, 0])
