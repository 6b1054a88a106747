"""Hugging Face Hub helpers: how large a repo is, and refusing one too large to download."""

from __future__ import annotations

import os
from typing import Any

from .checkpoint import CheckpointError

DEFAULT_MAX_DOWNLOAD_MB = 1500.0


def max_download_mb() -> float:
    """``$ATTN_MAX_DOWNLOAD_MB`` (a positive number), else 1500."""
    try:
        value = float(os.environ.get("ATTN_MAX_DOWNLOAD_MB", DEFAULT_MAX_DOWNLOAD_MB))
    except ValueError:
        return DEFAULT_MAX_DOWNLOAD_MB
    return value if value > 0 else DEFAULT_MAX_DOWNLOAD_MB


def repo_size_mb(repo_id: str, api: Any = None) -> float:
    """Total size in MB (10^6 bytes) of the files of a Hub model repo, read from its metadata (nothing downloaded)."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    info = api.model_info(repo_id, files_metadata=True)
    return sum(int(getattr(f, "size", 0) or 0) for f in (info.siblings or [])) / 1e6


def check_repo_size(repo_id: str, max_mb: float | None = None, api: Any = None) -> float:
    """The repo's size in MB; ``CheckpointError`` when it is over ``max_mb`` (default ``$ATTN_MAX_DOWNLOAD_MB``)."""
    limit = max_download_mb() if max_mb is None else max_mb
    size = repo_size_mb(repo_id, api)
    if size > limit:
        raise CheckpointError(f"'{repo_id}' is {size:,.0f} MB on the Hugging Face Hub, over this server's download "
                              f"limit of {limit:,.0f} MB (ATTN_MAX_DOWNLOAD_MB); it was not downloaded")
    return size
