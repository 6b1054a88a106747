"""``python -m transformer.publish``: upload a checkpoint directory with its model card to a Hub model repo.

    python -m transformer.publish --checkpoint checkpoints/multi30k-en-de --repo-id USER/multi30k-en-de --dry-run
    HF_TOKEN=hf_... python -m transformer.publish --checkpoint checkpoints/multi30k-en-de --repo-id USER/multi30k-en-de

The checkpoint is loaded first (``transformer.load``), so a broken one never goes up. The card (the checkpoint's
``README.md``) gets the Hub's metadata header (language, license, datasets, metrics, tags, and the test scores
of ``metadata.json`` as model-index results), merged into any header it already has; the app then opens the repo
with ``ATTN_CHECKPOINT=USER/NAME``. Training state (``state.pt``, ``averaging/``) never goes up. ``--dry-run``
checks the checkpoint and the card and lists what would go up, without any network use. The upload is one
commit through ``huggingface_hub``, with the token in ``HF_TOKEN`` (or a ``hf auth login``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .checkpoint.files import CheckpointError
from .checkpoint.hub import HUB_ID, max_download_mb
from .exchange.publish import CARD_FILE, files_to_upload, model_card, upload, validate_card
from .translator import load


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m transformer.publish", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (config.json, model.safetensors, ...)")
    p.add_argument("--repo-id", required=True, help="USER/NAME of the Hub model repo (created when missing)")
    p.add_argument("--dry-run", action="store_true", help="check the checkpoint and the card, list, upload nothing")
    p.add_argument("--private", action="store_true", help="create the repo private")
    args = p.parse_args(argv)
    checkpoint = Path(args.checkpoint).expanduser()
    if not HUB_ID.fullmatch(args.repo_id) or ".." in args.repo_id:
        print(f"error: --repo-id {args.repo_id!r} is not a Hub repo id of the form USER/NAME", file=sys.stderr)
        return 2
    if not checkpoint.is_dir():
        print(f"error: {checkpoint} is not a checkpoint directory", file=sys.stderr)
        return 1
    try:
        translator = load(checkpoint, device="cpu")  # a checkpoint that does not load never goes up
    except CheckpointError as err:
        print(f"error: {checkpoint} does not load: {err}", file=sys.stderr)
        return 1
    card = model_card(checkpoint, args.repo_id, dict(translator.metadata or {}))
    problems = validate_card(card)
    if problems:
        print(f"error: the model card of {checkpoint}: " + "; ".join(problems), file=sys.stderr)
        return 1
    files = files_to_upload(checkpoint)
    total_mb = sum((checkpoint / f).stat().st_size for f in files if (checkpoint / f).is_file()) / 1e6
    print(f"{args.repo_id}: {len(files)} files, {total_mb:.1f} MB")
    for f in files:
        print(f"  {f.as_posix()}{'  (the model card, with the Hub header)' if f.as_posix() == CARD_FILE else ''}")
    if total_mb > max_download_mb():
        print(f"warning: {total_mb:,.0f} MB is over the app's download limit of {max_download_mb():,.0f} MB "
              "(ATTN_MAX_DOWNLOAD_MB): a server would refuse this repo", file=sys.stderr)
    if args.dry_run:
        print("dry run: nothing uploaded. The card's header:")
        print("---\n" + card.data.to_yaml() + "\n---")
        return 0
    try:
        url = upload(checkpoint, args.repo_id, card, files, args.private)
    except Exception as err:  # no token, no network, no rights: one clear line, no stack trace
        print(f"error: upload to the Hugging Face Hub failed ({type(err).__name__}: {err}); set HF_TOKEN to a "
              "token with write access", file=sys.stderr)
        return 1
    print(f"uploaded: {url} (ATTN_CHECKPOINT={args.repo_id} opens it in the app)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
