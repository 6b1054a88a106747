"""Score a checkpoint with sacreBLEU: ``python -m transformer.evaluate --help``.

Reports BLEU (cased, detokenized, with its signature), chrF, and BLEU on lowercased,
Moses-tokenized text (the measure multimodal-MT papers report with multi-bleu.perl).
With ``--json`` the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import sacrebleu
from tqdm import tqdm

from ..checkpoint.files import CheckpointError
from ..translator import Translator, load
from .data import DataError, read_parallel


def moses_tokenize(lines: Sequence[str], lang: str) -> list[str]:
    """Lowercased Moses tokenization (sacremoses), as used before multi-bleu.perl."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    return [tok.tokenize(line.lower(), return_str=True, escape=False) for line in lines]


def score(hyps: Sequence[str], refs: Sequence[str], tgt_lang: str) -> dict[str, object]:
    """BLEU (cased, detokenized), chrF and lowercased tokenized BLEU of ``hyps`` against ``refs``, and the length
    ratio (hypothesis over reference tokens, as BLEU's brevity penalty sees them): below 1 means too short."""
    bleu = sacrebleu.BLEU()
    bleu_score = bleu.corpus_score(list(hyps), [list(refs)])
    chrf = sacrebleu.CHRF().corpus_score(list(hyps), [list(refs)])
    lc_tok = sacrebleu.BLEU(tokenize="none", force=True).corpus_score(moses_tokenize(hyps, tgt_lang),
                                                                        [moses_tokenize(refs, tgt_lang)])
    return {"bleu": round(bleu_score.score, 2), "chrf": round(chrf.score, 2), "bleu_lc_tok": round(lc_tok.score, 2),
            "length_ratio": round(bleu_score.ratio, 4),
            "signature": str(bleu.get_signature())}


def translate_all(translator: Translator, sources: Sequence[str], beam: int, batch_size: int,
                  alpha: float | None = None, progress: bool = True, head_mask: dict | None = None) -> list[str]:
    """Translate in length-sorted batches (less padding), returning outputs in input order (``alpha=None``: the
    checkpoint's own, as ``Translator.translate_batch`` takes it; ``head_mask``: heads switched off)."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    outputs: list[str] = [""] * len(sources)
    with tqdm(total=len(sources), unit="sent", disable=not progress, file=sys.stderr) as bar:
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            results = translator.translate_batch([sources[i] for i in chunk], beam_size=beam, alpha=alpha,
                                                 head_mask=head_mask)
            for i, r in zip(chunk, results):
                outputs[i] = r.text
            bar.update(len(chunk))
    return outputs


def positive(text: str) -> int:
    """argparse type: an int of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def non_negative(text: str) -> int:
    """argparse type: an int of 0 or more."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    """The flags every command that decodes a split shares: model, data, beam and length penalty, device, output."""
    p.add_argument("--checkpoint", default="checkpoints/multi30k-en-de", help="checkpoint directory or Hub repo id")
    p.add_argument("--data-dir", default="data/multi30k",
                   help="directory with {split}.{lang} files (python -m transformer.data --download data/multi30k)")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--beam", type=positive, default=5, help="beam size (1: greedy)")
    p.add_argument("--alpha", type=float, default=None,
                   help="length penalty (default: the checkpoint's, metadata.json decoding.alpha, else 0.6)")
    p.add_argument("--batch-size", type=positive, default=64, help="sentences per decoding batch")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=non_negative, default=0, help="torch.set_num_threads (0: leave as is)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--no-progress", action="store_true")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_decoding_arguments(p)
    p.add_argument("--output", help="write the translations to this file")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        sources, refs = read_parallel(args.data_dir, args.split, args.src, args.tgt)
        translator = load(args.checkpoint, device=args.device)
    except (DataError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.alpha is None:
        args.alpha = translator.default_alpha
    start = time.perf_counter()
    hyps = translate_all(translator, sources, args.beam, args.batch_size, args.alpha, not args.no_progress)
    seconds = time.perf_counter() - start
    if args.output:
        Path(args.output).write_text("\n".join(hyps) + "\n", encoding="utf-8")
    result = score(hyps, refs, args.tgt)
    result.update(sentences=len(sources), seconds=round(seconds, 2), split=args.split, beam=args.beam, alpha=args.alpha,
                  checkpoint=str(args.checkpoint))
    print(f"{args.split} {args.src}->{args.tgt}, {len(sources)} sentences, beam {args.beam}, alpha {args.alpha:g}, "
          f"{seconds:.1f} s")
    print(f"BLEU {result['bleu']:.2f}  ({result['signature']})")
    print(f"chrF {result['chrf']:.2f}")
    print(f"BLEU lowercased, Moses-tokenized {result['bleu_lc_tok']:.2f}")
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
