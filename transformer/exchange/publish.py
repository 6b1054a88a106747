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
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..checkpoint.files import CheckpointError
from ..checkpoint.hub import HUB_ID, max_download_mb
from ..translator import load

CARD_FILE = "README.md"
SKIP_FILES = {"state.pt"}  # training state: resuming needs it, loading does not
SKIP_DIRS = {"averaging", "__pycache__", ".cache"}
SKIP_SUFFIXES = (".tmp", ".pyc", ".lock")
LICENSE = "mit"
DATASETS = ["multi30k"]
METRICS = ["bleu", "chrf"]
TAGS = ["translation", "transformer", "attention"]
REQUIRED_KEYS = ("language", "license", "datasets", "metrics", "tags")
ISO_639_CODE = re.compile(r"[a-z]{2,3}")
TEST_SET = "test_2016_flickr"


def files_to_upload(checkpoint: Path) -> list[Path]:
    """The checkpoint's files, relative to it, that go up: all but training state (``state.pt``,
    ``averaging/``) and temporary files. ``README.md`` is always listed: the card replaces or creates it."""
    files = {p.relative_to(checkpoint) for p in checkpoint.rglob("*") if p.is_file()}
    kept = {f for f in files if f.name not in SKIP_FILES and not SKIP_DIRS & set(f.parts[:-1])
            and not f.name.endswith(SKIP_SUFFIXES)}
    return sorted(kept | {Path(CARD_FILE)})


def _eval_results(metadata: dict, languages: list[str]) -> list[Any]:
    """The test scores of ``metadata.json`` (``test_2016_flickr``: bleu, chrf) as the Hub's model-index results."""
    from huggingface_hub import EvalResult

    scores = metadata.get(TEST_SET)
    if not isinstance(scores, dict):
        return []
    results = []
    for metric, name in (("bleu", "sacreBLEU (cased, detokenized)"), ("chrf", "chrF")):
        value = scores.get(metric)
        if isinstance(value, int | float) and not isinstance(value, bool):
            results.append(EvalResult(task_type="translation", task_name="Translation", dataset_type="multi30k",
                                      dataset_name=f"Multi30k {TEST_SET} ({'-'.join(languages)})",
                                      dataset_config="-".join(languages) or None, dataset_split="test",
                                      metric_type=metric, metric_name=name, metric_value=float(value),
                                      metric_config=str(scores["signature"]) if metric == "bleu" and
                                      scores.get("signature") else None))
    return results


def model_card(checkpoint: Path, repo_id: str, metadata: dict) -> Any:
    """The checkpoint's README.md (or a short one) under the Hub's metadata header; an existing header is merged
    into it (its other keys kept, the ones set here replaced), never repeated."""
    from huggingface_hub import ModelCard, ModelCardData

    readme = checkpoint / CARD_FILE
    text = readme.read_text(encoding="utf-8") if readme.is_file() else None
    if text is not None and text.startswith("---"):
        existing = ModelCard(text, ignore_metadata_errors=True)
        header, body = existing.data.to_dict(), existing.text.lstrip("\n")
    elif text is not None:
        header, body = {}, text
    else:
        header, body = {}, (f"# {repo_id.split('/')[-1]}\n\nA Transformer translation checkpoint of the attention "
                            "explorer (`transformer.load` opens it).\n")
    languages = [p for p in str(metadata.get("language_pair", "")).split("-") if p]
    tags = list(dict.fromkeys([*TAGS, *(header.get("tags") or [])]))
    header.pop("model-index", None)  # rebuilt from eval_results below
    ours = dict(language=languages or None, license=LICENSE, datasets=DATASETS, metrics=METRICS, tags=tags,
                pipeline_tag="translation")
    results = _eval_results(metadata, languages)
    if results:
        ours.update(model_name=repo_id.split("/")[-1], eval_results=results)
    data = ModelCardData(**{**header, **ours})
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def validate_card(card: Any) -> list[str]:
    """Problems with the card's metadata header once written out and parsed back (empty when it is fine)."""
    from huggingface_hub import ModelCard

    try:
        parsed = ModelCard(str(card)).data.to_dict()
    except Exception as err:  # a header that does not parse back
        return [f"the card's metadata header does not parse: {err}"]
    problems = [f"metadata header lacks '{key}'" + (" (metadata.json has no language_pair such as 'en-de')"
                                                    if key == "language" else "")
                for key in REQUIRED_KEYS if not parsed.get(key)]
    problems += [f"'{code}' is not an ISO 639 language code" for code in parsed.get("language") or []
                 if not ISO_639_CODE.fullmatch(str(code))]
    if ModelCard(str(card)).text.lstrip().startswith("---\n"):
        problems.append("the card has a second metadata header")
    return problems


def upload(checkpoint: Path, repo_id: str, card: Any, files: list[Path], private: bool = False) -> str:
    """Create the model repo if needed and upload ``files`` with ``card`` as README.md in one commit; the URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(token=os.environ.get("HF_TOKEN") or None)
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    operations = [CommitOperationAdd(path_in_repo=f.as_posix(), path_or_fileobj=str(checkpoint / f))
                  for f in files if f.as_posix() != CARD_FILE]
    operations.append(CommitOperationAdd(path_in_repo=CARD_FILE, path_or_fileobj=str(card).encode("utf-8")))
    api.create_commit(repo_id, operations=operations, repo_type="model",
                      commit_message=f"Upload {checkpoint.name} from the attention explorer")
    return f"https://huggingface.co/{repo_id}"


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
