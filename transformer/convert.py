"""``python -m transformer.convert --from-hf ID_OR_DIR --out DIR``: a Hugging Face checkpoint as one of ours.

Reads a ``save_pretrained`` directory or a Hugging Face Hub id (downloaded with huggingface_hub after a size check)
of any family the registry knows (``checkpoint.families``: Marian / OPUS-MT, NLLB-200 / M2M100), converts the
weights and writes a checkpoint directory: ``config.json`` (our ``TransformerConfig`` with the family's fields, e.g.
Marian's swish and sin|cos positions, NLLB's pre-norm and fairseq positions), ``model.safetensors``, the family's
tokenizer files (Marian: ``source.spm``, ``target.spm``, ``vocab.json``; NLLB / M2M100: ``sentencepiece.bpe.model``,
``tokenizer.json`` or ``vocab.json``) and ``metadata.json`` naming the source. Our runtime never imports
transformers.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .checkpoint.files import CheckpointError
from .exchange.convert import convert


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m transformer.convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from-hf", required=True, help="Hub id (e.g. Helsinki-NLP/opus-mt-en-de) or a local directory")
    p.add_argument("--out", required=True, help="the checkpoint directory to write")
    args = p.parse_args(argv)
    try:
        tr = convert(args.from_hf, args.out)
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    cfg = tr.config
    print(f"wrote {args.out}: {tr.model.num_parameters():,} parameters, {cfg.n_encoder_layers}+{cfg.n_decoder_layers} "
          f"layers, d_model {cfg.d_model}, {cfg.n_heads} heads, vocabulary {cfg.tgt_vocab_size:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
