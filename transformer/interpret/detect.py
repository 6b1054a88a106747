"""A checkpoint's hallucination ``flag`` chosen on val and measured on a held-back constructed set of every kind of
error: each signal's ROC AUC (:func:`roc_auc`, :func:`evaluate`), the rule chosen within a budget
(:func:`choose_rule`, :func:`calibrated_rule`), the budget chosen on val by halves (:func:`choose_budget`) and its
report as a table (:func:`markdown`). The command,
``python -m transformer.detect``, is ``transformer/detect.py``; its help says how the rule is chosen.
"""

from __future__ import annotations

import itertools
import math
import re
import zlib
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from ..decoding.settings import DecodeSettings
from .columns import COLUMNS, SIGNAL_COLUMNS
from .constructed import (
    NEGATIVES,
    NONSENSE_PER_KIND,
    PAIR_KIND_NAMES,
    PAIR_KINDS,
    POSITIVES,
    VARIANT_NAMES,
    VARIANTS,
)
from .flagging import Condition, FlagRule, FlagScore, Knots, flag, flag_score, knots_of

# higher = more likely a hallucination: each column's suspicious end (COLUMNS), fixed before looking at any data
DIRECTION = {name: -1.0 if COLUMNS[name].direction == "low" else 1.0 for name in SIGNAL_COLUMNS}
MEASURED = tuple(name for name in SIGNAL_COLUMNS if name != "hit_max_len")  # the signals whose AUC is reported
CANDIDATES = {name: "<" if DIRECTION[name] < 0 else ">" for name in MEASURED if name != "repetition"}
REPEATS = (3, 4, 5, 6)  # repetition thresholds tried (whole numbers)
OFFSETS = (0.0, 0.5)  # each signal's offset in a score tried (FlagScore.offsets: 0.5 asks for a share about 3 times
# smaller than the others'), at least one signal of a score without one: a small budget need not go to one signal
GOAL = 0.05  # the most of any negative kind, in any variant, the rule may flag on sentences it was not chosen on
CONFIDENCE = 0.95  # how sure choose_budget must be (a one-sided bound) that the share flagged on sentences never
# seen is within GOAL: each half of val holds about 500 sentences a variant, so its share is itself a sample
BUDGETS = (0.04, 0.035, 0.03, 0.025, 0.02)  # the shares of each negative kind, in each variant, of the calibration
# split the rule may flag, tried largest first (choose_budget); a smaller one leaves room for sentences never seen
BUDGET = BUDGETS[0]  # choose_rule's default
FLOORS = {"detached": 0.95, "unrelated": 0.95, "loop": 1.0}  # the least share of these kinds a rule must flag on
# the calibration split (where one can: choose_rule), so that the easy kinds stay found when the budget is small


