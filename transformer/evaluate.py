"""Score a checkpoint with sacreBLEU: ``python -m transformer.evaluate --help``.

Reports BLEU (cased, detokenized, with its signature), chrF, and BLEU on lowercased,
Moses-tokenized text (the measure multimodal-MT papers report with multi-bleu.perl).
With ``--json`` the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from . import cli
from .checkpoint.files import CheckpointError
from .cli import add_decoding_arguments, error, use_threads
from .evaluation.data import DataError, read_parallel
from .evaluation.scores import score, translate_all
from .translator import load


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m transformer.evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_decoding_arguments(p)
    p.add_argument("--output", help="write the translations to this file")
    cli.add_streams(p)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    use_threads(args)
    try:
        sources, refs = read_parallel(args.data_dir, args.split, args.src, args.tgt)
        translator = load(args.checkpoint, device=args.device)
    except (DataError, CheckpointError) as err:
        return error(err)
    chosen = translator.settings(cli.settings(args))  # the checkpoint's own length penalty where --alpha names none
    start = time.perf_counter()
    hyps = translate_all(translator, sources, chosen, args.batch_size, not args.no_progress, streams=args.streams)
    seconds = time.perf_counter() - start
    if args.output:
        Path(args.output).write_text("\n".join(hyps) + "\n", encoding="utf-8")
    result = score(hyps, refs, args.tgt)
    result.update(sentences=len(sources), seconds=round(seconds, 2), streams=args.streams, split=args.split,
                  beam=chosen.beam_size, alpha=chosen.alpha,
                  checkpoint=str(args.checkpoint))
    print(f"{args.split} {args.src}->{args.tgt}, {len(sources)} sentences, beam {chosen.beam_size}, "
          f"alpha {chosen.alpha:g}, {seconds:.1f} s")
    print(f"BLEU {result['bleu']:.2f}  ({result['signature']})")
    print(f"chrF {result['chrf']:.2f}")
    print(f"BLEU lowercased, Moses-tokenized {result['bleu_lc_tok']:.2f}")
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
