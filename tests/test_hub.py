"""Hub size checks before any download (a fake Hub API: no network)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import transformer
from transformer import CheckpointError
from transformer.hub import check_repo_size, max_download_mb, repo_size_mb


class FakeApi:
    def __init__(self, sizes: list[int | None]) -> None:
        self.sizes = sizes
        self.calls: list[tuple] = []

    def model_info(self, repo_id: str, files_metadata: bool = False):
        self.calls.append((repo_id, files_metadata))
        return SimpleNamespace(siblings=[SimpleNamespace(rfilename=f"f{i}", size=s) for i, s in enumerate(self.sizes)])


def test_repo_size_adds_the_file_sizes():
    api = FakeApi([300_000_000, 2_000_000, None])
    assert repo_size_mb("user/model", api) == pytest.approx(302.0)
    assert api.calls == [("user/model", True)]


def test_a_repo_over_the_limit_is_refused(monkeypatch):
    api = FakeApi([2_000_000_000])
    with pytest.raises(CheckpointError, match="2,000 MB.*1,500 MB"):
        check_repo_size("user/huge", api=api)
    monkeypatch.setenv("ATTN_MAX_DOWNLOAD_MB", "2500")
    assert max_download_mb() == 2500 and check_repo_size("user/huge", api=api) == pytest.approx(2000)
    monkeypatch.setenv("ATTN_MAX_DOWNLOAD_MB", "lots")
    assert max_download_mb() == 1500


def test_load_checks_the_size_before_downloading(monkeypatch):
    import huggingface_hub

    downloads = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info",
                        lambda self, repo_id, files_metadata=False: FakeApi([10_000_000_000]).model_info(repo_id))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda **kw: downloads.append(kw))
    with pytest.raises(CheckpointError, match="download limit"):
        transformer.load("someone/ten-gigabytes")
    assert downloads == []  # refused before any download
