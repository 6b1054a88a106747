"""The rule that flags a translation as one that may be a hallucination, and the score it thresholds.

- :class:`Condition`, :class:`FlagRule`, :func:`flag`: a row is flagged when any condition holds. A rule is stored
  beside a checkpoint (``flag.json``, chosen on val by ``python -m transformer.detect``); a checkpoint without one
  flags looping outputs only (:data:`DEFAULT_RULE`).
- :class:`FlagScore`, :func:`flag_score`: how unusual a row's most unusual signal is against the model's ordinary
  outputs (its own translations and the references of the calibration split): ``-log10`` of the share of those that
  are as far out, the smallest share over the rule's signals (Tippett's combination of p-values). A score of 2 means
  1 in 100 ordinary outputs is as far out; past all of them the score goes on rising along the tail's slope. A signal
  may have to be further out than the others before it counts (its ``offset``, in powers of ten: 0.5 asks for a
  share about 3 times smaller), so that signals of different errors can share a small budget of false positives. The
  rule's thresholds are where each signal's score reaches the flag's threshold, so that a row is flagged exactly when
  its score is at least that threshold (or a loop condition holds: a loop scores past every ordinary output, the
  more the more times it repeats). A rule without a score (older files, :data:`DEFAULT_RULE`) scores nothing.
- :func:`rule_text`, :func:`reasons`, :func:`reason_text`: the rule and why a row was flagged, in plain words, from
  each column's description (:data:`transformer.interpret.columns.COLUMNS`).
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint.files import read_json
from .columns import COLUMNS, SIGNAL_COLUMNS
from .signals import LOOP_REPEATS, repetition

FLAG_FILE = "flag.json"  # the rule beside a checkpoint
MAX_KNOTS = 64  # a stored score's knots per signal, at most
MAX_CONDITIONS = 32  # a stored rule's conditions, at most (detect writes one per signal and the loop's: 9 at most)
MAX_OFFSET = 3.0  # a stored signal's offset, at most (a share 1,000 times smaller than the others')
MIN_TAIL = 1e-9  # a stored knot's share, at least (1 in a billion ordinary outputs: 10 ** its score stays finite)
MAX_FLAG_BYTES = 256 * 2**10  # flag.json, at most: the shipped ones are 12-13 kB (most of it the calibration report);
# a rule of MAX_CONDITIONS conditions and every signal's MAX_KNOTS knots fits in about 40 kB
SCORE_TAILS = tuple(10 ** (-k / 10) for k in range(41))  # the shares of ordinary outputs a score's knots sit at
_COLUMN = re.compile(r"[a-z][a-z0-9_]{0,39}")
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}  # on floats and arrays


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

    def holds_where(self, values: np.ndarray) -> np.ndarray:
        """:meth:`holds` over a whole column at once: ``values`` as floats (NaN: missing, never holds)."""
        with np.errstate(invalid="ignore"):
            return np.asarray(OPS[self.op](np.asarray(values, dtype=np.float64), float(self.value)), dtype=bool)

    def __str__(self) -> str:
        return f"{self.column} {self.op} {round(self.value, 4):g}"


LOOP_CONDITION = Condition("repetition", ">=", LOOP_REPEATS)


def _direction(column: str) -> float:
    return -1.0 if COLUMNS[column].direction == "low" else 1.0


@dataclass(frozen=True)
class Knots:
    """One signal's score: ``values`` (the signal's own values, from ordinary to far out) where the share of the
    calibration's ordinary outputs at least as far out is ``tails`` (from 1 down)."""

    values: tuple[float, ...]
    tails: tuple[float, ...]

    def levels(self) -> np.ndarray:
        return -np.log10(np.asarray(self.tails, dtype=np.float64))

    def oriented(self, column: str) -> np.ndarray:
        return np.asarray(self.values, dtype=np.float64) * _direction(column)  # rising toward far out

    def score(self, column: str, x: np.ndarray) -> np.ndarray:
        """``-log10`` of the share as far out, interpolated between the knots; held at 0 below the first, and past
        the last (further out than every ordinary output) continued along the tail's slope from the knot of share
        1 in 10, so that what is further out still ranks higher. NaN stays NaN."""
        o = np.nan_to_num(np.asarray(x, dtype=np.float64) * _direction(column))
        knots, levels = self.oriented(column), self.levels()
        score = np.interp(o, knots, levels)
        slope = self._tail_slope(knots, levels)
        if slope:
            score = np.where(o > knots[-1], levels[-1] + (o - knots[-1]) * slope, score)
        return np.where(np.isnan(np.asarray(x, dtype=np.float64)), np.nan, score)

    @staticmethod
    def _tail_slope(knots: np.ndarray, levels: np.ndarray) -> float | None:
        """The score's rise per unit of the oriented value past the last knot: the slope from the knot of share
        1 in 10 (or the last but one) to the last; None with one knot."""
        ref = min(int(np.searchsorted(levels, 1.0)), len(levels) - 2)
        return float((levels[-1] - levels[ref]) / (knots[-1] - knots[ref])) if ref >= 0 else None

    def value_at(self, column: str, level: float) -> float | None:
        """The signal's value whose score is ``level``; None when no value scores that much."""
        knots, levels = self.oriented(column), self.levels()
        if level <= levels[-1]:
            return float(np.interp(level, levels, knots)) * _direction(column)
        slope = self._tail_slope(knots, levels)
        return float(knots[-1] + (level - levels[-1]) / slope) * _direction(column) if slope else None


