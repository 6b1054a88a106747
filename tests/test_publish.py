"""``python -m transformer.publish``: the dry run checks and lists; the upload goes through a fake Hub API."""

from __future__ import annotations

import shutil

import pytest

from transformer.publish import main


@pytest.fixture()
def ckpt(tiny_checkpoint, tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, path)
    (path / "README.md").write_text("---\nold: header\n---\n# Tiny\n\nBLEU 1.0\n", encoding="utf-8")
    (path / "metadata.json").write_text('{"language_pair": "en-de", "test_2016_flickr": {"bleu": 1.5, "chrf": 9}}')
    (path / "state.pt").write_bytes(b"training state")  # never uploaded
    return path


def test_dry_run_lists_the_files_and_a_valid_card(ckpt, capsys):
    from huggingface_hub import ModelCard

    assert main(["--checkpoint", str(ckpt), "--repo-id", "someone/tiny", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "model.safetensors" in out and "config.json" in out and "tokenizer.model" in out
    assert "state.pt" not in out and "nothing uploaded" in out
    header = out.split("the card's header:\n", 1)[1]
    data = ModelCard(header + "\n").data.to_dict()
    assert data["language"] == ["en", "de"] and data["license"] == "mit" and "bleu" in data["metrics"]
    assert "old" not in data  # the card's own header was replaced, not duplicated


def test_broken_checkpoint_is_refused(ckpt, capsys):
    (ckpt / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    assert main(["--checkpoint", str(ckpt), "--repo-id", "someone/tiny", "--dry-run"]) == 1
    assert "error" in capsys.readouterr().err


def test_upload_goes_to_the_hub_api(ckpt, monkeypatch):
    import huggingface_hub
    from huggingface_hub import ModelCard

    calls = []

    class FakeApi:
        def create_repo(self, repo_id, **kw):
            calls.append(("create", repo_id, kw))

        def upload_folder(self, **kw):
            calls.append(("folder", kw))

        def upload_file(self, **kw):
            calls.append(("file", kw))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    assert main(["--checkpoint", str(ckpt), "--repo-id", "someone/tiny"]) == 0
    assert calls[0][:2] == ("create", "someone/tiny")
    folder = calls[1][1]
    assert folder["folder_path"] == str(ckpt) and "state.pt" in folder["ignore_patterns"]
    card = ModelCard(calls[2][1]["path_or_fileobj"].decode("utf-8"))
    assert card.data.to_dict()["language"] == ["en", "de"] and "# Tiny" in card.text and "BLEU 1.5" in card.text
