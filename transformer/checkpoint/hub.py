"""Hugging Face Hub helpers: which files of a repo a load needs, how large they are, refusing a download too
large, and downloading file by file with progress (nothing here imports Streamlit)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import environment
from .files import REQUIRED_FILES, CheckpointError

DEFAULT_MAX_DOWNLOAD_MB = 1500.0
# other frameworks' weights and exports that a load never reads (OPUS-MT repos carry TensorFlow, Rust and Flax
# copies of the same weights: three times the download)
SKIPPED_SUFFIXES = (".h5", ".ot", ".msgpack", ".onnx", ".tflite", ".pb", ".gguf", ".ckpt", ".mlmodel")

Progress = Callable[[int, int, str], None]  # (bytes done, bytes in all, file now downloading: "" when finished)


def max_download_mb() -> float:
    """``$ATTN_MAX_DOWNLOAD_MB`` (a positive number of MB; ``0`` or ``inf``: no limit), else 1500; anything else is
    a ``SettingError`` naming it (``transformer.environment``)."""
    return environment.number("ATTN_MAX_DOWNLOAD_MB", DEFAULT_MAX_DOWNLOAD_MB, unlimited=True, unit="MB")


def files_to_fetch(siblings: list[Any]) -> list[tuple[str, int]]:
    """``(path, bytes)`` of the repo files a load reads: everything but other frameworks' weights, hidden files,
    and ``pytorch_model.bin`` where ``model.safetensors`` is there too."""
    sizes = {s.rfilename: int(getattr(s, "size", 0) or 0) for s in siblings}
    has_safetensors = "model.safetensors" in sizes
    return sorted((name, size) for name, size in sizes.items()
                  if not Path(name).name.startswith(".") and not name.lower().endswith(SKIPPED_SUFFIXES)
                  and not (has_safetensors and name.endswith(".bin")))


def repo_files(repo_id: str, api: Any = None) -> tuple[str | None, list[tuple[str, int]]]:
    """The repo's revision and the files a load would fetch, read from its metadata (nothing downloaded)."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    info = api.model_info(repo_id, files_metadata=True)
    return getattr(info, "sha", None), files_to_fetch(list(info.siblings or []))


def repo_size_mb(repo_id: str, api: Any = None) -> float:
    """Size in MB (10^6 bytes) of the files of a Hub model repo that a load would fetch."""
    return sum(size for _, size in repo_files(repo_id, api)[1]) / 1e6


def _refuse_if_too_large(repo_id: str, size_mb: float, max_mb: float | None) -> None:
    limit = max_download_mb() if max_mb is None else max_mb
    if size_mb > limit:
        raise CheckpointError(f"'{repo_id}' is {size_mb:,.0f} MB on the Hugging Face Hub, over this server's download "
                              f"limit of {environment.amount(limit)} MB (ATTN_MAX_DOWNLOAD_MB); it was not downloaded")


def check_repo_size(repo_id: str, max_mb: float | None = None, api: Any = None) -> float:
    """The size in MB of what a load would fetch; ``CheckpointError`` when it is over ``max_mb`` (default
    ``$ATTN_MAX_DOWNLOAD_MB``)."""
    size = repo_size_mb(repo_id, api)
    _refuse_if_too_large(repo_id, size, max_mb)
    return size


def download_repo(repo_id: str, progress: Progress | None = None, api: Any = None,
                  max_mb: float | None = None) -> Path:
    """Fetch the files a load needs (sizes read and checked against the limit first), one by one, calling
    ``progress(done_bytes, total_bytes, file)`` before each and ``progress(total, total, "")`` at the end; files
    already in the local cache are not fetched again. Returns the local snapshot directory."""
    import huggingface_hub

    revision, files = repo_files(repo_id, api)
    if not files:
        raise CheckpointError(f"'{repo_id}' on the Hugging Face Hub has no files a checkpoint needs")
    total = sum(size for _, size in files)
    _refuse_if_too_large(repo_id, total / 1e6, max_mb)
    done, local = 0, ""
    for name, size in files:
        if progress is not None:
            progress(done, total, name)
        # the revision whose sizes were checked, never a newer "main" that may have grown since
        local = huggingface_hub.hf_hub_download(repo_id=repo_id, filename=name, revision=revision)
        done += size
    if progress is not None:
        progress(total, total, "")
    root = Path(local)
    for _ in Path(files[-1][0]).parts:  # the last file's path inside the snapshot -> the snapshot directory
        root = root.parent
    if revision:
        _remember_as_main(root, revision)
    return root


def _remember_as_main(snapshot: Path, revision: str) -> None:
    """Point the cache's ``refs/main`` at the commit just fetched (what a download of "main" at that commit
    writes), so later offline loads and cache look-ups by repo id find it. The Hub cache layout is
    ``models--owner--name/{refs/main, snapshots/<commit>/...}``; anything else is left alone."""
    storage = snapshot.parent.parent
    if snapshot.parent.name != "snapshots" or snapshot.name != revision or not storage.name.startswith("models--"):
        return
    refs = storage / "refs"
    refs.mkdir(exist_ok=True)
    (refs / "main").write_text(revision, encoding="utf-8")


HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def looks_like_hub_id(text: str) -> bool:
    """``user/name`` in the Hub's alphabet, and not a path: its first part is no local directory."""
    return bool(HUB_ID.fullmatch(text)) and ".." not in text and not Path(text.split("/")[0]).is_dir()


def resolve_checkpoint_dir(path_or_hub_id: str | Path, progress: Callable[[int, int, str], None] | None = None) -> Path:
    """A local directory as it is; otherwise download the files a load needs from the Hugging Face Hub repo of that
    id (sizes checked against ``$ATTN_MAX_DOWNLOAD_MB`` first; ``progress(done_bytes, total_bytes, file)`` told as
    it goes, see ``transformer.checkpoint.hub.download_repo``)."""
    path = Path(path_or_hub_id).expanduser()
    if path.exists():
        if not path.is_dir():
            raise CheckpointError(f"{path} is a file; a checkpoint is a directory holding {', '.join(REQUIRED_FILES)}")
        return path
    text = str(path_or_hub_id).strip()
    if not looks_like_hub_id(text):
        raise CheckpointError(f"No such directory: {path} (and it is not a Hugging Face Hub repo id either)")
    # read at call time: huggingface_hub reads HF_HUB_OFFLINE only once, when it is first imported
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        if offline:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(repo_id=text, local_files_only=True))
        return download_repo(text, progress)
    except CheckpointError:
        raise
    except Exception as err:  # offline, unknown repo, private repo, bad id: one clear message
        why = "offline (HF_HUB_OFFLINE is set) and not in the local cache" if offline else \
            "unknown repo, private repo, or no network"
        raise CheckpointError(f"could not get '{text}' from the Hugging Face Hub ({why}; it is not a local "
                              f"directory either): {type(err).__name__}: {err}") from err
