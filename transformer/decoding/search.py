"""Greedy and beam search, batched, with incremental decoding through a key/value cache.

- :class:`~transformer.decoding.settings.DecodeSettings` (:mod:`transformer.decoding.settings`): how to decode, with
  the length penalty and the output-length rule.
- :func:`greedy_decode` and :func:`beam_search`; :func:`search` picks one for a :class:`DecodeSettings`.
- Beam search scores a finished hypothesis ``logprob / length_penalty(|Y|, alpha, scoring)`` under one of two
  rules (``SCORINGS``), passed to the one :func:`beam_search` as ``scoring``:

  - ``"gnmt"`` (fairseq's search): the GNMT penalty ``((5 + |Y|) / 6) ** alpha``; an ending counts when it ranks
    among the K best candidates; a sentence stops once it has K finished hypotheses, or once no live beam can beat
    its best finished one (an exact bound: the live score divided by the largest penalty it could still reach), and
    leaves the batch; at its length limit without an ending it takes its best live beam.
  - ``"transformers"`` (Hugging Face ``GenerationMixin._beam_search``, transformers 4.5x-5.x, ``early_stopping=False``,
    Marian's default): the penalty ``|Y| ** alpha``, |Y| the generated tokens including ``</s>``; a sentence stops once
    it has K finished hypotheses *and* its best live beam, normalised at the *current* length, no longer beats the
    worst of them (a heuristic); at the length limit the K best candidates of that step become finished too, and the
    best of all is returned. "Never" is transformers' additive -1e9, not -inf, so candidates order exactly as there
    (a Marian / OPUS-MT checkpoint run here gives exactly what ``generate(num_beams=K, length_penalty=alpha)`` gives;
    tests/transformer/test_marian.py and tests/transformer/test_m2m100.py check it).

  The two rules share the search's start (encoding, one row per beam, the length limits, forced tokens), every
  step's expansion (the 2K best candidates of the K live beams) and the length penalty; they differ in when an
  ending counts, when a sentence stops and what "never" is, which is where each keeps its own bookkeeping
  (:func:`_finish_gnmt`, :func:`_finish_transformers`): written as hooks of one loop they would turn every line of
  it into a branch. The two penalties agree only at ``alpha = 0``; no alpha of one equals the other at every length.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..network.kv_cache import KVCache
from ..network.model import Transformer, padding_mask
from .settings import DEFAULT_ALPHA, DEFAULTS, SCORINGS, DecodeSettings, length_penalty, output_limits
from .step import best_pieces, by_blocks, force, never_ids, next_logp, top_k
from .tree import BeamTree, NoTree, TreeRecorder

_NEG = -1.0e9  # transformers' additive "never" (kept so candidates order exactly as there)


@dataclass
class Hypotheses:
    """Decoded output ids ``(B, L)`` (no BOS; EOS kept where produced; padded with ``pad_id``)
    and their scores ``(B,)`` (sum of log-probabilities, divided by the length penalty); ``trees``: one
    :class:`BeamTree` per sentence when beam search was asked to record it; ``attentions``: greedy search's own
    attention weights when asked, ``(encoder, decoder, cross)``, one tensor a layer each, ``(B, H, S, S)``,
    ``(B, H, L, L)`` and ``(B, H, L, S)`` (decoder position ``t`` is the step that read output ``t - 1``; a row's
    positions past its end are the padding steps its batch ran on)."""

    tokens: Tensor
    scores: Tensor
    trees: list[BeamTree] | None = None
    attentions: tuple[tuple[Tensor, ...], tuple[Tensor, ...], tuple[Tensor, ...]] | None = None


def _inference(search: Callable[..., Hypotheses]) -> Callable[..., Hypotheses]:
    """Run a search under ``torch.inference_mode`` (like ``no_grad``, and it also skips view and
    version-counter bookkeeping on every op: ~10% off a decoding step) and hand back ordinary tensors."""

    @functools.wraps(search)
    def run(*args, **kwargs) -> Hypotheses:
        with torch.inference_mode():
            hyp = search(*args, **kwargs)
        attentions = hyp.attentions and tuple(tuple(a.clone() for a in kind) for kind in hyp.attentions)
        return Hypotheses(hyp.tokens.clone(), hyp.scores.clone(), hyp.trees, attentions)

    return run


@_inference
def greedy_decode(model: Transformer, src: Tensor, max_len_a: float = DEFAULTS.max_len_a,
                  max_len_b: int = DEFAULTS.max_len_b,
                  use_cache: bool = True, head_mask: dict[str, Tensor] | None = None,
                  forced: Tensor | None = None, return_attention: bool = False) -> Hypotheses:
    """Pick the most probable token at every step. ``src (B, S)`` -> ``Hypotheses``. ``forced (B, P)``: the first P
    output tokens, imposed (e.g. a target-language code), with log-probability 0. ``return_attention`` (with the
    cache): every attention weight, taken from the encoder pass and the steps themselves (``Hypotheses.attentions``;
    the teacher-forced pass over the output gives the same numbers, up to float rounding: tested)."""
    cfg = model.config
    src_mask = padding_mask(src, cfg.pad_id)
    encoded = model.encode(src, src_mask, return_attention=return_attention,
                           encoder_head_mask=(head_mask or {}).get("encoder"))
    memory = encoded.last_hidden_state
    steps: list[tuple[tuple[Tensor, ...], tuple[Tensor, ...]]] | None = [] if return_attention else None
    if return_attention and not use_cache:
        raise ValueError("greedy_decode returns attentions from its cached steps: use_cache=True")
    b = src.size(0)
    tokens = torch.full((b, 1), cfg.bos_id, dtype=torch.long, device=src.device)
    scores = torch.zeros(b, device=src.device)
    finished = torch.zeros(b, dtype=torch.bool, device=src.device)
    cache = model.new_cache() if use_cache else None
    limits = output_limits(model, src, max_len_a, max_len_b)  # (B,)
    work: dict[str, Tensor] = {}
    for step in range(1, int(limits.max()) + 1):
        if steps is None and by_blocks(model, cache, head_mask, forced, step, b):
            hidden = model.decode_step(tokens[:, -1:], memory, src_mask, cache, project=False)  # (B, D)
            best_logp, best = (t[:, 0] for t in best_pieces(model, hidden, 1, work))
        else:
            logp = force(next_logp(model, tokens, memory, src_mask, cache, head_mask, work, steps),
                         forced, step)  # (B, V)
            best_logp, best = logp.max(dim=-1)
        best = best.masked_fill(finished, cfg.pad_id)
        scores += best_logp.masked_fill(finished, 0.0)
        tokens = torch.cat([tokens, best[:, None]], dim=1)
        finished |= (best == cfg.eos_id) | (step >= limits)
        if finished.all():
            break
    if steps is None:
        return Hypotheses(tokens[:, 1:], scores)
    return Hypotheses(tokens[:, 1:], scores, attentions=(encoded.attentions, *_step_attentions(steps)))


def _step_attentions(steps: list[tuple[tuple[Tensor, ...], tuple[Tensor, ...]]]
                     ) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """Each layer's decoder and cross-attention weights ``(B, H, L, L)`` and ``(B, H, L, S)`` from ``L`` steps'
    ``(self, cross)`` weights (step ``t``: ``(B, H, 1, t)`` and ``(B, H, 1, S)`` a layer); a position's later keys
    get weight 0, as under the causal mask."""
    n = len(steps)
    decoder, cross = [], []
    for layer in range(len(steps[0][0])):
        first = steps[0][0][layer]
        full = first.new_zeros(first.size(0), first.size(1), n, n)  # (B, H, L, L)
        for t, (self_w, _) in enumerate(steps):
            full[:, :, t, : t + 1] = self_w[layer][:, :, 0]
        decoder.append(full)
        cross.append(torch.cat([cross_w[layer] for _, cross_w in steps], dim=2))  # L x (B, H, 1, S) -> (B, H, L, S)
    return tuple(decoder), tuple(cross)


def search(model: Transformer, src: Tensor, settings: DecodeSettings, head_mask: dict[str, Tensor] | None = None,
           record_tree: bool = False, forced: Tensor | None = None, return_attention: bool = False) -> Hypotheses:
    """Decode ``src (B, S)`` as ``settings`` say: greedy search for beam size 1, else beam search under its scoring
    rules (``record_tree``: the ``"gnmt"`` rules only, as :func:`beam_search` says). What ``settings`` leave
    None is filled as :meth:`DecodeSettings.filled` says (``Translator.settings`` fills in the checkpoint's own).
    ``return_attention``: greedy search's own attentions (``Hypotheses.attentions``); beam search returns none."""
    if settings.beam_size <= 1:
        return greedy_decode(model, src, settings.max_len_a, settings.max_len_b, head_mask=head_mask, forced=forced,
                             return_attention=return_attention)
    settings = settings.filled()
    return beam_search(model, src, settings.beam_size, settings.alpha, settings.max_len_a, settings.max_len_b,
                       head_mask=head_mask, record_tree=record_tree, forced=forced, scoring=settings.scoring)


@_inference
def beam_search(model: Transformer, src: Tensor, beam_size: int = DEFAULTS.beam_size, alpha: float = DEFAULT_ALPHA,
                max_len_a: float = DEFAULTS.max_len_a, max_len_b: int = DEFAULTS.max_len_b, use_cache: bool = True,
                head_mask: dict[str, Tensor] | None = None, record_tree: bool = False,
                forced: Tensor | None = None, scoring: str = "gnmt") -> Hypotheses:
    """Batched beam search. ``src (B, S)`` -> best ``Hypotheses`` (scores: log-probability divided by
    :func:`length_penalty`). ``scoring``: the rules, ``"gnmt"`` (fairseq's) or ``"transformers"`` (Hugging Face
    ``generate``'s), see the module's docstring. ``forced (B, P)``: the first P output tokens, imposed with
    log-probability 0 (as in :func:`greedy_decode`; transformers' ``forced_bos_token_id``, counted in |Y|). Each
    sentence's own length limit (:func:`output_limits`) plays transformers' ``max_new_tokens``.

    ``record_tree`` (``"gnmt"`` rules only): also return, per sentence, every expanded hypothesis
    (``Hypotheses.trees``), recorded during this one search.
    """
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {SCORINGS}, not {scoring!r}")
    beams = _Beams.start(model, src, beam_size, max_len_a, max_len_b, use_cache, head_mask, forced)
    if scoring == "transformers":
        if record_tree:
            raise ValueError("record_tree is recorded by the \"gnmt\" rules only")
        return _finish_transformers(model, beams, alpha)
    return _finish_gnmt(model, beams, alpha, record_tree)


@dataclass
class _Beams:
    """The state both rules of beam search start from and carry: ``B`` sentences of ``K`` beams each, one row per
    beam (``memory (B*K, S, D)``, ``src_mask (B*K, 1, 1, S)``, ``tokens (B*K, t)`` BOS first, ``forced (B*K, P)``),
    each sentence's length limit ``limits (B,)``."""

    model: Transformer
    k: int
    memory: Tensor
    src_mask: Tensor
    tokens: Tensor
    limits: Tensor
    forced: Tensor | None
    cache: KVCache | None
    head_mask: dict[str, Tensor] | None
    work: dict[str, Tensor]

    @classmethod
    def start(cls, model: Transformer, src: Tensor, k: int, max_len_a: float, max_len_b: int, use_cache: bool,
              head_mask: dict[str, Tensor] | None, forced: Tensor | None) -> _Beams:
        cfg = model.config
        src_mask = padding_mask(src, cfg.pad_id)
        memory = model.encode(src, src_mask, encoder_head_mask=(head_mask or {}).get("encoder")).last_hidden_state
        # every sentence's encoder output repeated once per beam: (B, S, D) -> (B*K, S, D)
        return cls(model, k, memory.repeat_interleave(k, dim=0),
                   src_mask.repeat_interleave(k, dim=0),  # (B*K, 1, 1, S)
                   torch.full((src.size(0) * k, 1), cfg.bos_id, dtype=torch.long, device=src.device),
                   output_limits(model, src, max_len_a, max_len_b),  # (B,) each sentence's own
                   forced.repeat_interleave(k, dim=0) if forced is not None else None,  # (B, P) -> (B*K, P)
                   model.new_cache(memory) if use_cache else None, head_mask, {})  # cross K/V once a sentence

    def expand(self, step: int, scores: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The 2K best one-token extensions of each sentence's K beams, whose running log-probabilities are
        ``scores (B, K)``: their scores, the beam each extends and its new token, ``(B, 2K)`` each. The first step
        with a cache runs one row a sentence (its K beams are the same, only the first live: the others' scores are
        never), then the cache branches into the K rows (``KVCache.branch``); not where the first beam could offer
        fewer than 2K possible pieces (a forced first token, a vocabulary under 2K), which the others' fill."""
        b, k = scores.shape
        if self.cache is None or self.cache.length or k == 1:
            return self._expand(step, scores, slice(None), k)
        if self.forced is not None or self.model.config.tgt_vocab_size - len(never_ids(self.model)) < 2 * k:
            self.cache.branch(k)  # every row from the first step on
            return self._expand(step, scores, slice(None), k)
        top = self._expand(step, scores[:, :1], slice(None, None, k), k)  # rows 0, K, 2K, ...: one a sentence
        self.cache.branch(k)
        return top

    def _expand(self, step: int, scores: Tensor, rows: slice, k: int) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`expand` over the beams ``scores (B, R)`` of the rows ``rows`` (R of each sentence's K)."""
        b, r = scores.shape
        tokens, memory, src_mask = self.tokens[rows], self.memory[rows], self.src_mask[rows]  # (B*R, ...)
        forced = None if self.forced is None else self.forced[rows]
        if by_blocks(self.model, self.cache, self.head_mask, forced, step, b * r):
            hidden = self.model.decode_step(tokens[:, -1:], memory, src_mask, self.cache, project=False)  # (B*R, D)
            logp, ids = best_pieces(self.model, hidden, 2 * k, self.work)  # (B*R, 2K) each: a beam's 2K best
            cand = (logp + scores.reshape(b * r, 1)).view(b, r * 2 * k)  # (B*R, 2K) -> (B, R*2K)
            top_scores, pick = cand.topk(2 * k, dim=-1)  # (B, 2K): the sentence's 2K best are among them
            return top_scores, pick // (2 * k), ids.view(b, r * 2 * k).gather(1, pick)
        logp = force(next_logp(self.model, tokens, memory, src_mask, self.cache, self.head_mask, self.work), forced,
                     step)  # (B*R, V)
        vocab = logp.size(-1)
        cand = logp.add_(scores.reshape(b * r, 1)).view(b, r * vocab)  # (B*R, V) -> (B, R*V), in place
        top_scores, top_ids = top_k(cand, 2 * k)  # (B, 2K)
        return top_scores, top_ids // vocab, top_ids % vocab

    def candidates(self, step: int, top_beam: Tensor, last: Tensor | int, width: int) -> Tensor:
        """The 2K candidates' sequences without BOS, ``last`` at position ``step - 1``, padded: ``(B, 2K, width)``."""
        b = top_beam.size(0)
        prefix = self.tokens.view(b, self.k, -1)[:, :, 1:]  # (B*K, t) -> (B, K, t-1), without BOS
        seqs = torch.full((b, 2 * self.k, width), self.model.config.pad_id, dtype=torch.long, device=prefix.device)
        seqs[:, :, : step - 1] = prefix.gather(1, top_beam[:, :, None].expand(-1, -1, step - 1))
        seqs[:, :, step - 1] = last
        return seqs

    def advance(self, top_beam: Tensor, top_tok: Tensor, order: Tensor) -> Tensor:
        """Carry on the candidates ``order (B, K)`` picked: the rows they extend, then their tokens; returns the
        rows ``(B*K,)`` (for the cache, which follows them)."""
        b = top_beam.size(0)
        batch_offset = (torch.arange(b, device=top_beam.device) * self.k)[:, None]  # (B, 1)
        src_beam = (top_beam.gather(1, order) + batch_offset).view(-1)  # (B*K,) rows to carry on
        new_tok = top_tok.gather(1, order).view(-1, 1)  # (B*K, 1)
        self.tokens = torch.cat([self.tokens.index_select(0, src_beam), new_tok], dim=1)
        return src_beam

    def keep(self, sentences: Tensor) -> Tensor:
        """Only the ``sentences (B',)`` stay in the batch: their rows of the tokens, memory, mask and forced tokens;
        returns those rows ``(B'*K,)`` (for the cache, whose cross-attention keys/values leave with the others)."""
        rows = (sentences[:, None] * self.k + torch.arange(self.k, device=sentences.device)).view(-1)  # (B'*K,)
        self.tokens, self.memory, self.src_mask = (t.index_select(0, rows) for t in (self.tokens, self.memory,
                                                                                      self.src_mask))
        self.forced = self.forced.index_select(0, rows) if self.forced is not None else None
        return rows


def _finish_gnmt(model: Transformer, beams: _Beams, alpha: float, record_tree: bool) -> Hypotheses:
    """fairseq's rules (the GNMT penalty): finished hypotheses (ending in EOS) are scored ``logprob / lp(length)``;
    a sentence stops when it has K of them or no live beam can beat its best one (live scores only fall; lp grows
    to lp(max)), and leaves the batch. With ``record_tree``, a :class:`TreeRecorder` keeps every expansion."""
    cfg = model.config
    dev = beams.tokens.device
    k, limits = beams.k, beams.limits
    b = limits.size(0)
    max_steps = int(limits.max())
    max_lp = length_penalty(limits, alpha) if alpha > 0 else torch.ones(b, device=dev)  # (B,)

    live = torch.zeros(b, k, device=dev)
    live[:, 1:] = float("-inf")  # all beams start identical: keep only the first
    fin_tokens = torch.full((b, k, max_steps + 1), cfg.pad_id, dtype=torch.long, device=dev)
    fin_scores = torch.full((b, k), float("-inf"), device=dev)
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    in_top_k = torch.arange(2 * k, device=dev)[None, :] < k
    # finished sentences leave the batch; their results wait here, by original position
    active = torch.arange(b, device=dev)  # original position of each sentence still in the batch
    best_tokens = torch.full((b, max_steps + 1), cfg.pad_id, dtype=torch.long, device=dev)
    best_scores = torch.full((b,), float("-inf"), device=dev)
    tree = TreeRecorder(b, k, cfg.bos_id) if record_tree else NoTree()

    for step in range(1, max_steps + 1):
        top = top_scores, top_beam, top_tok = beams.expand(step, live)  # (B, 2K) each
        is_eos = top_tok == cfg.eos_id
        # as in fairseq, an ending counts only when it ranks among the K best candidates
        # (so beam size 1 is exactly greedy search)
        accept = is_eos & in_top_k & ~done[:, None]

        # finished candidates: normalise and merge into the K best finished per sentence
        eos_scores = (top_scores / length_penalty(step, alpha)).masked_fill(~accept, float("-inf"))
        eos_seqs = beams.candidates(step, top_beam, cfg.eos_id, max_steps + 1)  # (B, 2K, max_steps + 1)
        all_scores = torch.cat([fin_scores, eos_scores], dim=1)  # (B, 3K)
        fin_scores, keep = all_scores.topk(k, dim=1)
        fin_tokens = torch.cat([fin_tokens, eos_seqs], dim=1).gather(1, keep[:, :, None].expand(-1, -1, max_steps + 1))

        # live beams: the K best candidates that did not end
        live, order = top_scores.masked_fill(is_eos, float("-inf")).topk(k, dim=1)  # (B, K)
        tree.step(active, step, top, accept, eos_scores, keep, order, live, done)
        src_beam = beams.advance(top_beam, top_tok, order)

        # stop a sentence when it has K endings, or when its best live beam, even at the best
        # length, cannot beat its best ending
        best_live_bound = live.max(dim=1).values / max_lp
        # a sentence at its own length limit without an ending takes its best live beam
        at_limit = (step >= limits) & ~done & (fin_scores[:, 0] == float("-inf"))
        if at_limit.any():
            _end_with_best_live(beams, live, step, alpha, at_limit, fin_tokens, fin_scores, tree, active)
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
            tree.leave(active, drop, keep)
            active, live, done, fin_scores, fin_tokens, limits, max_lp = (
                t[keep] for t in (active, live, done, fin_scores, fin_tokens, limits, max_lp))
            cross_rows = beams.keep(keep)
            src_beam = src_beam.index_select(0, cross_rows)
        if beams.cache is not None:  # the cached keys/values follow their beams (and leave with their sentences)
            beams.cache.reorder(src_beam, cross_rows)

    # sentences with no finished hypothesis (hit max length): take the best live beam
    no_fin = fin_scores[:, 0] == float("-inf")
    if no_fin.any():
        _end_with_best_live(beams, live, beams.tokens.size(1) - 1, alpha, no_fin, fin_tokens, fin_scores, tree, active)
    best_tokens[active] = fin_tokens[:, 0]
    best_scores[active] = fin_scores[:, 0]
    lengths = (best_tokens != cfg.pad_id).sum(dim=1)
    return Hypotheses(best_tokens[:, : max(int(lengths.max()), 1)], best_scores, tree.result(active))


def _end_with_best_live(beams: _Beams, live: Tensor, length: int, alpha: float, rows: Tensor, fin_tokens: Tensor,
                        fin_scores: Tensor, tree: TreeRecorder | NoTree, active: Tensor) -> None:
    """Sentences ``rows (B,)`` without an ending at their length limit (``length`` tokens) end with their best live
    beam, normalised: it becomes their best finished entry (``fin_tokens (B, K, L)``, ``fin_scores (B, K)``, in
    place)."""
    b = live.size(0)
    live_norm = live / length_penalty(length, alpha)
    best = live_norm.argmax(dim=1)
    batch = torch.arange(b, device=live.device)
    seqs = beams.tokens.view(b, beams.k, -1)[batch, best, 1:]  # (B*K, t) -> (B, t-1) without BOS
    fin_tokens[rows, 0, : seqs.size(1)] = seqs[rows]
    fin_scores[rows, 0] = live_norm[batch, best][rows]
    tree.limit(active, rows, best, live_norm)


def _finish_transformers(model: Transformer, beams: _Beams, alpha: float) -> Hypotheses:
    """transformers' rules (``|Y| ** alpha``, its stopping heuristic, its additive "never"), step for step as
    ``GenerationMixin._beam_search`` does."""
    cfg = model.config
    dev = beams.tokens.device
    k, limits = beams.k, beams.limits
    b = limits.size(0)
    max_steps = int(limits.max())

    running = torch.zeros(b, k, device=dev)
    running[:, 1:] = _NEG  # the K beams start identical: only the first one expands
    fin_tokens = torch.full((b, k, max_steps), cfg.pad_id, dtype=torch.long, device=dev)
    fin_scores = torch.full((b, k), _NEG, device=dev)
    fin_flags = torch.zeros(b, k, dtype=torch.bool, device=dev)
    improvable = torch.ones(b, dtype=torch.bool, device=dev)  # transformers' is_early_stop_heuristic_unsatisfied
    in_top_k = torch.arange(2 * k, device=dev)[None, :] < k

    for step in range(1, max_steps + 1):
        top_scores, top_beam, top_tok = beams.expand(step, running)  # (B, 2K) each
        hits = (top_tok == cfg.eos_id) | (step >= limits)[:, None]  # ended, or at the sentence's limit
        cand_seqs = beams.candidates(step, top_beam, top_tok, max_steps)  # (B, 2K, max_steps)

        # live beams: the K best candidates that did not hit a stop
        order = (top_scores + hits.float() * _NEG).topk(k, dim=1).indices  # (B, K)
        running = (top_scores + hits.float() * _NEG).gather(1, order)

        # finished: the candidates among the K best that hit a stop, normalised, merged into the K best so far
        penalty = length_penalty(step, alpha, "transformers")
        normed = top_scores / penalty
        normed = normed + (~improvable).float()[:, None] * _NEG + (~(hits & in_top_k)).float() * _NEG
        merged_scores = torch.cat([fin_scores, normed], dim=1)  # (B, 3K)
        keep = merged_scores.topk(k, dim=1).indices
        fin_scores = merged_scores.gather(1, keep)
        fin_flags = torch.cat([fin_flags, hits & in_top_k], dim=1).gather(1, keep)
        fin_tokens = torch.cat([fin_tokens, cand_seqs], dim=1).gather(1, keep[:, :, None].expand(-1, -1, max_steps))

        src_beam = beams.advance(top_beam, top_tok, order)
        if beams.cache is not None:
            beams.cache.reorder(src_beam)  # the cached keys/values follow their beams

        # transformers' heuristic: can the best live beam, at the current length, still beat a finished one?
        worst = torch.where(fin_flags, fin_scores.min(dim=1, keepdim=True).values, torch.full_like(fin_scores, _NEG))
        improvable &= ((running[:, :1] / penalty) > worst).any(dim=1)
        if not (improvable & (step < limits)).any():
            break

    lengths = (fin_tokens[:, 0] != cfg.pad_id).sum(dim=1)
    return Hypotheses(fin_tokens[:, 0, : max(int(lengths.max()), 1)], fin_scores[:, 0])
