"""``python -m bench.paired --base DIR``: this tree's decoding against another tree's, in one process, on the same
weights, calls interleaved, in CPU time.

For a busy machine, where wall-clock runs of ``python -m bench`` taken minutes apart differ by more than any change:
the other tree's ``transformer/`` package is copied and imported as ``transformer_base``; both decode the same
inputs alternately (which goes first alternates too) and each call is timed with ``time.process_time`` (one thread:
time spent waiting for a core is not counted). Reported per workload: each side's median in ms and the median of the
per-pair ratios (this tree / base). The OPUS-MT-sized model has random weights (no download), saved with neither.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .common import DEFAULT_CHECKPOINT, DEFAULT_DATA_DIR, read_sentences

MARIAN_SIZES = dict(src_vocab_size=58101, tgt_vocab_size=58101, d_model=512, n_heads=8, n_encoder_layers=6,
                    n_decoder_layers=6, d_ff=2048, dropout=0.1, attention_dropout=0.0, max_len=512, pad_id=58100,
                    bos_id=58100, eos_id=0, activation="swish", positional_layout="halves", final_logits_bias=True)


def paired(base: Callable[[], Any], ours: Callable[[], Any], n: int) -> dict[str, float]:
    """Median CPU ms of each and the median of per-pair ratios (ours / base), ``n`` pairs after one warm-up each."""
    base(), ours()
    tb, to, ratios = [], [], []
    for i in range(n):
        for fn, acc in ((base, tb), (ours, to)) if i % 2 == 0 else ((ours, to), (base, tb)):
            start = time.process_time()
            fn()
            acc.append(time.process_time() - start)
        ratios.append(to[-1] / tb[-1])
    return {"base_ms": round(1000 * statistics.median(tb), 1), "ours_ms": round(1000 * statistics.median(to), 1),
            "ratio": round(statistics.median(ratios), 3), "pairs": n}


def import_base(tree: Path, tmp: Path) -> Any:
    """The other tree's ``transformer`` package, imported as ``transformer_base`` (its imports are relative)."""
    shutil.copytree(tree / "transformer", tmp / "transformer_base")
    sys.path.insert(0, str(tmp))
    return importlib.import_module("transformer_base")


def base_module(home: str, flat: str) -> Any:
    """A module of the base tree: where it lives in this layout (``transformer/network/weights.py``), else where an
    older, flat ``transformer/`` kept it (``transformer/weights.py``)."""
    try:
        return importlib.import_module(f"transformer_base.{home}")
    except ModuleNotFoundError:
        return importlib.import_module(f"transformer_base.{flat}")


def run(base_tree: Path, checkpoint: str, data_dir: str, quick: bool = False) -> dict[str, Any]:
    import transformer as ours
    from transformer.decoding.beam_transformers import beam_search_transformers
    from transformer.network.kinds import head_mask
    from transformer.network.masks import pad_sequences
    from transformer.network.weights import decoding_layout

    reps = 3 if quick else 1
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-paired-") as tmp:
        base = import_base(base_tree, Path(tmp))
        base_bst = base_module("decoding.beam_transformers", "beam_transformers").beam_search_transformers
        base_layout = base_module("network.weights", "weights").decoding_layout
        t_ours, t_base = ours.load(checkpoint, device="cpu"), base.load(checkpoint, device="cpu")
        lines = read_sentences(data_dir) or [f"A man in a red shirt walks {i} dogs past the old church."
                                             for i in range(64)]
        pad = t_ours.config.pad_id
        one = pad_sequences([t_ours.encode_source(lines[3 % len(lines)])[0]], pad)
        batch = pad_sequences([t_ours.encode_source(s)[0] for s in (lines * 64)[:64]], pad)
        mo, mb = t_ours.model, t_base.model
        cfg = mo.config
        mask = head_mask(cfg, [("cross", 0, 1)])
        result["greedy, 1 sentence"] = paired(lambda: base.greedy_decode(mb, one), lambda: ours.greedy_decode(mo, one),
                                              40 // reps)
        result["beam 4, 1 sentence"] = paired(lambda: base.beam_search(mb, one, 4),
                                              lambda: ours.beam_search(mo, one, 4), 40 // reps)
        result["beam 4, 1 sentence, one head ablated"] = paired(
            lambda: base.beam_search(mb, one, 4, head_mask=mask), lambda: ours.beam_search(mo, one, 4, head_mask=mask),
            40 // reps)
        result["greedy, 64 sentences"] = paired(lambda: base.greedy_decode(mb, batch),
                                                lambda: ours.greedy_decode(mo, batch), 8 // reps)
        result["beam 4, 64 sentences"] = paired(lambda: base.beam_search(mb, batch, 4),
                                                lambda: ours.beam_search(mo, batch, 4), 8 // reps)
        same = [(base.greedy_decode(mb, src), ours.greedy_decode(mo, src)) for src in (one, batch)]
        same += [(base.beam_search(mb, src, 4, **kw), ours.beam_search(mo, src, 4, **kw))
                 for src in (one, batch) for kw in ({}, {"head_mask": mask})]
        result["same tokens, every workload above"] = all(torch.equal(b.tokens, o.tokens) for b, o in same)
        if not quick:
            torch.manual_seed(0)
            m_ours = ours.Transformer(ours.TransformerConfig(**MARIAN_SIZES)).eval()
            m_base = base.Transformer(base.TransformerConfig(**MARIAN_SIZES)).eval()
            m_base.load_state_dict(m_ours.state_dict())
            m_ours, m_base = decoding_layout(m_ours), base_layout(m_base)
            src = torch.randint(1, 58000, (8, 20))
            src[:, -1] = MARIAN_SIZES["eos_id"]
            kw = dict(max_len_a=0.0, max_len_b=20)  # random weights ramble: both stop at 20 tokens
            result["OPUS-MT-sized, beam 4, transformers scoring, 8 sentences"] = paired(
                lambda: base_bst(m_base, src, 4, **kw), lambda: beam_search_transformers(m_ours, src, 4, **kw), 8)
            result["OPUS-MT-sized, greedy, 1 sentence"] = paired(
                lambda: base.greedy_decode(m_base, src[:1], **kw), lambda: ours.greedy_decode(m_ours, src[:1], **kw),
                16)
            result["OPUS-MT-sized, same tokens"] = torch.equal(base_bst(m_base, src, 4, **kw).tokens,
                                                               beam_search_transformers(m_ours, src, 4, **kw).tokens)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.paired", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="root of the other tree (e.g. a worktree of main)")
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    p.add_argument("--quick", action="store_true", help="fewer pairs, no OPUS-MT-sized model")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if not (Path(args.base) / "transformer" / "__init__.py").is_file():
        print(f"error: {args.base} has no transformer/ package", file=sys.stderr)
        return 1
    result = run(Path(args.base), args.checkpoint, args.data_dir, args.quick)
    for name, value in result.items():
        print(f"{name}: {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
