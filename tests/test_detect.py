"""``python -m transformer.detect``: the constructed set, the ROC AUC against counting pairs, the rule's choice
against an enumeration written with ``flag`` itself, and the command end to end on the tiny corpus."""

from __future__ import annotations

import itertools
import json
import random
import shutil

import numpy as np
import pytest

from transformer.interpret import detect
from transformer.interpret.signals import FLAG_FILE, LOOP_CONDITION, Condition, FlagRule, flag, flag_rule, looping


def test_roc_auc_is_the_share_of_positive_negative_pairs_ranked_right():
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(2, 30)
        scores = [rng.choice([0.0, 0.5, 1.0, rng.random()]) for _ in range(n)]  # many ties
        labels = [rng.randint(0, 1) for _ in range(n)]
        pos = [s for s, y in zip(scores, labels) if y]
        neg = [s for s, y in zip(scores, labels) if not y]
        if not pos or not neg:
            assert np.isnan(detect.roc_auc(scores, labels))
            continue
        pairs = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
        assert detect.roc_auc(scores, labels) == pytest.approx(pairs / (len(pos) * len(neg)))


def test_the_swap_moves_every_reference_and_the_nonsense_is_drawn_per_seed():
    for n in (2, 3, 10, 101):
        perm = detect.derangement(n, seed=n)
        assert sorted(perm) == list(range(n)) and all(i != j for i, j in enumerate(perm))
    a, b = detect.nonsense_inputs(5, 0), detect.nonsense_inputs(5, 1)
    assert a == detect.nonsense_inputs(5, 0) and len(a) == 15 and not set(a) & set(b)
    assert all(x.split()[0] in {"SKU", "REF", "ID", "LOT", "NR"} for x in a[:5])
    assert all(x.replace(" ", "").isdigit() for x in a[5:10])
    assert all(len(set(x.split())) == 1 for x in a[10:])
    assert len(detect.GERMAN) == 80 and len(set(detect.GERMAN)) == 80


def synthetic_rows(seed: int) -> list[dict]:
    """Rows of every kind with made-up signals: positives lower in log-probability and source share."""
    rng = random.Random(seed)
    rows = []
    for kind, n, shift in (("translation", 60, 0.0), ("reference", 60, 0.3), ("swapped", 30, 1.5),
                           ("out_of_domain", 10, 1.0), ("looping", 8, 0.5), ("nonsense", 4, 0.5)):
        for _ in range(n):
            text = "la " * 8 if kind == "looping" else "ein hund"
            rows.append({"kind": kind, "translation": text, "repetition": 8 if kind == "looping" else 1,
                         "seq_logprob": rng.gauss(-0.5 - shift, 0.6), "source_share": rng.gauss(0.7 - shift / 10, 0.05),
                         "source_share_min": rng.gauss(0.5, 0.1), "eos_attention": rng.gauss(0.1, 0.03)})
    return rows


def test_the_rule_is_the_best_combination_within_the_budget(monkeypatch):
    monkeypatch.setattr(detect, "PERCENTILES", (1.0, 5.0))
    rows = synthetic_rows(0)
    budget = 0.05
    rule, info = detect.choose_rule(rows, budget)
    kinds = [r["kind"] for r in rows]

    def rates(r: FlagRule) -> dict[str, float]:
        return {k: np.mean([flag(row, r) for row, kind in zip(rows, kinds) if kind == k]) for k in set(kinds)}

    def recall(r: FlagRule) -> float:
        got = rates(r)
        return float(np.mean([got[k] for k in detect.POSITIVES]))

    got = rates(rule)
    assert rule.conditions[0] == LOOP_CONDITION and got["looping"] == 1.0
    assert got["translation"] <= budget and got["reference"] <= budget
    assert info["mean_recall"] == pytest.approx(recall(rule))
    negatives = [r for r, k in zip(rows, kinds) if k in detect.NEGATIVES]
    options = []
    for name, op in detect.CANDIDATES.items():  # every threshold the grid holds, written out
        values = [r[name] for r in negatives]
        options.append([None] + [Condition(name, op, round(float(np.percentile(values, p if op == "<" else 100 - p)),
                                                                4)) for p in (1.0, 5.0)])
    best = 0.0
    for combo in itertools.product(*options):
        candidate = FlagRule((LOOP_CONDITION, *(c for c in combo if c is not None)))
        r = rates(candidate)
        if r["translation"] <= budget and r["reference"] <= budget:
            best = max(best, recall(candidate))
    assert recall(rule) == pytest.approx(best) and best > 0.5


def test_the_command_writes_a_rule_the_checkpoint_then_reads(tiny_checkpoint, tiny_corpus, tmp_path, capsys):
    path = tmp_path / "tiny"
    shutil.copytree(tiny_checkpoint, path)
    assert flag_rule(path).origin == "default"
    code = detect.main(["--checkpoint", str(path), "--data-dir", str(tiny_corpus), "--split", "test", "--limit", "12",
                        "--nonsense", "2", "--beam", "2", "--write", "--no-progress", "--rows",
                        str(tmp_path / "rows.jsonl")])
    assert code == 0
    rule = flag_rule(path)
    assert rule.origin == str(path / FLAG_FILE) and rule.conditions[0] == LOOP_CONDITION
    held = rule.calibration["held_back"]
    assert held["split"] == "test" and held["counts"]["translation"] == 12 and held["counts"]["swapped"] == 12
    assert held["counts"]["out_of_domain"] == 40 and held["counts"]["looping"] + held["counts"]["nonsense"] == 6
    assert set(held["auc"]) == {"seq_logprob", "source_share", "source_share_min", "eos_attention", "repetition",
                                "flag"}
    out = capsys.readouterr().out
    assert "rule (chosen on val)" in out and "| `seq_logprob` |" in out
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * (12 * 3 + 40 + 6)
    for r in rows:
        assert r["flag"] == flag(r, rule)
        assert (r["kind"] == "looping") == (r["kind"] in ("looping", "nonsense") and looping(r["translation"]))
    swapped = [r for r in rows if r["kind"] == "swapped" and r["split"] == "test"]
    refs = {r["source"]: r["translation"] for r in rows if r["kind"] == "reference" and r["split"] == "test"}
    assert all(refs[r["source"]] != r["translation"] or list(refs.values()).count(r["translation"]) > 1
               for r in swapped)


def test_the_command_says_what_is_wrong(tmp_path, capsys):
    assert detect.main(["--data-dir", str(tmp_path), "--checkpoint", str(tmp_path)]) == 1
    assert "error:" in capsys.readouterr().err
