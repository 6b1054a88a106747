"""Per-sentence hallucination signals and the rule that flags a translation as one that may be a hallucination.

- :func:`pair_signals`: teacher-forced signals of (source, output) pairs, batched: ``seq_logprob``, ``source_share``,
  ``source_share_min`` (ALTI+, :func:`transformer.interpret.contributions`) and ``eos_attention`` (Guerreiro et al.,
  2023; Dale et al., 2023). The same numbers as one sentence at a time; no hook, the model untouched.
- :func:`repetition` / :func:`looping`: the longest run of one unit of 1-6 characters repeated back to back.
- :class:`FlagRule`, :func:`flag`, :func:`flag_rule`: "may be a hallucination", a rule stored beside a checkpoint
  (``flag.json``, chosen on val by ``python -m transformer.detect``), or, for a checkpoint without one, looping
  outputs only. :func:`translation_row` builds the row of one translation whose teacher-forced pass is at hand
  (the app's notice); :func:`reasons` says which conditions hold.

The column names (``seq_logprob``, ``source_share``, ``source_share_min``, ``eos_attention``, ``repetition``, ...)
are those of ``python -m transformer.corpus``'s table: a row of that table is what :func:`flag` reads.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..checkpoint.files import MAX_METADATA_BYTES, read_json
from ..network.masks import pad_sequences
from ..translator import Translator
from .alti import contributions
from .methods import require_eval

SIGNALS = ("seq_logprob", "source_share", "source_share_min", "eos_attention")  # what pair_signals returns
LOOP_REPEATS = 6  # a unit repeated this many times in a row is a looping output
MAX_UNIT = 6  # the longest unit, in characters
DEFAULT_MAX_BATCH_TOKENS = 2048  # padded (source + output) pieces per batch (a CPU: ~2x faster than 4096)
FLAG_FILE = "flag.json"  # the rule beside a checkpoint
_SPACE = re.compile(r"\s+")
_COLUMN = re.compile(r"[a-z][a-z0-9_]{0,39}")
Values = Sequence[float] | np.ndarray | Tensor  # one value per output step


# ----------------------------------------------------------------------------------------------- looping outputs


def repetition(text: str) -> int:
    """The longest run of one unit of 1 to ``MAX_UNIT`` characters repeated back to back in ``text``, whitespace
    ignored (removed first: "1 1 1 1 1 1" is "111111", 6; "zzzzzzzz" is 8; "Bzz-Bzz-Bzz-" is 3; ordinary text
    1 to 3). Only whole repetitions count ("abcabcab": 2). Empty text: 0."""
    s = _SPACE.sub("", text)
    best = 1 if s else 0
    for unit in range(1, MAX_UNIT + 1):
        streak = 0  # how many positions in a row repeat the character ``unit`` places before them
        for i in range(unit, len(s)):
            streak = streak + 1 if s[i] == s[i - unit] else 0
            if streak:
                best = max(best, (streak + unit) // unit)  # a stretch of streak + unit characters of period ``unit``
    return best


def looping(text: str) -> bool:
    """Whether ``text`` loops: a unit of 1-6 characters repeated ``LOOP_REPEATS`` (6) or more times in a row."""
    return repetition(text) >= LOOP_REPEATS


# ----------------------------------------------------------------------------------------------- signals


def eos_share(cross: Tensor | np.ndarray, source_ids: Sequence[int], eos_id: int) -> np.ndarray:
    """Each output step's cross-attention weight on the source's ``</s>`` (every source position holding the EOS
    id), averaged over layers and heads: ``(T,)`` from ``cross (L, H, T, S)`` (one sentence, no padding)."""
    a = torch.as_tensor(cross).detach().double().cpu()  # (L, H, T, S)
    on_eos = torch.tensor([int(i) == eos_id for i in source_ids], dtype=torch.bool)  # (S,)
    return a[..., on_eos].sum(-1).mean(dim=(0, 1)).numpy()  # (L, H, T, |eos|) -> (T,)


def step_signals(logprobs: Values, source_share: Values, eos: Values) -> dict[str, float]:
    """The sentence's signals from its scored output steps (one value per step, each ``(T,)``): ``seq_logprob``
    the mean log-probability, ``source_share`` / ``source_share_min`` the mean / minimum ALTI+ source share,
    ``eos_attention`` the mean of :func:`eos_share`. No step: every value NaN."""
    lp, ss, eo = (np.asarray(torch.as_tensor(x).double().cpu(), dtype=np.float64) for x in (logprobs, source_share,
                                                                                             eos))
    if not (len(lp) == len(ss) == len(eo)):
        raise ValueError(f"one value per step: {len(lp)} log-probabilities, {len(ss)} source shares, {len(eo)} "
                         "shares on </s>")
    if not len(lp):
        return dict.fromkeys(SIGNALS, math.nan)
    return {"seq_logprob": float(lp.mean()), "source_share": float(ss.mean()), "source_share_min": float(ss.min()),
            "eos_attention": float(eo.mean())}


def forced_steps(translator: Translator, target_ids: Sequence[int], tgt_lang: str | None = None) -> int:
    """How many of ``target_ids``' first pieces a multilingual model's search imposed (its target-language code):
    not predicted, so not scored."""
    prefix = list(translator.tokenizer.target_prefix(tgt_lang))
    return len(prefix) if prefix and [int(i) for i in target_ids[: len(prefix)]] == prefix else 0


def translation_row(translator: Translator, source_ids: Sequence[int], target_ids: Sequence[int], text: str,
                    logprobs: Values, source_share: Values, cross: Tensor | np.ndarray, *, hit_max_len: bool = False,
                    tgt_lang: str | None = None) -> dict[str, Any]:
    """The row :func:`flag` reads, for one translation whose teacher-forced pass is at hand (decoder input
    ``[BOS] + target_ids[:-1]``): ``logprobs (T,)`` of each ``target_ids[t]``, ALTI+'s ``source_share (T,)``,
    ``cross (L, H, T, S)``. The signals are :func:`pair_signals`' of the same pair (the forced language code not
    scored), plus ``repetition`` of ``text`` and ``hit_max_len``."""
    skip = forced_steps(translator, target_ids, tgt_lang)
    row: dict[str, Any] = step_signals(np.asarray(logprobs)[skip:], np.asarray(source_share)[skip:],
                                       eos_share(cross, source_ids, translator.config.eos_id)[skip:])
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

    - ``seq_logprob``: mean over the scored steps of ``log p(target[t])`` (log-softmax of the model's logits);
    - ``source_share``, ``source_share_min``: mean and minimum over the scored steps of ALTI+'s source share (the
      share of the step's prediction that comes from the source; :func:`transformer.interpret.contributions`);
    - ``eos_attention``: mean over the decoder layers, the heads and the scored steps of the cross-attention weight
      on the source's ``</s>`` (the positions holding the EOS id: the last source piece for ours and Marian's).

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
        logp = out.logits.float().log_softmax(-1).gather(-1, labels[..., None])[..., 0]  # (B, T)
        share = contributions(model, src, tgt, max_bytes=max_bytes).source_share  # (B, T)
        for b, i in enumerate(rows):
            s, t = len(srcs[i]), len(tgts[i])
            cross = torch.stack([a[b, :, :t, :s] for a in out.cross_attentions])  # (L, H, T, S) of this pair
            results[i] = step_signals(logp[b, skip:t], share[b, skip:t],
                                      eos_share(cross, srcs[i], cfg.eos_id)[skip:])
    return results


# ----------------------------------------------------------------------------------------------- the flag

OPS = {"<": float.__lt__, "<=": float.__le__, ">": float.__gt__, ">=": float.__ge__}


@dataclass(frozen=True)
class Condition:
    """One test on a row: ``row[column] op value`` (``op`` one of ``<``, ``<=``, ``>``, ``>=``). A missing, null or
    NaN value never holds."""

    column: str
    op: str
    value: float

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op must be one of {sorted(OPS)}, not {self.op!r}")
        if not _COLUMN.fullmatch(self.column):  # a table's column name: never markup or an address to show
            raise ValueError(f"a column is a name like source_share, not {self.column[:40]!r}")

    def holds(self, row: Mapping[str, Any]) -> bool:
        x = _value(row, self.column)
        return x is not None and OPS[self.op](x, float(self.value))

    def __str__(self) -> str:
        return f"{self.column} {self.op} {self.value:g}"


LOOP_CONDITION = Condition("repetition", ">=", LOOP_REPEATS)


@dataclass(frozen=True)
class FlagRule:
    """"May be a hallucination": a row is flagged when any of ``conditions`` holds. ``origin``: the file it was
    read from, or ``"default"``; ``calibration``: how it was chosen (split, rates, command), as written. Two rules are
    equal when their conditions are."""

    conditions: tuple[Condition, ...] = (LOOP_CONDITION,)
    origin: str = field(default="default", compare=False)
    calibration: dict[str, Any] = field(default_factory=dict, compare=False)

    def describe(self) -> str:
        """The rule in words: ``repetition >= 6 or seq_logprob < -2.1``."""
        return " or ".join(str(c) for c in self.conditions) or "never"

    def to_json(self) -> dict[str, Any]:
        return {"any": [{"column": c.column, "op": c.op, "value": c.value} for c in self.conditions],
                "rule": self.describe(), "calibration": self.calibration}

    @classmethod
    def from_json(cls, data: object, origin: str = "default") -> FlagRule:
        """The rule of ``flag.json``'s object (``{"any": [{"column", "op", "value"}, ...], ...}``); ``ValueError``
        saying why when it is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("any"), list):
            raise ValueError('a flag rule is a JSON object with a list "any" of {"column", "op", "value"}')
        conditions = []
        for c in data["any"]:
            if not (isinstance(c, dict) and isinstance(c.get("column"), str) and isinstance(c.get("op"), str)
                    and isinstance(c.get("value"), (int, float)) and not isinstance(c.get("value"), bool)):
                raise ValueError(f"a condition needs a column, an op and a number: {c!r}")
            conditions.append(Condition(c["column"], c["op"], float(c["value"])))
        calibration = data.get("calibration")
        return cls(tuple(conditions), origin, calibration if isinstance(calibration, dict) else {})


