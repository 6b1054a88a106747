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
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from ..checkpoint.families import family_of_dir
from ..checkpoint.files import CONFIG_FILE, METADATA_FILE, WEIGHTS_FILE, CheckpointError
from ..checkpoint.hub import resolve_checkpoint_dir
from ..checkpoint.save import save_weights
from ..translator import Translator, load


def convert(source: str, out: str | Path) -> Translator:
    """Convert ``source`` (a directory or Hub id of a Hugging Face checkpoint of a registered family) into the
    checkpoint directory ``out``."""
    path = resolve_checkpoint_dir(source)
    family = family_of_dir(path)
    if not family.model_types:
        raise CheckpointError(f"{source} is not a Hugging Face checkpoint (its config.json has no model_type): "
                              "it is one of ours already")
    tr = load(path, device="cpu")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tr.config.save(out / CONFIG_FILE)
    save_weights(tr.model, out / WEIGHTS_FILE)
    for name in family.copied_files:
        if (path / name).is_file():
            shutil.copyfile(path / name, out / name)
    metadata = {**tr.metadata, "converted_from": str(source), "converted_by": "python -m transformer.convert",
                "parameters": tr.model.num_parameters()}
    (out / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    return load(out, device="cpu")


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
