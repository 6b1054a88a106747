"""Per-sentence hallucination signals: what the rule that flags a translation as one that may be a hallucination reads.

- :func:`pair_signals`: teacher-forced signals of (source, output) pairs, batched: ``seq_logprob`` and
  ``min_piece_logprob`` (the mean and the lowest log-probability of the output pieces), ``source_share``,
  ``source_share_min`` (ALTI+, :func:`transformer.interpret.contributions`), ``eos_attention`` (Guerreiro et al.,
  2023; Dale et al., 2023) and ``omission`` (:func:`ending_surprise`: the model's surprise at the sentence ending
  where it does, with a full stop or without). The same numbers as one sentence at a time; no hook, the model untouched.
- :func:`repetition` / :func:`looping`: the most times one stretch of the output (any length, in characters or in
  words) repeats back to back; German's triple letters do not count as a loop.
- :func:`translation_row`: the row of one translation whose teacher-forced pass is at hand (the app's notice).

The rule that flags a row and its score are :mod:`transformer.interpret.flagging`.

The column names and their descriptions are :data:`transformer.interpret.columns.COLUMNS` (the table of ``python -m
transformer.corpus``): a row of that table is what the rule reads, and the rule's words are its columns'.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..network.masks import pad_sequences
from ..translator import Translator
from .alti import contributions
from .methods import require_eval

# what pair_signals returns
SIGNALS = ("seq_logprob", "min_piece_logprob", "source_share", "source_share_min", "eos_attention", "omission")
LOOP_REPEATS = 4  # a stretch repeated this many times in a row is a looping output (the rule without flag.json)
SPELLED_RUN = 3  # German spells one letter up to this many times in a row: such a run is not a loop
DEFAULT_MAX_BATCH_TOKENS = 2048  # padded (source + output) pieces per batch (measured faster than 4096 on a CPU:
# docs/benchmarks.md#figures-behind-the-codes-comments)
_WORD_EDGE = re.compile(r"^\W+|\W+$")  # a word's leading and trailing punctuation
CLOSING_MARKS = frozenset(".!?…。！？")  # the marks that end a sentence (a piece of only these, with or without "▁")
Values = Sequence[float] | np.ndarray | Tensor  # one value per output step


# ----------------------------------------------------------------------------------------------- looping outputs


def longest_repeat(items: Sequence[Any] | np.ndarray, shortest: int = 1) -> int:
    """The most times one unit (a stretch of ``items`` of ``shortest`` items or more, any length) repeats back to
    back, whole repetitions only ("abcabcab": 2): 1 for items with no repeat, 0 for none."""
    a = np.asarray(items)
    n, best = len(a), min(len(a), 1)
    for unit in range(max(shortest, 1), n // 2 + 1):
        if n // unit <= best:  # no run of this unit could beat the best
            break
        same = np.concatenate([[False], a[unit:] == a[:-unit], [False]])  # (n - unit + 2,): repeats its unit-back
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))  # starts and ends of the runs of True
        if len(edges):
            streak = int((edges[1::2] - edges[::2]).max())  # positions in a row equal to the one ``unit`` back
            best = max(best, (streak + unit) // unit)  # a stretch of streak + unit items of period ``unit``
    return best


def _longest_run(a: np.ndarray) -> int:
    """The longest run of one item repeated in ``a``; 0 for no item."""
    if not len(a):
        return 0
    change = np.flatnonzero(a[1:] != a[:-1])  # the last index of each run but the last
    ends = np.concatenate([[-1], change, [len(a) - 1]])  # (runs + 1,)
    return int(np.diff(ends).max())


def letter_run(run: int) -> int:
    """What a run of one character ``run`` long counts in :func:`repetition`: German spells one letter up to
    ``SPELLED_RUN`` times (three where words join: "Schifffahrt", "Imbissstand", "Schneeengel"), so a run that
    long counts as a double letter (2); a longer run counts its length ("Gewässsssi": 5)."""
    return run if run > SPELLED_RUN else min(run, 2)


def repetition(text: str) -> int:
    """The most times one stretch of ``text`` repeats back to back, whatever its length; the largest of:

    - in words, punctuation and case set aside: a word n-gram 3 times in a row always counts 3 ("sonnige sonnige
      sonnige"; "Menschen, Menschen, Menschen."; "ein Hund ein Hund ein Hund");
    - in characters, each run of white space kept as one space (a unit may hold one: "1 1 1 1 1 1" is 6), so that
      one word's end no longer runs into the next one's start: a unit of 2 or more characters ("Bzz-Bzz-Bzz-": 3;
      "Löwenzahnzahnzahn": 3), or one character (:func:`letter_run`: "zzzzzzzz" is 8, but the three letters in a
      row of German spelling are 2).

    Why: with the white space removed (before), word ends ran into word starts ("Tiefschnee einen": "eee"; "Mann
    nimmt": "nnn"), and with German's triple letters ("Fitnessstudio") and "...", 0.6% of Multi30k's train
    references and 0.4% of val's reached 3 or more, so a rule chosen on val needed ``repetition >= 4`` and missed a
    word said 3 times. Counted this way, 2 of the 29,000 train references reach 3 or more ("blau-pinkfarbenenen",
    "Roooaaaarrrr") and none of val's or test_2016_flickr's. Ordinary text: 1 or 2. Empty text: 0."""
    chars = np.frombuffer(" ".join(text.split()).encode("utf-32-le"), dtype=np.uint32)  # one code point each
    words = [w for w in (_WORD_EDGE.sub("", w).casefold() for w in text.split()) if w]
    ids = {w: i for i, w in enumerate(dict.fromkeys(words))}
    by_word = longest_repeat([ids[w] for w in words])
    return max(letter_run(_longest_run(chars)), longest_repeat(chars, shortest=2), by_word)


def looping(text: str) -> bool:
    """Whether ``text`` loops: one stretch repeated ``LOOP_REPEATS`` or more times in a row (:func:`repetition`)."""
    return repetition(text) >= LOOP_REPEATS


# ----------------------------------------------------------------------------------------------- signals


def eos_share(cross: Tensor | np.ndarray, source_ids: Sequence[int], eos_id: int) -> np.ndarray:
    """Each output step's cross-attention weight on the source's ``</s>`` (every source position holding the EOS
    id), averaged over layers and heads: ``(T,)`` from ``cross (L, H, T, S)`` (one sentence, no padding)."""
    a = torch.as_tensor(cross).detach().double().cpu()  # (L, H, T, S)
    on_eos = torch.tensor([int(i) == eos_id for i in source_ids], dtype=torch.bool)  # (S,)
    return a[..., on_eos].sum(-1).mean(dim=(0, 1)).numpy()  # (L, H, T, |eos|) -> (T,)


def closing_pieces(pieces: Sequence[str], ended: bool) -> int:
    """How many of an output's last pieces close it: ``</s>`` and the punctuation pieces right before it (".",
    "!", a closing quote); 0 for an output cut without ``</s>`` (``ended`` false)."""
    if not ended or not pieces:
        return 0
    n = 1
    while n < len(pieces) and not any(ch.isalnum() for ch in pieces[-n - 1]):
        n += 1
    return n


@functools.lru_cache(maxsize=8)
def ending_ids(tokenizer: Any, eos_id: int) -> tuple[int, ...]:
    """The pieces that end a sentence where they stand: ``</s>`` and every piece of the vocabulary made of closing
    marks only (``CLOSING_MARKS``: ".", "!", "?", with or without sentencepiece's "▁"). Once per tokenizer."""
    pieces = tokenizer.pieces(list(range(tokenizer.vocab_size)))
    marks = [i for i, p in enumerate(pieces) if p.replace("▁", "") and set(p.replace("▁", "")) <= CLOSING_MARKS]
    return (eos_id, *(i for i in marks if i != eos_id))


def end_logprobs(log_softmax: Tensor, ids: Sequence[int]) -> Tensor:
    """The log-probability, at each step, that the sentence ends there: that the next piece is one of ``ids``
    (:func:`ending_ids`: ``</s>`` or a closing mark), ``(...)`` from ``log_softmax (..., V)``."""
    return log_softmax[..., list(ids)].logsumexp(-1)  # (..., |ids|) -> (...)


def ending_surprise(logprobs: np.ndarray, end_logprobs: np.ndarray, closing: int) -> float:
    """The ``omission`` signal: how unlikely the model finds it that the sentence ends where it does, in nats, from
    its steps' ``logprobs (T,)`` (of each output piece) and ``end_logprobs (T,)`` (:func:`end_logprobs`: of the
    sentence ending at each step, by ``</s>`` or a closing mark). For an output ending in closing punctuation and
    ``</s>`` (``closing`` > 1, :func:`closing_pieces`), minus the summed log-probability of those pieces (a clause
    left out ends the sentence where the model would go on); for an output without closing punctuation (``closing``
    1) or cut at the length limit (``closing`` 0), minus the log-probability of the sentence ending at its last
    step in any way, so that a missing full stop is no omission (the model would have written one). No step:
    NaN."""
    if not len(logprobs):
        return math.nan
    if closing > 1:
        return float(-logprobs[-min(closing, len(logprobs)):].sum())
    return float(-end_logprobs[-1])


def step_signals(logprobs: Values, source_share: Values, eos: Values, end_logprobs: Values,
                 closing: int = 1) -> dict[str, float]:
    """The sentence's signals from its scored output steps (one value per step, each ``(T,)``): ``seq_logprob`` /
    ``min_piece_logprob`` the mean / lowest of the output pieces' ``logprobs`` (a ``</s>`` right after a word,
    ``closing`` 1, read as the sentence ending there in any way, ``end_logprobs``' last: a missing full stop is
    not an unlikely piece), ``source_share`` /
    ``source_share_min`` the mean / minimum ALTI+ source share, ``eos_attention`` the mean of :func:`eos_share`
    (``eos``), ``omission`` (:func:`ending_surprise` of the last ``closing`` steps, or of the sentence ending at the
    last step, from ``end_logprobs``: an output without closing punctuation or cut). The one place both
    :func:`pair_signals` (the corpus table, ``transformer.detect``) and :func:`translation_row` (the app's notice)
    compute them. No step: every value NaN."""
    lp, ss, eo, el = (np.asarray(torch.as_tensor(x).double().cpu(), dtype=np.float64)
                      for x in (logprobs, source_share, eos, end_logprobs))
    if not (len(lp) == len(ss) == len(eo) == len(el)):
        raise ValueError(f"one value per step: {len(lp)} log-probabilities, {len(ss)} source shares, {len(eo)} "
                         f"shares on </s>, {len(el)} log-probabilities of ending")
    if not len(lp):
        return dict.fromkeys(SIGNALS, math.nan)
    scored = lp
    if closing == 1:  # "</s>" right after a word: the sentence ending there in any way, as omission reads it
        scored = np.concatenate([lp[:-1], el[-1:]])  # (T,)
    return {"seq_logprob": float(scored.mean()), "min_piece_logprob": float(scored.min()),
            "source_share": float(ss.mean()), "source_share_min": float(ss.min()), "eos_attention": float(eo.mean()),
            "omission": ending_surprise(lp, el, closing)}


def forced_steps(translator: Translator, target_ids: Sequence[int], tgt_lang: str | None = None) -> int:
    """How many of ``target_ids``' first pieces a multilingual model's search imposed (its target-language code):
    not predicted, so not scored."""
    prefix = list(translator.tokenizer.target_prefix(tgt_lang))
    return len(prefix) if prefix and [int(i) for i in target_ids[: len(prefix)]] == prefix else 0


def translation_row(translator: Translator, source_ids: Sequence[int], target_ids: Sequence[int], text: str,
                    logprobs: Values, source_share: Values, cross: Tensor | np.ndarray, end_logprobs: Values, *,
                    hit_max_len: bool = False, tgt_lang: str | None = None) -> dict[str, Any]:
    """The row :func:`flag` reads, for one translation whose teacher-forced pass is at hand (decoder input
    ``[BOS] + target_ids[:-1]``): ``logprobs (T,)`` of each ``target_ids[t]``, ALTI+'s ``source_share (T,)``,
    ``cross (L, H, T, S)`` and ``end_logprobs (T,)``, the log-probability of the sentence ending at each step
    (:func:`end_logprobs`; ``omission`` of an output without closing punctuation, or cut, reads its last). The
    signals are :func:`pair_signals`' of the same pair (:func:`step_signals`; the forced language code not scored),
    plus ``repetition`` of ``text`` and ``hit_max_len``."""
    skip = forced_steps(translator, target_ids, tgt_lang)
    ended = bool(target_ids) and int(target_ids[-1]) == translator.config.eos_id
    row: dict[str, Any] = step_signals(np.asarray(logprobs)[skip:], np.asarray(source_share)[skip:],
                                       eos_share(cross, source_ids, translator.config.eos_id)[skip:],
                                       np.asarray(end_logprobs)[skip:],
                                       closing_pieces(translator.tokenizer.pieces(list(target_ids)[skip:]), ended))
    row.update(repetition=repetition(text), hit_max_len=bool(hit_max_len))
    return row


def source_ids_of(translator: Translator, source: str | Sequence[int], src_lang: str | None = None) -> list[int]:
    """A source as the encoder reads it: a text through :meth:`Translator.encode_source` (``src_lang`` for a
    multilingual model), or ids already framed (EOS last) as given."""
    ids = translator.encode_source(source, src_lang)[0] if isinstance(source, str) else [int(i) for i in source]
    if not ids:
        raise ValueError("a source has no ids (a text is framed by encode_source; ids must include EOS)")
    return ids


def target_ids_of(translator: Translator, target: str | Sequence[int], tgt_lang: str | None = None) -> list[int]:
    """The output pieces a pair is scored on, as ``TranslationResult.target_ids`` holds them: ids as given (a
    translation's, EOS last unless it was cut at the length limit), or a text (a reference, or any German text)
    through the tokenizer's ``encode_target`` plus EOS. A multilingual model's forced language code is put first
    when missing. Cut to the model's ``max_len`` pieces (the decoder input, BOS + all but the last, must fit)."""
    cfg = translator.config
    if isinstance(target, str):
        ids = [*translator.tokenizer.encode_target(target, tgt_lang)[: cfg.max_len - 1], cfg.eos_id]
    else:
        ids = [int(i) for i in target]
    prefix = translator.tokenizer.target_prefix(tgt_lang)
    if prefix and ids[: len(prefix)] != list(prefix):
        ids = [*prefix, *ids]
    return ids[: cfg.max_len]


def _batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices grouped by length (shortest first) so that each batch's padded size ``n * longest`` stays within
    ``max_tokens`` (a longer sentence alone)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[i] <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


@torch.no_grad()
def pair_signals(translator: Translator, sources: Sequence[str | Sequence[int]],
                 targets: Sequence[str | Sequence[int]], *, src_lang: str | None = None, tgt_lang: str | None = None,
                 max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, max_bytes: int | None = None,
                 ) -> list[dict[str, float]]:
    """Teacher-forced signals of each (source, output) pair, one dict per pair with the keys of ``SIGNALS``.

    ``sources``: texts (encoded with ``src_lang``) or source ids as ``Translator.encode_source`` gives them (EOS
    included). ``targets``: output ids as ``TranslationResult.target_ids`` holds them (EOS last when the model
    ended the sentence), or texts tokenized as references (:func:`target_ids_of`; any German text, e.g. another
    sentence's reference). The decoder reads ``[BOS] + target[:-1]`` and step ``t`` predicts ``target[t]``, exactly
    the pass that gives a translation its attentions. The steps scored are every output piece but a multilingual
    model's forced language code (imposed, not predicted):

    - ``seq_logprob``, ``min_piece_logprob``: mean and minimum over the scored steps of ``log p(target[t])``
      (log-softmax of the model's logits); a ``</s>`` right after a word (no closing punctuation) counts as the
      sentence ending there in any way (``</s>`` or a closing mark, :func:`ending_ids`), as ``omission`` reads it;
    - ``source_share``, ``source_share_min``: mean and minimum over the scored steps of ALTI+'s source share (the
      share of the step's prediction that comes from the source; :func:`transformer.interpret.contributions`);
    - ``eos_attention``: mean over the decoder layers, the heads and the scored steps of the cross-attention weight
      on the source's ``</s>`` (the positions holding the EOS id: the last source piece for ours and Marian's);
    - ``omission``: :func:`ending_surprise`, minus the log-probability of the closing pieces (the final punctuation
      and ``</s>``); for an output without closing punctuation or cut without ``</s>``, of the sentence ending at
      its last step (``</s>`` or a closing mark, :func:`ending_ids`).

    A pair with no scored step gets NaN. Pairs are batched by length, at most ``max_batch_tokens`` padded pieces
    (source + output) per batch (the logits hold that many rows of the vocabulary); padding is masked, so the
    numbers equal one pair at a time. ``max_bytes``: ALTI+'s bound on the terms held at once. The model must be
    in eval mode; no hook, no state change."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    if max_batch_tokens < 1:
        raise ValueError(f"max_batch_tokens must be positive, not {max_batch_tokens}")
    model, cfg = translator.model, translator.config
    require_eval(model, "pair_signals")
    srcs = [source_ids_of(translator, s, src_lang) for s in sources]
    tgts = [target_ids_of(translator, t, tgt_lang) for t in targets]
    skip = len(translator.tokenizer.target_prefix(tgt_lang))  # every target starts with it (target_ids_of)
    results: list[dict[str, float]] = [dict.fromkeys(SIGNALS, math.nan) for _ in srcs]
    todo = [i for i, t in enumerate(tgts) if len(t) > skip]
    for batch in _batches([len(srcs[i]) + len(tgts[i]) for i in todo], max_batch_tokens):
        rows = [todo[j] for j in batch]
        src = pad_sequences([srcs[i] for i in rows], cfg.pad_id).to(translator.device)  # (B, S)
        tgt = pad_sequences([[cfg.bos_id, *tgts[i][:-1]] for i in rows], cfg.pad_id).to(translator.device)  # (B, T)
        labels = pad_sequences([tgts[i] for i in rows], cfg.pad_id).to(translator.device)  # (B, T)
        out = model(src, tgt, return_attention=True)
        log_softmax = out.logits.float().log_softmax(-1)  # (B, T, V)
        logp = log_softmax.gather(-1, labels[..., None])[..., 0]  # (B, T)
        end_logp = end_logprobs(log_softmax, ending_ids(translator.tokenizer, cfg.eos_id))  # (B, T): of ending there
        del log_softmax
        share = contributions(model, src, tgt, max_bytes=max_bytes).source_share  # (B, T)
        for b, i in enumerate(rows):
            s, t = len(srcs[i]), len(tgts[i])
            cross = torch.stack([a[b, :, :t, :s] for a in out.cross_attentions])  # (L, H, T, S) of this pair
            ended = tgts[i][-1] == cfg.eos_id
            closing = closing_pieces(translator.tokenizer.pieces(tgts[i][skip:]), ended)
            results[i] = step_signals(logp[b, skip:t], share[b, skip:t], eos_share(cross, srcs[i], cfg.eos_id)[skip:],
                                      end_logp[b, skip:t], closing)
    return results
