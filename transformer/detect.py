"""``python -m transformer.detect``: a checkpoint's hallucination ``flag`` chosen on val, measured on a held-back
constructed set of every kind of error.

The constructed set of each split (:mod:`transformer.interpret.constructed`, built independently of the signals):
the model's own translations and the references (negatives); detached references, unrelated German, one noun
swapped and one clause dropped (in the model's translation and in the reference), loops (a word n-gram 3 times back
to back, or cut at the length limit) and fluent output on nonsense input (positives). Each pair gets
:func:`~transformer.interpret.signals.pair_signals`, ``repetition`` and ``hit_max_len``.

The negatives come in each way people type a source (``VARIANTS``: as in the split, without the final punctuation,
starting in lower case, with extra spaces). On the calibration split (val) the rule is chosen: ``repetition >= r``
(r one of ``REPEATS``, or none), the output cut at the length limit (or not), and a score over some of the signals
(:class:`~transformer.interpret.flagging.FlagScore`: how far out the most unusual of them is against all the
negatives) past a threshold, the combination that finds the most of the positive kinds (their mean recall, each
kind weighing the same) while flagging at most ``--budget`` of the model's own translations and at most
``--budget`` of the references, in each variant, and at least 95% of the detached references and of the unrelated
German and every loop (``FLOORS``) where a rule can. The budget itself is chosen on val alone (``choose_budget``):
the largest of ``BUDGETS`` whose rule, chosen on one half of val, flags of each of them on the other half a share
whose upper bound (``upper_bound``: one-sided, ``CONFIDENCE``) is within ``GOAL`` (5%): a rule chosen to touch its
budget flags more of sentences it never saw, and a half of val is itself a sample. Each budget is tried with a
signal's offset (``OFFSETS``: how much further out than the others it must be to count), then without.

On the held-back split (test_2016_flickr: other sentences) the command reports each signal's ROC AUC per kind, the
score's (``flag_score``) and the flag's, the flag's recall per kind and its false-positive rate on translations and
references, and writes the rule with both reports to ``<checkpoint>/flag.json`` (``--write``), where
:func:`~transformer.interpret.flagging.flag_rule` reads it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .checkpoint.files import CheckpointError
from .cli import add_decoding_arguments, non_negative
from .decoding.settings import DecodeSettings
from .evaluation.data import DataError, read_parallel
from .interpret.constructed import GERMAN, NONSENSE_PER_KIND, constructed_set
from .interpret.detect import BUDGETS, CONFIDENCE, GOAL, calibrated_rule, flagged_rows, markdown
from .interpret.flagging import write_flag_rule
from .translator import load

OUTPUT_ONLY = {"--rows": 1, "--no-progress": 0, "--json": 0}  # options that change no number, and their values


def recorded_command(argv: Sequence[str]) -> str:
    """The command that repeats a run, as ``flag.json`` records it: ``argv`` without the options that only say where
    output goes (``OUTPUT_ONLY``: a ``--rows`` file is a path on one machine, often a temporary one)."""
    kept, skip = [], 0
    for arg in argv:
        name = arg.split("=", 1)[0]
        if skip:
            skip -= 1
        elif name in OUTPUT_ONLY:
            skip = OUTPUT_ONLY[name] if "=" not in arg else 0
        else:
            kept.append(arg)
    return " ".join(["python -m transformer.detect", *kept])


def budget_arg(text: str) -> float:
    """``--budget``: a share between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"a share between 0 and 1 (0.04 is 4 percent), not {text[:24]!r}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m transformer.detect", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_decoding_arguments(p)
    p.add_argument("--calibration-split", default="val", help="the split the rule is chosen on (default: val)")
    p.add_argument("--budget", type=budget_arg, default=None,
                   help="the most of the calibration split's normal translations (and references) the rule may flag, "
                        "in each variant (default: chosen on the calibration split by halves, the largest of "
                        f"{', '.join(f'{100 * b:g}%%' for b in BUDGETS)} that keeps {100 * GOAL:g}%% on the other "
                        f"half, by a {100 * CONFIDENCE:g}%% upper bound)")
    p.add_argument("--limit", type=non_negative, default=0, help="only the first N sentences of each split (0: all)")
    p.add_argument("--nonsense", type=non_negative, default=NONSENSE_PER_KIND,
                   help="nonsense inputs of each kind (codes, numbers, syllables) per split")
    p.add_argument("--seed", type=int, default=0, help="the calibration set's seed (the held-back set's: seed + 1)")
    p.add_argument("--write", action="store_true", help="write the rule and both reports to <checkpoint>/flag.json")
    p.add_argument("--rows", help="write every row of both sets (JSON lines) to this file")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        splits = {}
        for split in (args.calibration_split, args.split):
            sources, refs = read_parallel(args.data_dir, split, args.src, args.tgt)
            splits[split] = (sources[: args.limit], refs[: args.limit]) if args.limit else (sources, refs)
        tr = load(args.checkpoint, device=args.device)
    except (DataError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.write and not Path(args.checkpoint).is_dir():
        print(f"error: --write needs a checkpoint directory, not {args.checkpoint}", file=sys.stderr)
        return 1
    settings = tr.settings(DecodeSettings(beam_size=args.beam, alpha=args.alpha))
    start = time.perf_counter()
    sets = {}
    for part, split in enumerate((args.calibration_split, args.split)):
        sources, refs = splits[split]
        sets[split] = constructed_set(tr, sources, refs, GERMAN[part::2], args.seed + part, settings,
                                      args.batch_size, args.nonsense, progress=not args.no_progress)
    return finish(args, settings, splits, sets, time.perf_counter() - start, argv)


def finish(args: argparse.Namespace, settings: DecodeSettings, splits: dict[str, tuple[list[str], list[str]]],
           sets: dict[str, list[dict[str, Any]]], seconds: float, argv: Sequence[str] | None = None) -> int:
    """The command's second half, from both constructed sets (``sets``, by split; ``splits``: their sentences):
    the rule chosen on the calibration split, both reports printed, the rows and ``flag.json`` written as asked."""
    rule = calibrated_rule(sets, splits, args.calibration_split, args.split, settings, budget=args.budget,
                           seed=args.seed, nonsense=args.nonsense, seconds=seconds,
                           command=recorded_command(sys.argv[1:] if argv is None else argv))
    print(f"rule (chosen on {args.calibration_split}): {rule.describe()}")
    reports = ((args.calibration_split, rule.calibration["report"]), (args.split, rule.calibration["held_back"]))
    for name, report in reports:
        print(f"\n{name}: loops flagged {report['loops_flagged']}")
        print(markdown(report))
    if args.rows:
        with open(args.rows, "w", encoding="utf-8") as f:
            for row in flagged_rows(sets, rule):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    if args.write:
        print(f"\nwrote {write_flag_rule(args.checkpoint, rule)}")
    if args.json:
        print(json.dumps(rule.to_json(), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
