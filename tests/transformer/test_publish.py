"""``python -m transformer.publish``: the dry run checks and lists without the network; the upload goes through
a fake ``HfApi`` (monkeypatched: nothing leaves the machine)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import ModelCard

from transformer.publish import main

SCORES = {"bleu": 12.34, "chrf": 45.6, "signature": "nrefs:1|case:mixed"}


@pytest.fixture()
def ckpt(tiny_checkpoint, tmp_path) -> Path:
    """The tiny checkpoint with a card that already has a header, test scores, and training state beside it."""
    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, path)
    (path / "README.md").write_text("---\nlicense: apache-2.0\nold_key: kept\ntags:\n- mine\n---\n# Tiny\n\nBody.\n",
                                    encoding="utf-8")
    meta = json.loads((path / "metadata.json").read_text(encoding="utf-8"))
    meta.update(language_pair="en-fr", test_2016_flickr=SCORES)
    (path / "metadata.json").write_text(json.dumps(meta), encoding="utf-8")
    (path / "state.pt").write_bytes(b"optimizer state")  # training state: never uploaded
    (path / "averaging").mkdir()
    (path / "averaging" / "step1.safetensors").write_bytes(b"x")
    (path / "snapshots").mkdir()
    (path / "snapshots" / "step1.safetensors").write_bytes(b"y")
    return path


@pytest.fixture()
def no_hub(monkeypatch):
    """Any use of the Hub API fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("the Hub API was used")

    monkeypatch.setattr(huggingface_hub, "HfApi", refuse)


def expected_files(path: Path) -> set[str]:
    """Independent listing: every file but state.pt and what is under averaging/."""
    return {p.relative_to(path).as_posix() for p in path.rglob("*")
            if p.is_file() and p.name != "state.pt" and "averaging" not in p.relative_to(path).parts}


def listed(out: str) -> set[str]:
    """The file names the command printed (the indented lines before the card's header)."""
    listing = out.split("dry run:", 1)[0]
    return {line.split()[0] for line in listing.splitlines() if line.startswith("  ")}


def test_dry_run_lists_the_files_and_a_valid_card(ckpt, no_hub, capsys):
    assert main(["--checkpoint", str(ckpt), "--repo-id", "someone/tiny", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert listed(out) == expected_files(ckpt)
    assert "nothing uploaded" in out
    header = out.split("The card's header:\n", 1)[1]
    data = ModelCard(header + "\n").data
    assert data.language == ["en", "fr"] and data.license == "mit"
    assert data.datasets == ["multi30k"] and set(data.metrics) == {"bleu", "chrf"}
    assert {"translation", "transformer", "attention", "mine"} <= set(data.tags)
    assert data.to_dict()["old_key"] == "kept"  # the card's own header is merged, not repeated
    scores = {r.metric_type: r.metric_value for r in data.eval_results}
    assert scores == {"bleu": SCORES["bleu"], "chrf": SCORES["chrf"]}


def test_a_card_without_a_header_gets_one(ckpt, no_hub, capsys):
    (ckpt / "README.md").write_text("# Tiny\n\nBody.\n", encoding="utf-8")
    assert main(["--checkpoint", str(ckpt), "--repo-id", "someone/tiny", "--dry-run"]) == 0
    captured = capsys.readouterr()
    data = ModelCard(captured.out.split("The card's header:\n", 1)[1] + "\n").data
    assert data.language == ["en", "fr"] and data.license == "mit"
    assert captured.err == ""


@pytest.mark.parametrize("damage, message", [
    (lambda p: (p / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}"), "does not load"),
    (lambda p: (p / "tokenizer.model").unlink(), "does not load"),
    (lambda p: (p / "metadata.json").write_text("{}"), "language_pair"),
])
def test_a_broken_checkpoint_or_card_is_refused(ckpt, no_hub, capsys, damage, message):
    damage(ckpt)
    assert main(["--checkpoint", str(ckpt), "--repo-id", "someone/tiny", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--repo-id", "not-a-repo-id"], "USER/NAME"),
    (["--repo-id", "someone/../etc"], "USER/NAME"),
    (["--repo-id", "someone/tiny", "--checkpoint", "/no/such/dir"], "not a checkpoint directory"),
])
def test_bad_arguments_get_a_clear_message(ckpt, no_hub, capsys, args, message):
    argv = ["--checkpoint", str(ckpt), *args] if "--checkpoint" not in args else args
    assert main(argv) in (1, 2)
    assert message in capsys.readouterr().err


class FakeApi:
    """Records what ``transformer.publish`` asks of the Hub."""

    instances: list[FakeApi] = []

    def __init__(self, token=None) -> None:
        self.token, self.calls = token, []
        FakeApi.instances.append(self)

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", repo_id, kw))

    def create_commit(self, repo_id, operations, **kw):
        self.calls.append(("create_commit", repo_id, operations, kw))


def test_upload_is_one_commit_of_the_listed_files_and_the_card(ckpt, monkeypatch, capsys):
    FakeApi.instances = []
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    assert main(["--checkpoint", str(ckpt), "--repo-id", "someone/tiny"]) == 0
    assert "uploaded" in capsys.readouterr().out
    (api,) = FakeApi.instances
    assert api.token == "hf_test_token"
    (create, _, kw), (commit, repo_id, operations, _) = api.calls
    assert create == "create_repo" and kw["exist_ok"] is True and kw["repo_type"] == "model"
    assert commit == "create_commit" and repo_id == "someone/tiny"
    by_path = {op.path_in_repo: op.path_or_fileobj for op in operations}
    assert set(by_path) == expected_files(ckpt)
    assert by_path["model.safetensors"] == str(ckpt / "model.safetensors")
    card = ModelCard(by_path["README.md"].decode("utf-8"))
    assert card.data.language == ["en", "fr"] and card.text.lstrip().startswith("# Tiny")
    assert (ckpt / "README.md").read_text(encoding="utf-8").startswith("---\nlicense: apache-2.0")  # untouched


def test_a_failed_upload_is_one_clear_line(ckpt, monkeypatch, capsys):
    class Refusing(FakeApi):
        def create_repo(self, repo_id, **kw):
            raise PermissionError("401 Unauthorized")

    monkeypatch.setattr(huggingface_hub, "HfApi", Refusing)
    assert main(["--checkpoint", str(ckpt), "--repo-id", "someone/tiny"]) == 1
    err = capsys.readouterr().err
    assert "upload to the Hugging Face Hub failed" in err and "401" in err and "HF_TOKEN" in err
