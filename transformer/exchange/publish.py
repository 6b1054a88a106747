"""A checkpoint directory with its model card for a Hub model repo: the files that go up (:func:`files_to_upload`),
the card with the Hub's metadata header (:func:`model_card`, :func:`validate_card`) and the upload, one commit
(:func:`upload`). The command, ``python -m transformer.publish``, is ``transformer/publish.py``."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

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
