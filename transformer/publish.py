"""``python -m transformer.publish``: upload a checkpoint directory with its model card to a Hub model repo.

    python -m transformer.publish --checkpoint checkpoints/multi30k-en-de --repo-id USER/multi30k-en-de --dry-run

The card (the checkpoint's ``README.md``) gets the Hub's metadata header (language, license, datasets, metrics,
tags), so the repo shows as a translation model; ``ATTN_CHECKPOINT=USER/NAME`` then opens it in the app.
``--dry-run`` checks the checkpoint and the card and lists what would go up, without any network use. The upload
uses ``huggingface_hub`` with the token in ``HF_TOKEN`` (or a ``huggingface-cli login``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .checkpoint import CheckpointError, check_checkpoint_dir

SKIP = ("state.pt", "averaging", "__pycache__", ".tmp")
LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech"}


def files_to_upload(checkpoint: Path) -> list[Path]:
    """Every file of the checkpoint directory except training state (``state.pt``, ``averaging/``)."""
    return sorted(p for p in checkpoint.rglob("*") if p.is_file() and not any(s in p.parts or p.name.endswith(s)
                                                                            for s in SKIP))


def model_card(checkpoint: Path, repo_id: str):
    """The checkpoint's README.md with the Hub's metadata header (an existing header is replaced)."""
    from huggingface_hub import ModelCard, ModelCardData

    meta = json.loads((checkpoint / "metadata.json").read_text(encoding="utf-8")) \
        if (checkpoint / "metadata.json").is_file() else {}
    pair = str(meta.get("language_pair", "")).split("-")
    body = (checkpoint / "README.md").read_text(encoding="utf-8") if (checkpoint / "README.md").is_file() else \
        f"# {repo_id}\n\nA Transformer checkpoint of the attention explorer.\n"
    if body.startswith("---"):
        end = body.find("\n---", 3)
        body = body[end + 4:].lstrip("\n") if end != -1 else body
    test = meta.get("test_2016_flickr") if isinstance(meta.get("test_2016_flickr"), dict) else {}
    data = ModelCardData(language=[p for p in pair if p] or None, license="mit", datasets=["multi30k"],
                         metrics=["bleu", "chrf"], tags=["translation", "transformer", "attention", "safetensors"],
                         pipeline_tag="translation", library_name="attention-explorer")
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")
    if test:
        card.text += (f"\n\nScores on Multi30k test_2016_flickr (beam {test.get('beam', '?')}): BLEU "
                      f"{test.get('bleu')}, chrF {test.get('chrf')}.\n")
    return card


def validate_card(card) -> list[str]:
    """Problems with the card's metadata header (empty when it is fine)."""
    from huggingface_hub import ModelCard

    parsed = ModelCard(str(card)).data.to_dict()
    problems = [f"metadata header lacks '{key}'" for key in ("language", "license", "datasets", "metrics", "tags")
                if not parsed.get(key)]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m transformer.publish", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="checkpoint directory")
    p.add_argument("--repo-id", required=True, help="USER/NAME of the Hub model repo")
    p.add_argument("--dry-run", action="store_true", help="check and list, upload nothing")
    p.add_argument("--private", action="store_true")
    args = p.parse_args(argv)
    checkpoint = Path(args.checkpoint)
    try:
        check_checkpoint_dir(checkpoint)
    except CheckpointError as err:
        print(f"error: {checkpoint}: {err}", file=sys.stderr)
        return 1
    card = model_card(checkpoint, args.repo_id)
    problems = validate_card(card)
    if problems:
        print("error: " + "; ".join(problems), file=sys.stderr)
        return 1
    files = files_to_upload(checkpoint)
    print(f"{args.repo_id}: {len(files) + (0 if (checkpoint / 'README.md').is_file() else 1)} files, "
          f"{sum(f.stat().st_size for f in files) / 1e6:.1f} MB")
    for f in files:
        print(f"  {f.relative_to(checkpoint)}{'  (card with the Hub header)' if f.name == 'README.md' else ''}")
    if args.dry_run:
        print("dry run: nothing uploaded; the card's header:")
        print(str(card).split("\n---", 1)[0] + "\n---")
        return 0
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(args.repo_id, repo_type="model", private=args.private, exist_ok=True)
    api.upload_folder(repo_id=args.repo_id, folder_path=str(checkpoint), repo_type="model",
                      ignore_patterns=["state.pt", "averaging/*", "*.tmp", "README.md"],
                      commit_message="Upload checkpoint from the attention explorer")
    api.upload_file(path_or_fileobj=str(card).encode("utf-8"), path_in_repo="README.md", repo_id=args.repo_id,
                    repo_type="model", commit_message="Model card")
    print(f"uploaded: https://huggingface.co/{args.repo_id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