def knots_of(column: str, ordinary: np.ndarray) -> Knots:
    """The knots of ``column``'s score from its values on ordinary outputs: at each of ``SCORE_TAILS`` down to
    ``1 / n``, the value with that share of them at least as far out (equal values kept once)."""
    o = np.sort(np.asarray(ordinary, dtype=np.float64) * _direction(column))
    o = o[~np.isnan(o)]
    if not len(o):
        raise ValueError(f"no ordinary values of {column} to score against")
    values, tails = [], []
    for tail in (t for t in SCORE_TAILS if t * len(o) >= 1 - 1e-9):
        v = round(float(np.quantile(o, 1.0 - tail)), 6)
        if not values or v > values[-1]:
            values.append(v)
            tails.append(round(tail, 6))
    return Knots(tuple(v * _direction(column) for v in values), tuple(tails))


@dataclass(frozen=True)
class FlagScore:
    """The flag's score: each signal's :class:`Knots`, the ``threshold`` a flagged row's score reaches, how many
    ``ordinary`` outputs the knots were read from (None in files written before it was stored), and each signal's
    ``offsets`` (what its score gives up before it counts, ``-log10`` of a share; empty: none has one)."""

    knots: tuple[tuple[str, Knots], ...]
    threshold: float
    ordinary: int | None = None
    offsets: tuple[float, ...] = ()

    def offset(self, i: int) -> float:
        """The ``i``-th signal's offset (0 without one)."""
        return self.offsets[i] if self.offsets else 0.0

    @property
    def most(self) -> float:
        """The score of a row past every ordinary output (the last knot's), the least a row a loop condition flags
        scores (and at least the threshold)."""
        return max(self.threshold, *(float(k.levels()[-1]) - self.offset(i) for i, (_, k) in enumerate(self.knots)))

    def _each(self, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """Each signal's score less its offset, ``(signals, rows)``; NaN where the signal is missing."""
        return np.stack([k.score(name, columns[name]) - self.offset(i) for i, (name, k) in enumerate(self.knots)])

    def level(self, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """How far out the signal behind each row's score is, offset aside (``-log10`` of its share: what the score's
        words say); NaN where every signal is missing."""
        each = self._each(columns)
        filled = np.where(np.isnan(each), -np.inf, each)  # (signals, rows)
        behind = np.argmax(filled, axis=0)
        raw = each[behind, np.arange(each.shape[1])] + np.array([self.offset(int(i)) for i in behind])
        return np.where(np.isfinite(filled.max(axis=0)), raw, np.nan)

    def scores(self, columns: Mapping[str, np.ndarray], loops: np.ndarray | None = None) -> np.ndarray:
        """The score of many rows from their signals' columns (arrays of one length): the highest of the signals'
        scores (0 when every signal is missing). ``loops``: each row's ``repetition`` where a loop condition holds, 0
        where none does; such a row scores at least :attr:`most` ``+ log10(repetition)``, so that loops rank past
        every ordinary output and among themselves by how many times they repeat (3: +0.48, 10: +1)."""
        each = self._each(columns)  # (signals, rows)
        score = np.nan_to_num(np.max(np.where(np.isnan(each), -np.inf, each), axis=0), neginf=0.0)
        if loops is None:
            return score
        times = np.asarray(loops, dtype=np.float64)
        return np.where(times > 0, np.maximum(score, self.most + np.log10(np.maximum(times, 1.0))), score)

    def conditions(self) -> tuple[Condition, ...]:
        """The rule's conditions on the signals: each where its score, less its offset, reaches the threshold."""
        found = []
        for i, (name, k) in enumerate(self.knots):
            value = k.value_at(name, self.threshold + self.offset(i))
            if value is not None:
                found.append(Condition(name, "<=" if _direction(name) < 0 else ">=", value))
        return tuple(found)

    def to_json(self) -> dict[str, Any]:
        return {"threshold": self.threshold, **({"ordinary": self.ordinary} if self.ordinary else {}),
                "signals": {name: {"values": list(k.values), "tails": list(k.tails),
                                   **({"offset": self.offset(i)} if self.offset(i) else {})}
                            for i, (name, k) in enumerate(self.knots)}}

    @classmethod
    def from_json(cls, data: object) -> FlagScore:
        """A stored score; ``ValueError`` saying why when it is not one (each signal a known one, at most
        ``MAX_KNOTS`` finite knots, values rising toward its suspicious end, shares falling from 1 to above 0, an
        offset from 0 to ``MAX_OFFSET`` when there is one)."""
        if not (isinstance(data, dict) and isinstance(data.get("signals"), dict) and data["signals"]
                and _number(data.get("threshold"))):
            raise ValueError('a flag score is {"threshold": number, "signals": {name: {"values", "tails"}}}')
        knots, offsets = [], []
        for name, k in data["signals"].items():
            if name not in SIGNAL_COLUMNS or not isinstance(k, dict):
                raise ValueError(f"a flag score's signal is one of {', '.join(SIGNAL_COLUMNS)}")
            values, tails = k.get("values"), k.get("tails")
            if not (isinstance(values, list) and isinstance(tails, list) and 1 <= len(values) == len(tails)
                    <= MAX_KNOTS and all(map(_number, values + tails))):
                raise ValueError(f"{name}: values and tails are lists of up to {MAX_KNOTS} numbers, as long")
            knot = Knots(tuple(map(float, values)), tuple(map(float, tails)))
            if not (np.all(np.diff(knot.oriented(name)) > 0) and all(MIN_TAIL <= t <= 1 for t in knot.tails)
                    and np.all(np.diff(knot.tails) < 0)):
                raise ValueError(f"{name}: values rise toward its suspicious end as the shares fall, from 1 to "
                                 f"{MIN_TAIL:g} or more")
            offset = k.get("offset", 0.0)
            if not (_number(offset) and 0 <= offset <= MAX_OFFSET):
                raise ValueError(f"{name}: an offset is a number from 0 to {MAX_OFFSET:g}")
            knots.append((name, knot))
            offsets.append(float(offset))
        ordinary = data.get("ordinary")  # absent in older files
        if ordinary is not None and not (_number(ordinary) and float(ordinary).is_integer() and ordinary >= 1):
            raise ValueError("a flag score's ordinary is how many outputs its knots were read from, a whole number")
        return cls(tuple(knots), float(data["threshold"]), int(ordinary) if ordinary is not None else None,
                   tuple(offsets) if any(offsets) else ())


def _number(x: object) -> bool:
    """Whether parsed JSON ``x`` is a finite number a float holds (a 400-digit integer is not: never an
    ``OverflowError``)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


@dataclass(frozen=True)
class FlagRule:
    """"May be a hallucination": a row is flagged when any of ``conditions`` holds. ``score``: the score the
    conditions on signals threshold (None: the rule has none); ``origin``: the file it was read from, or
    ``"default"``; ``calibration``: how it was chosen (split, rates, command), as written; ``refused``: why the
    checkpoint's ``flag.json``, which is there, was not read (the rule is then the default). Two rules are equal when
    their conditions and scores are."""

    conditions: tuple[Condition, ...] = (LOOP_CONDITION,)
    score: FlagScore | None = None
    origin: str = field(default="default", compare=False)
    calibration: dict[str, Any] = field(default_factory=dict, compare=False)
    refused: str | None = field(default=None, compare=False)

    def describe(self) -> str:
        """The rule in words: ``repetition >= 6 or seq_logprob < -2.1``."""
        return " or ".join(str(c) for c in self.conditions) or "never"

    def to_json(self) -> dict[str, Any]:
        return {"any": [{"column": c.column, "op": c.op, "value": c.value} for c in self.conditions],
                "rule": self.describe(), **({"score": self.score.to_json()} if self.score else {}),
                "calibration": self.calibration}

    @classmethod
    def from_json(cls, data: object, origin: str = "default") -> FlagRule:
        """The rule of ``flag.json``'s object (``{"any": [{"column", "op", "value"}, ...], "score": {...}}``), or of
        a table manifest's ``flag_rule``; ``ValueError`` saying why in one short line when it is not one (more than
        ``MAX_CONDITIONS`` conditions, a column the table does not have, a value no float holds, ...)."""
        if not isinstance(data, dict) or not isinstance(data.get("any"), list):
            raise ValueError('a flag rule is a JSON object with a list "any" of {"column", "op", "value"}')
        if len(data["any"]) > MAX_CONDITIONS:
            raise ValueError(f"a flag rule has at most {MAX_CONDITIONS} conditions, not {len(data['any']):,}")
        conditions = []
        for c in data["any"]:
            if not (isinstance(c, dict) and isinstance(c.get("column"), str) and isinstance(c.get("op"), str)
                    and _number(c.get("value"))):
                raise ValueError('a condition is {"column": name, "op": "<=", "value": a finite number}')
            if c["column"] not in COLUMNS:
                raise ValueError(f"a condition's column is one of the table's, not {c['column'][:40]!r}")
            conditions.append(Condition(c["column"], c["op"], float(c["value"])))
        score = FlagScore.from_json(data["score"]) if "score" in data else None
        calibration = data.get("calibration")
        return cls(tuple(conditions), score, origin, calibration if isinstance(calibration, dict) else {})


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


def flag_score(row: Mapping[str, Any], rule: FlagRule = DEFAULT_RULE) -> float | None:
    """``row``'s score under ``rule`` (:class:`FlagScore`; at least ``rule.score.threshold`` exactly when flagged);
    None for a rule without a score."""
    if rule.score is None:
        return None
    signals = {name for name, _ in rule.score.knots}
    loops = any(c.holds(row) for c in rule.conditions if c.column not in signals)
    values = {name: _value(row, name) for name in signals}
    columns = {name: np.array([np.nan if x is None else x]) for name, x in values.items()}
    times = (_value(row, "repetition") or 1.0) if loops else 0.0
    return round(float(rule.score.scores(columns, np.array([times]))[0]), 6)


def reasons(row: Mapping[str, Any], rule: FlagRule = DEFAULT_RULE) -> list[Condition]:
    """The conditions of ``rule`` that hold for ``row`` (flagged when there is any)."""
    return [c for c in rule.conditions if c.holds(row)]
def _side(op: str) -> str:
    return {"<": "below", "<=": "at most", ">": "above", ">=": "at least"}[op]


def condition_text(condition: Condition) -> str:
    """One condition in plain words, from its column's description (:data:`~transformer.interpret.columns.COLUMNS`):
    ``the mean log-probability per output piece is below -4.11``; a true/false column: what holds when true."""
    column = COLUMNS.get(condition.column)
    if column is None or not column.phrase:
        return str(condition)
    if column.format == "bool":
        holds_when_true = condition.op in (">=", ">") and 0 < condition.value <= 1
        return column.phrase if holds_when_true else str(condition)
    return f"{column.phrase} is {_side(condition.op)} {column.value_text(condition.value)}"


def rule_text(rule: FlagRule) -> str:
    """``rule`` in plain words: its conditions joined by "or"."""
    return " or ".join(condition_text(c) for c in rule.conditions) or "never"


def reason_text(condition: Condition, row: Mapping[str, Any]) -> str:
    """One condition that holds, in plain words, with the row's value and what it points to: ``part of the source
    may be left untranslated: the model's surprise at the translation ending there is 5.31 (at least 3.20)``."""
    column = COLUMNS.get(condition.column)
    x = _value(row, condition.column)
    if column is None or not column.phrase or x is None:
        return f"{condition.column} = {x if x is None else format(x, 'g')} ({condition})"
    said = condition_text(condition) if column.format == "bool" else (
        f"{column.phrase} is {column.value_text(x)} ({_side(condition.op)} {column.value_text(condition.value)})")
    return f"{column.suggests}: {said}" if column.suggests else said


def score_text(row: Mapping[str, Any], rule: FlagRule) -> str | None:
    """``row``'s score in plain words: ``its most unusual signal is as far out as 1 in 250 of the model's ordinary
    outputs (flag score 2.40; flagged from 2.18)``, the share that signal's own (its offset aside; a share of a tenth
    or more as a percentage: ``an ordinary one: 45% of ... are as far out``); never a rarer
    share than was counted: past the last knot, or rarer than 1 in the count of ordinary outputs
    (``FlagScore.ordinary``), ``further out than every one of the model's 8,080 ordinary outputs ...`` (older files,
    without the count: ``further out than all ...``); a loop is further out than all. None for a rule without a
    score."""
    score = flag_score(row, rule)
    if score is None or rule.score is None:
        return None
    signals = {name for name, _ in rule.score.knots}
    loops = any(c.holds(row) for c in rule.conditions if c.column not in signals)
    columns = {name: np.array([np.nan if _value(row, name) is None else _value(row, name)]) for name in signals}
    level = float(rule.score.level(columns)[0])
    level = score if math.isnan(level) else level  # no signal: the score (0)
    rarest = max(float(k.levels()[-1]) for _, k in rule.score.knots)
    count = rule.score.ordinary
    outputs = "ordinary outputs on the validation set (its own translations and the references)"
    if loops or level > rarest + 1e-9 or (count and 10 ** level > count):
        far = f"further out than every one of the model's {count:,} {outputs}" if count else (
            f"further out than all the model's {outputs}")
    elif level < 1:  # a share of a tenth or more: a percentage ("1 in 1" says nothing)
        return (f"its most unusual signal is an ordinary one: {10 ** -level:.0%} of the model's {outputs} are as far "
                f"out (flag score {score:.2f}; flagged from {rule.score.threshold:.2f})")
    else:
        far = f"as far out as 1 in {10 ** level:,.0f} of the model's {outputs}"
    return f"its most unusual signal is {far} (flag score {score:.2f}; flagged from {rule.score.threshold:.2f})"


def flag_rule(checkpoint_dir: str | Path | None) -> FlagRule:
    """The rule stored beside a checkpoint (``<dir>/flag.json``), else :data:`DEFAULT_RULE` (looping outputs only):
    also for a Hub id or a missing directory or file. A ``flag.json`` that is there but not a rule (not a regular
    file, over ``MAX_FLAG_BYTES``, not a rule :meth:`FlagRule.from_json` reads) gives the default rule with
    ``refused``: why."""
    if checkpoint_dir is None:
        return DEFAULT_RULE
    path = Path(checkpoint_dir) / FLAG_FILE
    try:
        return FlagRule.from_json(read_json(path, MAX_FLAG_BYTES), str(path))
    except FileNotFoundError:
        return DEFAULT_RULE
    except (OSError, ValueError) as err:
        return FlagRule(refused=str(err)[:200] or type(err).__name__)


def write_flag_rule(checkpoint_dir: str | Path, rule: FlagRule) -> Path:
    """Write ``rule`` as ``<dir>/flag.json`` (what :func:`flag_rule` reads back)."""
    path = Path(checkpoint_dir) / FLAG_FILE
    path.write_text(json.dumps(rule.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
