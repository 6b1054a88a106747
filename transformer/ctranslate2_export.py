"""``python -m transformer.ctranslate2_export --checkpoint DIR --out DIR``: a checkpoint as a CTranslate2 model
directory (what is exported and how: :mod:`transformer.exchange.ctranslate2_export`)."""

from __future__ import annotations

import argparse
import sys

from .checkpoint.files import CheckpointError
from .cli import error
from .exchange.ctranslate2_export import QUANTIZATIONS, export_ctranslate2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer.ctranslate2_export",
                                     description="Convert a checkpoint to a CTranslate2 model directory.")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint directory (ours, or a Marian / NLLB-200 / M2M100 save_pretrained one)")
    parser.add_argument("--out", required=True, help="output directory for the CTranslate2 model")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                        help="weight quantization (default: keep float32)")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    args = parser.parse_args(argv)
    try:
        out = export_ctranslate2(args.checkpoint, args.out, args.quantization, args.force)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (FileExistsError, CheckpointError, ImportError) as err:  # one line, as every command says it (exit 1)
        return error(err)
    print(f"CTranslate2 model written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
