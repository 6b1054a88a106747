"""Hub size checks before any download (a fake Hub API: no network)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import transformer
from transformer import CheckpointError
from transformer.checkpoint.hub import check_repo_size, download_repo, files_to_fetch, max_download_mb, repo_size_mb


class FakeApi:
    def __init__(self, sizes: list[int | None], names: list[str] | None = None) -> None:
        self.sizes = sizes
        self.names = names or [f"f{i}" for i in range(len(sizes))]
        self.calls: list[tuple] = []

    def model_info(self, repo_id: str, files_metadata: bool = False):
        self.calls.append((repo_id, files_metadata))
        return SimpleNamespace(sha="abc123", siblings=[SimpleNamespace(rfilename=n, size=s)
                                                       for n, s in zip(self.names, self.sizes)])


# an OPUS-MT repo as the Hub lists it: the same weights for four frameworks
OPUS_FILES = {".gitattributes": 1_000, "README.md": 3_000, "config.json": 1_300, "generation_config.json": 300,
              "source.spm": 800_000, "target.spm": 800_000, "vocab.json": 1_300_000, "tokenizer_config.json": 200,
              "pytorch_model.bin": 298_000_000, "model.safetensors": 297_000_000, "tf_model.h5": 298_000_000,
              "rust_model.ot": 300_000_000, "flax_model.msgpack": 297_000_000, "snapshots/step0001.safetensors": 4_000}


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
    with pytest.raises(ValueError, match="ATTN_MAX_DOWNLOAD_MB='lots' is not understood"):
        max_download_mb()


def test_only_the_files_a_load_reads_are_counted_and_fetched():
    def listing(files: dict) -> list:
        return FakeApi(list(files.values()), list(files)).model_info("x").siblings

    fetched = dict(files_to_fetch(listing(OPUS_FILES)))
    assert set(fetched) == {"README.md", "config.json", "generation_config.json", "source.spm", "target.spm",
                            "vocab.json", "tokenizer_config.json", "model.safetensors",
                            "snapshots/step0001.safetensors"}
    # without safetensors the PyTorch weights are the ones
    no_st = {k: v for k, v in OPUS_FILES.items() if k != "model.safetensors"}
    assert "pytorch_model.bin" in dict(files_to_fetch(listing(no_st)))
    # 1.5 GB listed, 300 MB needed: not refused
    api = FakeApi(list(OPUS_FILES.values()), list(OPUS_FILES))
    assert check_repo_size("Helsinki-NLP/opus-mt-en-de", api=api) == pytest.approx(sum(fetched.values()) / 1e6)


def test_download_fetches_file_by_file_with_progress(monkeypatch, tmp_path):
    import huggingface_hub

    snapshot = tmp_path / "snapshots" / "abc123"
    calls = []

    def fake_download(repo_id, filename, **kwargs):
        calls.append((repo_id, filename))
        target = snapshot / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(filename)
        return str(target)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    seen = []
    api = FakeApi(list(OPUS_FILES.values()), list(OPUS_FILES))
    root = download_repo("Helsinki-NLP/opus-mt-en-de", lambda done, total, name: seen.append((done, total, name)),
                         api=api)
    assert root == snapshot and (root / "config.json").read_text() == "config.json"
    names = [c[1] for c in calls]
    assert "tf_model.h5" not in names and "pytorch_model.bin" not in names and "model.safetensors" in names
    total = sum(dict(files_to_fetch(api.model_info("x").siblings)).values())
    assert [s[2] for s in seen[:-1]] == names and seen[-1] == (total, total, "")
    dones = [s[0] for s in seen]
    assert dones == sorted(dones) and dones[0] == 0 and {s[1] for s in seen} == {total}


def test_load_checks_the_size_before_downloading(monkeypatch):
    import huggingface_hub

    downloads = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info",
                        lambda self, repo_id, files_metadata=False: FakeApi([10_000_000_000]).model_info(repo_id))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda **kw: downloads.append(kw))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda **kw: downloads.append(kw))
    with pytest.raises(CheckpointError, match="download limit"):
        transformer.load("someone/ten-gigabytes")
    assert downloads == []  # refused before any download


def test_the_picker_names_each_suggested_hub_model_as_its_family_says(monkeypatch, tmp_path):
    """The app's catalog holds no family's ids, labels or sizes: each comes from the registry's ``HubModel``."""
    from app.models import catalog
    from transformer.checkpoint.families import families, hub_model

    suggested = [m for f in families() for m in f.hub]
    assert catalog.hub_models() == [m.repo_id for m in suggested] and len(suggested) >= 8
    assert {m.repo_id for m in suggested if m.download_mb} == set(catalog.MULTILINGUAL)
    assert hub_model("someone/else") is None and catalog.hub_label("someone/else") == "someone/else (from the Hub)"
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache: each sized model would be downloaded
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("ATTN_MAX_DOWNLOAD_MB", "2000")
    for m in suggested:
        label = catalog.hub_label(m.repo_id)
        assert label.startswith(f"{m.repo_id} ({m.what}")
        if m.download_mb is None:
            assert "MB" not in label
        else:
            assert f"{m.download_mb:,} MB" in label
            assert ("over the 2,000 MB download limit" in label) == (m.download_mb > 2000)