# ----------------------------------------------------------------------------------------------- measuring


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """ROC AUC by the rank formula (Mann-Whitney U; ties count one half): the chance that a random positive scores
    above a random negative. NaN without both classes."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return float("nan")
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]  # the mean 1-based rank of each tied group
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def _column(rows: Sequence[dict[str, Any]], name: str) -> np.ndarray:
    return np.array([float(r[name]) if r.get(name) is not None else np.nan for r in rows], dtype=np.float64)


def score_of(rows: Sequence[dict[str, Any]], name: str) -> np.ndarray:
    """A signal oriented so that higher means more likely a hallucination (``DIRECTION``), NaN (no step) lowest."""
    x = _column(rows, name) * DIRECTION[name]
    return np.nan_to_num(x, nan=-np.inf)


def _rounded(x: float) -> float | None:
    """``x`` to 4 decimals; None for NaN (JSON has no NaN)."""
    return None if np.isnan(x) else round(float(x), 4)


def _variants(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    return np.array([r.get("variant", "plain") for r in rows])


def evaluate(rows: Sequence[dict[str, Any]], rule: FlagRule) -> dict[str, Any]:
    """Each signal's ROC AUC and the flag's, for all positives pooled (``all``) and for each positive kind, always
    against all the negatives (every variant); the share flagged of each kind (recall for a positive kind, the
    false-positive rate for a negative one, its sources as in the split) and the counts; ``variants``: the share
    flagged of each negative kind and how many, per way the sources are written."""
    flags = np.array([flag(r, rule) for r in rows], dtype=np.float64)
    scores = np.array([flag_score(r, rule) if rule.score else np.nan for r in rows], dtype=np.float64)
    kinds, variants = np.array([r["kind"] for r in rows]), _variants(rows)
    negative = np.isin(kinds, NEGATIVES)
    groups = {"all": np.isin(kinds, POSITIVES), **{k: kinds == k for k in POSITIVES}}
    auc: dict[str, dict[str, float | None]] = {}
    for name in (*MEASURED, "flag_score", "flag"):
        score = flags if name == "flag" else scores if name == "flag_score" else score_of(rows, name)
        auc[name] = {g: _rounded(roc_auc(score[pos | negative], pos[pos | negative])) for g, pos in groups.items()}
    mine = {k: (kinds == k) & ((variants == "plain") | (k not in NEGATIVES)) for k in PAIR_KINDS}
    counts = {k: int(mine[k].sum()) for k in PAIR_KINDS}
    flagged = {k: round(float(flags[mine[k]].mean()), 4) if counts[k] else None for k in PAIR_KINDS}
    by_variant = {}
    for v in (v for v in VARIANTS if v != "plain" and (variants == v).any()):
        groups = {k: (kinds == k) & (variants == v) for k in NEGATIVES}
        by_variant[v] = {"flagged": {k: round(float(flags[g].mean()), 4) if g.any() else None
                                     for k, g in groups.items()},
                         "counts": {k: int(g.sum()) for k, g in groups.items()}}
    loop = kinds == "loop"
    return {"auc": auc, "flagged": flagged, "counts": counts, "variants": by_variant,
            "loops_flagged": f"{int(flags[loop].sum())}/{int(loop.sum())}"}


def score_signals(rows: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> dict[str, Knots]:
    """Each signal's (``names``, default ``CANDIDATES``) :class:`~transformer.interpret.flagging.Knots` from the
    ordinary rows (``NEGATIVES``: the model's own translations and the references, in every variant) of ``rows``; a
    signal they have no value of is left out."""
    ordinary = np.isin(np.array([r["kind"] for r in rows]), NEGATIVES)
    found = {}
    for name in CANDIDATES if names is None else names:
        values = _column(rows, name)[ordinary]
        if (~np.isnan(values)).any():
            found[name] = knots_of(name, values)
    return found


def _threshold(score: np.ndarray, base: np.ndarray, index: np.ndarray, negatives: Sequence[int],
               sizes: np.ndarray, budget: float) -> float | None:
    """The lowest threshold, in thousandths, at which ``base | score >= threshold`` flags at most ``budget`` of each
    negative kind; None when ``base`` alone flags more."""
    floor = -np.inf
    for k in negatives:
        mine = index == k
        room = int(np.floor(budget * sizes[k] + 1e-9)) - int(base[mine].sum())
        if room < 0:
            return None
        rest = np.sort(score[mine & ~base])[::-1]
        if room < len(rest):
            floor = max(floor, float(rest[room]))  # the highest score that must stay unflagged
    return 0.0 if floor == -np.inf else round(math.floor(floor * 1000 + 1e-6) / 1000 + 0.001, 3)


def choose_rule(rows: Sequence[dict[str, Any]], budget: float = BUDGET, floors: dict[str, float] | None = None,
                offsets: Sequence[float] = OFFSETS) -> tuple[FlagRule, dict[str, Any]]:
    """The rule: ``repetition >= r`` (one of ``REPEATS``, or none), ``hit_max_len`` (or not), and a
    :class:`~transformer.interpret.flagging.FlagScore` over a set of the ``CANDIDATES`` signals (their knots from the
    negatives of ``rows``, every variant; each signal's offset one of ``offsets``, one at least 0) at the lowest
    threshold that flags at most ``budget`` of the translations and at most ``budget`` of the references, each
    variant of them on its own (a row's ``variant``: how its source is written). Of these, the one with the highest
    mean recall over the positive kinds present (ties: the fewest conditions, then the fewest offsets, then the
    fewest negatives flagged), among those that flag at least ``floors`` (default ``FLOORS``) of each kind named
    there when any does (``floors_met`` says whether)."""
    floors = FLOORS if floors is None else floors
    kinds, variants = np.array([r["kind"] for r in rows]), _variants(rows)
    groups = np.array([f"{k} {v}" if k in NEGATIVES else k for k, v in zip(kinds, variants)])  # a negative's variant
    names = [*sorted({g for g, k in zip(groups, kinds) if k in NEGATIVES}),
             *(k for k in POSITIVES if (kinds == k).any())]
    index = np.array([names.index(g) if g in names else len(names) for g in groups])
    sizes = np.bincount(index, minlength=len(names) + 1)[:len(names)].astype(np.float64)
    negatives = [i for i, g in enumerate(names) if g not in POSITIVES]
    positives = [i for i, g in enumerate(names) if g in POSITIVES]
    least = [(names.index(k), share) for k, share in floors.items() if k in names]  # (index, least share flagged)
    knots = score_signals(rows)
    ordinary = int(np.isin(kinds, NEGATIVES).sum())
    scored = {name: np.nan_to_num(k.score(name, _column(rows, name)), nan=-np.inf) for name, k in knots.items()}
    loops_options: list[tuple[tuple[Condition, ...], np.ndarray]] = []
    cut = np.array([bool(r.get("hit_max_len")) for r in rows])
    for repeats in (None, *REPEATS):
        rep = Condition("repetition", ">=", repeats) if repeats else None
        fires = np.array([rep.holds(r) for r in rows]) if rep else np.zeros(len(rows), dtype=bool)
        for with_cut in (False, True):
            conditions = tuple(c for c in (rep, Condition("hit_max_len", ">=", 1) if with_cut else None) if c)
            loops_options.append((conditions, fires | cut if with_cut else fires))
    best, best_key = FlagRule(()), None
    for k in range(1, len(knots) + 1):
        for chosen, shifts in ((c, o) for c in itertools.combinations(knots, k)
                                for o in itertools.product(offsets, repeat=k) if min(o) == 0):
            score = np.max([scored[name] - o for name, o in zip(chosen, shifts)], axis=0)
            for base, base_fires in loops_options:
                threshold = _threshold(score, base_fires, index, negatives, sizes, budget)
                if threshold is None:
                    continue
                rule_score = FlagScore(tuple((name, knots[name]) for name in chosen), threshold, ordinary,
                                       tuple(shifts) if any(shifts) else ())
                fires = base_fires | (score >= threshold)
                rates = np.bincount(index, weights=fires, minlength=len(names) + 1)[:len(names)] / sizes
                recall = float(rates[positives].mean()) if positives else 0.0
                conditions = (*base, *rule_score.conditions())
                met = all(rates[i] >= share - 1e-9 for i, share in least)
                key = (met, round(recall, 6), -len(conditions), -sum(o > 0 for o in shifts),
                       -float(rates[negatives].sum()))
                if best_key is None or key > best_key:
                    best, best_key = FlagRule(conditions, rule_score), key
    return best, {"mean_recall": best_key[1] if best_key else None, "floors_met": bool(best_key and best_key[0])}


def half_of(row: dict[str, Any]) -> int:
    """Which half (0 or 1) of a split a row falls in, by its source's words (lower case, punctuation and spaces set
    aside): a sentence and the ways it is typed (the variants) always in the same half."""
    words = re.sub(r"[\W_]+", " ", str(row.get("source", "")).casefold()).strip()
    return zlib.crc32(words.encode("utf-8")) % 2


def upper_bound(flagged: int, n: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided Wilson score upper bound on a share from ``flagged`` of ``n``: the largest true share under
    which seeing at most ``flagged`` is still as likely as ``1 - confidence`` (normal approximation). 1.0 for
    ``n == 0``."""
    if n <= 0:
        return 1.0
    z, p = NormalDist().inv_cdf(confidence), flagged / n
    centre, spread = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


def choose_budget(rows: Sequence[dict[str, Any]], budgets: Sequence[float] = BUDGETS, goal: float = GOAL,
                  confidence: float = CONFIDENCE,
                  offsets: Sequence[float] = OFFSETS) -> tuple[float, tuple[float, ...], list[dict[str, Any]]]:
    """The budget and the offsets tried for :func:`choose_rule` on ``rows`` (the calibration split), chosen on them
    alone by halves: the first of each of ``budgets`` (largest first) with ``offsets``, then without (a rule with
    offsets fits its half more closely), whose rule, chosen on either half (:func:`half_of`), flags of each negative
    kind in each variant of the other half a share whose :func:`upper_bound` (at ``confidence``) is within ``goal``:
    a rule meets its budget on the sentences it was chosen on and flags more of others, and the other half is a
    sample too. The smallest budget without offsets when none does. Also each one tried: the worst share flagged on
    an other half (by its bound), of which kind and variant, how many of how many, and the bound."""
    halves = np.array([half_of(r) for r in rows])
    tried: list[dict[str, Any]] = []
    plain = (0.0,)
    for budget, tries in ((b, o) for b in sorted(budgets, reverse=True)
                          for o in dict.fromkeys((tuple(offsets), plain))):
        worst: tuple[float, float, int, int, str, str] = (-1.0, 0.0, 0, 0, "", "")
        for h in (0, 1):
            rule, _ = choose_rule([r for r, x in zip(rows, halves) if x == h], budget, offsets=tries)
            other = [r for r, x in zip(rows, halves) if x != h]
            kinds, variants = np.array([r["kind"] for r in other]), _variants(other)
            fires = np.array([flag(r, rule) for r in other], dtype=bool)
            for kind in NEGATIVES:
                for variant in VARIANTS:
                    mine = (kinds == kind) & (variants == variant)
                    if mine.any():
                        k, n = int(fires[mine].sum()), int(mine.sum())
                        worst = max(worst, (upper_bound(k, n, confidence), k / n, k, n, kind, variant))
        bound, share, k, n, kind, variant = worst
        tried.append({"budget": budget, "offsets": list(tries), "worst_other_half": round(share, 4), "flagged": k,
                      "of": n, "upper_bound": round(bound, 4), "confidence": confidence, "kind": kind,
                      "variant": variant})
        if bound <= goal:
            return budget, tries, tried
    return min(budgets), plain, tried


# ----------------------------------------------------------------------------------------------- the command


def markdown(report: dict[str, Any]) -> str:
    """An evaluation (:func:`evaluate`) as a Markdown table: one row per kind (how many, the share flagged, each
    signal's ROC AUC against all the negatives), each negative kind again per way its sources are written, the
    pooled positives last."""
    names = [*MEASURED, "flag_score", "flag"]
    lines = ["| kind | n | flagged | " + " | ".join(f"`{n}` AUC" for n in names) + " |",
             "|---|---|---|" + "---|" * len(names)]

    def cell(x: float | None, share: bool = False) -> str:
        return "–" if x is None else f"{x:.1%}" if share else f"{x:.3f}"

    for kind in (*NEGATIVES, *POSITIVES, "copy"):
        n = report["counts"].get(kind, 0)
        aucs = [cell(report["auc"][name].get(kind)) if kind in POSITIVES else "" for name in names]
        flagged = cell(report["flagged"].get(kind), True)
        lines.append(f"| {PAIR_KIND_NAMES[kind]} | {n} | {flagged} | " + " | ".join(aucs) + " |")
        if kind == NEGATIVES[-1]:  # then the negatives again, their sources as people type them
            lines += [f"| {PAIR_KIND_NAMES[k]}, {VARIANT_NAMES[v]} | {got['counts'][k]} | "
                      f"{cell(got['flagged'][k], True)} | " + " | ".join([""] * len(names)) + " |"
                      for v, got in report.get("variants", {}).items() for k in NEGATIVES]
    lines.append("| **all positives pooled** | " + str(sum(report["counts"].get(k, 0) for k in POSITIVES)) + " | | "
                 + " | ".join(cell(report["auc"][name]["all"]) for name in names) + " |")
    return "\n".join(lines)


def calibrated_rule(sets: dict[str, list[dict[str, Any]]], splits: dict[str, tuple[list[str], list[str]]],
                    calibration_split: str, held_back_split: str, settings: DecodeSettings, *,
                    budget: float | None = None, seed: int = 0, nonsense: int = NONSENSE_PER_KIND,
                    seconds: float = 0.0, command: str = "") -> FlagRule:
    """The rule chosen on the calibration split's constructed set (``sets``, by split; ``splits``: their sentences)
    within ``budget`` (None: :func:`choose_budget`'s budget and offsets, on the calibration split by halves; a
    budget given: ``OFFSETS``), with what ``flag.json``
    records beside it in ``calibration``: both reports (``report`` on the calibration split, ``held_back`` on the
    other), the decoding, the seed and ``command``, the line that repeats the run."""
    tried: list[dict[str, Any]] = []
    if budget is None:
        budget, offsets, tried = choose_budget(sets[calibration_split])
    else:
        offsets = OFFSETS
    rule, chosen = choose_rule(sets[calibration_split], budget, offsets=offsets)
    calibration = {"split": calibration_split, "budget": budget, "offsets": list(offsets), "goal": GOAL,
                   "budget_by_halves": tried,
                   "variants": list(VARIANTS),
                   **chosen, "report": evaluate(sets[calibration_split], rule)}
    held_back = {"split": held_back_split, **evaluate(sets[held_back_split], rule)}
    return FlagRule(rule.conditions, rule.score, calibration={
        **calibration, "held_back": held_back, "beam": settings.beam_size, "alpha": settings.alpha,
        "seed": seed, "nonsense_per_kind": nonsense,
        "sentences": {k: len(v[0]) for k, v in splits.items()}, "command": command,
        "seconds": round(seconds, 1), "directions": DIRECTION,
        "note": "flagged when any condition holds: a loop condition, or a signal whose score (how far out it is "
                "against the calibration split's negatives: the model's own translations and the references, their "
                "sources as in the split and as people type them, the variants) "
                "reaches the threshold; AUCs and the share flagged of each kind of "
                "held_back on the constructed test set (transformer.detect, transformer.interpret.constructed)"})


def flagged_rows(sets: dict[str, list[dict[str, Any]]], rule: FlagRule) -> list[dict[str, Any]]:
    """Every row of the constructed sets with its split, and the rule's ``flag`` and ``flag_score`` of it."""
    return [{"split": split, **r, "flag": flag(r, rule), "flag_score": flag_score(r, rule)}
            for split, rows in sets.items() for r in rows]
