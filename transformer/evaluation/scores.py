"""Score translations with sacreBLEU: BLEU (cased, detokenized, with its signature), chrF, and BLEU on lowercased,
Moses-tokenized text (the measure multimodal-MT papers report with multi-bleu.perl); and a split translated in
length-sorted batches (``python -m transformer.evaluate`` runs both on a checkpoint)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import sacrebleu
from tqdm import tqdm

from ..decoding.settings import DEFAULTS, DecodeSettings
from ..translator import Translator


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
