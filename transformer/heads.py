"""``python -m transformer.heads``: which heads matter, over a whole test set.

- importance: Michel et al. (2019, "Are Sixteen Heads Really Better than One?"), I_h = E_x |dL(x)/d xi_h|, the
  expected absolute gradient of each sentence's teacher-forced loss on its reference translation with respect to the
  head's gate xi_h (the model's head mask, all ones), normalised per layer by the l2 norm over the layer's heads;
- stats: corpus means per head of entropy, maximum weight, share on the end / start token, share on the previous /
  same / next position, and for cross-attention how often the head's strongest source piece is the one most of the
  layer's other heads pick (a rough alignment agreement);
- pruning: sacreBLEU of beam search with the least important heads switched off, from none to all in steps of at
  most 10% (Michel et al.'s Figure 2), all types pooled and per type;
- roles: Voita et al. (2019, "Analyzing Multi-Head Self-Attention") rules: positional, end-token sink, mixed;
- most_confident: per head, the test sentences where its attention is most concentrated;
- alti: ALTI+ (Ferrando et al., 2022, :func:`transformer.interpret.contributions`) on the references: the mean share
  of each output position's prediction that comes from the source (the rest from the target prefix), how often
  ALTI+'s alignment (each output step's strongest source piece) is cross-attention's strongest source piece, and a
  threshold on a sentence's mean source share below which a translation may be a hallucination (Dale et al.,
  2023), chosen on a calibration split (val) from the model's own translations (a corpus figure: the app's notice
  is the checkpoint's ``flag``, ``python -m transformer.detect``).

``--json`` prints one JSON object as the last line; ``--out`` writes the same object to a file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from . import cli
from .checkpoint.files import CheckpointError
from .cli import add_decoding_arguments, add_streams, error, non_negative, use_threads
from .evaluation.data import DataError, read_parallel
from .interpret.heads import IMPORTANCE_NOTE, alti_section, run
from .translator import load


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m transformer.heads", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_decoding_arguments(p)
    p.add_argument("--limit", type=non_negative, default=0, help="only the first N sentences (0: all)")
    p.add_argument("--out", help="write the JSON object to this file")
    p.add_argument("--calibration-split", default="val",
                   help="the split the ALTI+ hallucination threshold is chosen on (default: val)")
    add_streams(p)
    p.add_argument("--only-alti", action="store_true",
                   help="compute only the ALTI+ section and write it into the existing JSON object of --out")
    return p.parse_args(argv)


def print_alti(section: dict[str, Any]) -> None:
    """The ALTI+ section in a few lines."""
    by_position = ", ".join(f"{x:.3f}" for x in section["source_share_by_position"][:10])
    agreement = section["alignment_agreement"]
    print(f"ALTI+ source share: mean {section['source_share_mean']:.3f}; by output position 1-10: {by_position}")
    print("ALTI+ alignment = cross-attention's strongest source piece: " +
          ", ".join(f"layer {i + 1} {a:.3f}" for i, a in enumerate(agreement["by_layer"])) +
          f", mean of all layers and heads {agreement['mean_of_layers_and_heads']:.3f}")
    print(f"hallucination threshold (mean source share, percentile {section['threshold_percentile']:g} of "
          f"{section['threshold_split']}): {section['hallucination_threshold']:.4f}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    use_threads(args)
    previous = None
    if args.only_alti:
        try:
            previous = json.loads(Path(args.out).read_text(encoding="utf-8")) if args.out else None
        except (OSError, ValueError) as err:
            return error(f"--only-alti needs --out to be an existing heads.json: {err}")
        if not isinstance(previous, dict):
            return error("--only-alti needs --out to be an existing heads.json (a JSON object)")
    try:
        sources, refs = read_parallel(args.data_dir, args.split, args.src, args.tgt)
        if args.limit:
            sources, refs = sources[: args.limit], refs[: args.limit]
        if not sources:
            raise DataError(f"{args.data_dir}/{args.split}.{args.src} has no sentences")
        calibration, _ = read_parallel(args.data_dir, args.calibration_split, args.src, args.tgt)
        calibration = calibration[: args.limit] if args.limit else calibration
        if not calibration:
            raise DataError(f"{args.data_dir}/{args.calibration_split}.{args.src} has no sentences")
        tr = load(args.checkpoint, device=args.device)
    except (DataError, CheckpointError) as err:
        return error(err)
    if args.out and not Path(args.out).parent.is_dir():
        return error(f"cannot write {args.out}: no such directory {Path(args.out).parent}")
    command = "python -m transformer.heads " + " ".join(sys.argv[1:] if argv is None else argv)
    chosen = tr.settings(cli.settings(args))  # the checkpoint's own length penalty where --alpha names none
    start = time.perf_counter()
    alti = alti_section(tr, sources, refs, calibration, args.calibration_split, chosen, args.batch_size,
                        progress=not args.no_progress)
    alti.update(split=args.split, command=command)
    if previous is not None:
        result = {**previous, "alti": alti}
    else:
        result = run(tr, sources, refs, args.tgt, chosen, args.batch_size,
                     progress=not args.no_progress, streams=args.streams)
        result.update(alti=alti, split=args.split, src=args.src, tgt=args.tgt, checkpoint=str(args.checkpoint),
                      seconds=round(time.perf_counter() - start, 1), torch_threads=torch.get_num_threads(),
                      command=command)
        print(f"{args.split}: {len(sources)} sentences, baseline BLEU {result['baseline_bleu']:.2f} (beam "
              f"{chosen.beam_size}), {result['seconds']} s (importance {result['seconds_importance']} s, pruning "
              f"{result['seconds_pruning']} s)")
        print(IMPORTANCE_NOTE)
        for point in result["pruning"]:
            print(f"  {point['heads_off']:3d} heads off ({point['fraction']:.0%}): BLEU {point['bleu']:.2f}")
        print("heads off before BLEU drops by more than 1 point: " +
              ", ".join(f"{k} {v}" for k, v in result["heads_off_within_1_bleu"].items()))
    print_alti(alti)
    text = json.dumps(result, ensure_ascii=False)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
