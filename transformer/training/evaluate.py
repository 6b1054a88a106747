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

from .. import cli
from ..checkpoint.files import CheckpointError
from ..cli import add_decoding_arguments, error, use_threads
from ..decoding.settings import DEFAULTS, DecodeSettings
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


def translate_all(translator: Translator, sources: Sequence[str], settings: DecodeSettings = DEFAULTS,
                  batch_size: int = 64, progress: bool = True, head_mask: dict | None = None) -> list[str]:
    """Translate in length-sorted batches (less padding) as ``settings`` say (what they leave None: the checkpoint's
    own, as ``Translator.translate_batch`` fills it), returning outputs in input order (``head_mask``: heads switched
    off)."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    outputs: list[str] = [""] * len(sources)
    with tqdm(total=len(sources), unit="sent", disable=not progress, file=sys.stderr) as bar:
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            results = translator.translate_batch([sources[i] for i in chunk], settings, head_mask=head_mask)
            for i, r in zip(chunk, results):
                outputs[i] = r.text
            bar.update(len(chunk))
    return outputs


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m transformer.evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_decoding_arguments(p)
    p.add_argument("--output", help="write the translations to this file")
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
    hyps = translate_all(translator, sources, chosen, args.batch_size, not args.no_progress)
    seconds = time.perf_counter() - start
    if args.output:
        Path(args.output).write_text("\n".join(hyps) + "\n", encoding="utf-8")
    result = score(hyps, refs, args.tgt)
    result.update(sentences=len(sources), seconds=round(seconds, 2), split=args.split, beam=chosen.beam_size,
                  alpha=chosen.alpha,
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
