"""``python -m bench.flow``: how faithful the information-flow graph is (``transformer.interpret.flow``).

For every output step of every sentence (the model's own greedy translation, read back teacher-forced): keep only
the heads with an edge in that step's graph at a threshold, switch every other head off with the model's
``head_mask`` (as the Ablation view does), and count how often the step's top prediction is unchanged; against the
same number of heads kept at random two ways (a fixed seed): every head equally likely, and as many of each attention
kind as the graph keeps (``matched``: the graph's heads are mostly cross-attention, which matters more than the
average head). The threshold is chosen on val (the one with the largest lead over random), then measured once on
test; ``--threshold`` skips the choice. One process, CPU; prints one JSON object.

    python -m bench.flow --checkpoint checkpoints/multi30k-en-de --data-dir ../shared/data/multi30k
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import torch

from transformer import load
from transformer.interpret import flow
from transformer.network.kinds import all_heads, head_mask

from .common import DEFAULT_CHECKPOINT, DEFAULT_DATA_DIR, args_and_splits

THRESHOLDS = (0.01, 0.02, 0.04, 0.08, 0.15)


@torch.no_grad()
def faithfulness(tr, sentences: list[str], thresholds: tuple[float, ...], seed: int = 0,
                 batch_size: int = 32) -> dict[str, Any]:
    """Per threshold: steps counted, the share whose top prediction is unchanged keeping the graph's heads, keeping
    as many random heads, and as many random heads of each kind as the graph keeps; the mean share of heads kept."""
    model, config = tr.model, tr.config
    heads = all_heads(config)
    by_kind = {kind: [h for h in heads if h[0] == kind] for kind in dict.fromkeys(h[0] for h in heads)}
    rng = random.Random(seed)
    counts = {t: {"steps": 0, "graph": 0, "random": 0, "matched": 0, "kept": 0} for t in thresholds}
    for start in range(0, len(sentences), batch_size):
        for result in tr.translate_batch(sentences[start:start + batch_size], beam_size=1):
            src = torch.tensor([result.source_ids])
            tgt = torch.tensor([[config.bos_id, *result.target_ids[:-1]]])  # (1, T)
            top = model(src, tgt).logits[0].argmax(-1)  # (T,): the unmasked model's top prediction per step
            f = flow(model, src, tgt)
            for t in range(tgt.size(1)):
                for threshold in thresholds:
                    keep = f.graph(t, threshold).heads()
                    chosen = set(rng.sample(heads, len(keep)))
                    matched = {h for kind, pool in by_kind.items()
                               for h in rng.sample(pool, sum(k[0] == kind for k in keep))}
                    c = counts[threshold]
                    c["steps"] += 1
                    c["kept"] += len(keep)
                    for name, kept in (("graph", keep), ("random", chosen), ("matched", matched)):
                        mask = head_mask(config, [h for h in heads if h not in kept])
                        c[name] += int(model(src, tgt, head_mask=mask).logits[0, t].argmax() == top[t])
    return {str(t): {"steps": c["steps"], "graph_unchanged": c["graph"] / max(1, c["steps"]),
                     "random_unchanged": c["random"] / max(1, c["steps"]),
                     "kind_matched_unchanged": c["matched"] / max(1, c["steps"]),
                     "heads_kept": c["kept"] / max(1, c["steps"] * len(heads))} for t, c in counts.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.flow", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    p.add_argument("--val-sentences", type=int, default=200, help="the first N of val choose the threshold")
    p.add_argument("--test-sentences", type=int, default=1000, help="the first N of test_2016_flickr (1000: all)")
    p.add_argument("--thresholds", default=",".join(map(str, THRESHOLDS)))
    p.add_argument("--threshold", type=float, default=None, help="measure test at this threshold (no choice on val)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    parsed = args_and_splits(p, argv)
    if parsed is None:
        return 2
    args, val, test = parsed
    tr = load(Path(args.checkpoint), device="cpu")
    thresholds = tuple(float(x) for x in args.thresholds.split(","))
    began = time.process_time()
    on_val = faithfulness(tr, val[:args.val_sentences], thresholds, args.seed) if args.threshold is None else {}
    best = args.threshold if args.threshold is not None else max(
        thresholds, key=lambda t: on_val[str(t)]["graph_unchanged"] - on_val[str(t)]["random_unchanged"])
    on_test = faithfulness(tr, test[:args.test_sentences], (best,), args.seed)[str(best)]
    print(json.dumps({"checkpoint": args.checkpoint,
                      "val_sentences": min(args.val_sentences, len(val)) if on_val else 0,
                      "test_sentences": min(args.test_sentences, len(test)), "val": on_val, "threshold": best,
                      "test": on_test, "cpu_s": round(time.process_time() - began, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