DEFAULT_RULE = FlagRule()


def _value(row: Mapping[str, Any], column: str) -> float | None:
    """``row[column]`` as a float (booleans 0/1), or None when missing, null or NaN; ``repetition`` is computed
    from ``row["translation"]`` when the row has no such column."""
    x = row.get(column)
    if x is None and column == "repetition" and isinstance(row.get("translation"), str):
        x = repetition(row["translation"])
    if x is None or isinstance(x, str):
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def flag(row: Mapping[str, Any], rule: FlagRule = DEFAULT_RULE) -> bool:
    """Whether ``row`` (a dict with the corpus table's column names) may be a hallucination under ``rule``."""
    return any(c.holds(row) for c in rule.conditions)


def reasons(row: Mapping[str, Any], rule: FlagRule = DEFAULT_RULE) -> list[Condition]:
    """The conditions of ``rule`` that hold for ``row`` (flagged when there is any)."""
    return [c for c in rule.conditions if c.holds(row)]


def condition_text(condition: Condition) -> str:
    """One condition in plain words: ``mean log-probability below -4.11``."""
    v, below = condition.value, "<" in condition.op
    side = "below" if below else "above"
    words = {
        "repetition": f"one short unit repeats {v:g} or more times in a row" if condition.op == ">=" else None,
        "seq_logprob": f"the mean log-probability per piece is {side} {v:.2f}",
        "source_share": f"the mean source share is {side} {v:.1%}",
        "source_share_min": f"a piece's source share is {side} {v:.1%}",
        "eos_attention": f"the attention on `</s>` is {side} {v:.1%}",
        "hit_max_len": "the output was cut at the maximum length" if condition.op in (">=", ">") and v > 0 else None,
    }
    return words.get(condition.column) or str(condition)


def rule_text(rule: FlagRule) -> str:
    """``rule`` in plain words: its conditions joined by "or"."""
    return " or ".join(condition_text(c) for c in rule.conditions) or "never"


def reason_text(condition: Condition, row: Mapping[str, Any]) -> str:
    """One condition that holds, in words, with the row's value."""
    x = _value(row, condition.column)
    v = condition.value
    words = {
        "repetition": f"one short unit repeats {x:.0f} times in a row (a looping output)",
        "seq_logprob": f"the model finds its own output unlikely (mean log-probability {x:.2f} per piece, "
                       f"{'below' if '<' in condition.op else 'above'} {v:.2f})",
        "source_share": f"on average only {x:.1%} of each output piece comes from the source (threshold {v:.1%})",
        "source_share_min": f"one output piece takes only {x:.1%} from the source (threshold {v:.1%})",
        "eos_attention": f"the cross-attention rests on the source's `</s>` ({x:.1%} of it, threshold {v:.1%})",
        "hit_max_len": "the output was cut at the maximum length",
    }
    return words.get(condition.column, f"{condition.column} = {x:g} ({condition})")


def flag_rule(checkpoint_dir: str | Path | None) -> FlagRule:
    """The rule stored beside a checkpoint (``<dir>/flag.json``), else :data:`DEFAULT_RULE` (looping outputs only):
    also for a Hub id, a missing directory, or a file that is not a rule."""
    if checkpoint_dir is None:
        return DEFAULT_RULE
    path = Path(checkpoint_dir) / FLAG_FILE
    try:
        return FlagRule.from_json(read_json(path, MAX_METADATA_BYTES), str(path))
    except (OSError, ValueError):
        return DEFAULT_RULE


def write_flag_rule(checkpoint_dir: str | Path, rule: FlagRule) -> Path:
    """Write ``rule`` as ``<dir>/flag.json`` (what :func:`flag_rule` reads back)."""
    path = Path(checkpoint_dir) / FLAG_FILE
    path.write_text(json.dumps(rule.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
