"""Public mode without holes (issue #30, part 4): broken checkpoint folders of every kind are named, never take a
page down; Compare models offers only the allow-list; a link to a broken allow-listed model says so; the image
names its models; Hub files come from the revision whose sizes were checked; visitors never see internal URLs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("streamlit")

from conftest import assert_clean, new_app, plain, set_view, translate  # noqa: E402

import transformer  # noqa: E402
from app.analysis import cached  # noqa: E402
from app.models import catalog  # noqa: E402
from transformer import Transformer, TransformerConfig, save_checkpoint  # noqa: E402
from transformer.checkpoint import check_checkpoint_dir  # noqa: E402

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


def _config_edit(path: Path, **changes) -> None:
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, **changes}))


def _header_entry_not_an_object(path: Path) -> None:
    """Rewrite the safetensors header so one tensor's entry is a list, as a damaged or hostile file may hold."""
    data = (path / "model.safetensors").read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    first = next(k for k in header if k != "__metadata__")
    header[first] = [1, 2, 3]
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    (path / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + size:])


BREAKAGES = {
    "header-list": _header_entry_not_an_object,
    "zero-heads": lambda p: _config_edit(p, n_heads=0),
    "negative-max-len": lambda p: _config_edit(p, max_len=-5),
    "config-list": lambda p: (p / "config.json").write_text("[1, 2]"),
    "bad-tokenizer": lambda p: (p / "tokenizer.model").write_bytes(b"\x00not a sentencepiece model" * 10),
    "bad-metadata": lambda p: (p / "metadata.json").write_text("{not json"),
    "metadata-list": lambda p: (p / "metadata.json").write_text("[]"),
    "bad-heads": lambda p: (p / "heads.json").write_text("{oops"),
    # issue #37, 2: a valid JSON object of the wrong shape, deep nesting, a config that takes the server down
    "metadata-wrong-type": lambda p: (p / "metadata.json").write_text('{"final_validation": [1]}'),
    "metadata-deep": lambda p: (p / "metadata.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    "huge-max-len": lambda p: _config_edit(p, max_len=1_000_000_000),
    "many-layers": lambda p: _config_edit(p, n_encoder_layers=5000),
}


@pytest.fixture()
def repo(tmp_path, tiny_tokenizer, monkeypatch):
    """checkpoints/ with two good models ("good", "other") and one broken folder per kind of damage."""
    v = tiny_tokenizer.vocab_size
    config = TransformerConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=32, n_heads=4, n_encoder_layers=2,
                               n_decoder_layers=2, d_ff=64, max_len=64)
    torch.manual_seed(0)
    good = save_checkpoint(tmp_path / "checkpoints" / "good", Transformer(config).eval(), tiny_tokenizer,
                           {"language_pair": "en-de"})
    shutil.copytree(good, tmp_path / "checkpoints" / "other")
    for name, damage in BREAKAGES.items():
        shutil.copytree(good, tmp_path / "checkpoints" / name)
        damage(tmp_path / "checkpoints" / name)
    monkeypatch.setattr(catalog, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("ATTN_CHECKPOINT", "checkpoints/good")
    monkeypatch.setenv("ATTN_PUBLIC", "1")
    cached.get_checkpoint_list.clear()
    monkeypatch.setattr(cached, "LOAD_FAILURES", cached.LoadFailures())
    yield tmp_path
    cached.get_checkpoint_list.clear()


def test_config_validates_its_own_fields():
    with pytest.raises(ValueError, match="n_heads"):
        TransformerConfig(n_heads=0)  # was ZeroDivisionError
    with pytest.raises(ValueError, match="max_len"):
        TransformerConfig(max_len=-5)  # was a RuntimeError deep inside the model
    with pytest.raises(ValueError, match="d_model"):
        TransformerConfig(d_model=0)
    with pytest.raises(ValueError, match="dropout"):
        TransformerConfig(dropout=1.5)
    with pytest.raises(ValueError, match="eos_id"):
        TransformerConfig(src_vocab_size=3, tgt_vocab_size=3, d_model=8, n_heads=2)  # eos_id 3 outside it
    assert TransformerConfig().n_heads == 8  # the paper's defaults are valid


@pytest.mark.parametrize("name", sorted(set(BREAKAGES) - {"bad-heads"}))
def test_the_quick_check_turns_any_damage_into_a_checkpoint_error(repo, name):
    with pytest.raises(transformer.CheckpointError):
        check_checkpoint_dir(repo / "checkpoints" / name)
    with pytest.raises(transformer.CheckpointError):  # and a real load agrees
        transformer.load(repo / "checkpoints" / name, device="cpu")


def test_listing_marks_every_broken_folder_unavailable_and_survives_anything(repo, monkeypatch):
    infos = {i.path: i for i in catalog.list_checkpoints()}
    assert infos["checkpoints/good"].problem is None and infos["checkpoints/other"].problem is None
    for name in BREAKAGES:
        assert infos[f"checkpoints/{name}"].problem, name
    # even an error nobody foresaw in the check only marks that folder
    import transformer.checkpoint as checkpoint

    real = checkpoint.check_checkpoint_dir
    monkeypatch.setattr(checkpoint, "check_checkpoint_dir",
                        lambda p: real(p) if Path(p).name != "other" else {}["boom"])
    catalog._checked.cache_clear()  # a folder is checked again only when its files change: as if they had
    infos = {i.path: i for i in catalog.list_checkpoints()}
    assert "KeyError" in infos["checkpoints/other"].problem and infos["checkpoints/good"].problem is None


@pytest.mark.parametrize("public", [True, False])
def test_broken_folders_never_take_the_page_down(repo, monkeypatch, public):
    if not public:
        monkeypatch.delenv("ATTN_PUBLIC")
    at = new_app()
    assert_clean(at)
    at = translate(at, "a man rides a bike.")
    assert_clean(at)
    options = at.sidebar.selectbox(key="model_choice").options
    assert not any(name in " ".join(options) for name in BREAKAGES)


def test_compare_offers_and_loads_only_allow_listed_models(repo, monkeypatch):
    monkeypatch.setenv("ATTN_MODELS", "checkpoints/good")
    loaded = []
    real = cached.get_translator

    def spy(checkpoint, device):
        loaded.append(checkpoint)
        return real(checkpoint, device)

    monkeypatch.setattr(cached, "get_translator", spy)
    at = set_view(new_app({"text": "a man rides a bike."}), "compare_models")
    assert_clean(at)
    assert at.selectbox(key="compare_with").options == ["checkpoints/good"] or all(
        "other" not in o for o in at.selectbox(key="compare_with").options)
    link = new_app({"text": "a man rides a bike.", "view": "compare_models", "with": "checkpoints/other"})
    assert_clean(link)
    assert "checkpoints/other" not in loaded


def test_a_link_to_a_broken_allow_listed_model_says_so(repo, monkeypatch):
    monkeypatch.setenv("ATTN_MODELS", "checkpoints/good,checkpoints/zero-heads")
    at = new_app({"model": "checkpoints/zero-heads", "text": "a dog runs."})
    assert not at.exception
    assert at.sidebar.selectbox(key="model_choice").value == "checkpoints/good"
    notices = [plain(w.value) for w in at.sidebar.warning]
    assert any("checkpoints/zero-heads is unavailable" in n and "n_heads" in n for n in notices), notices


@pytest.mark.parametrize("broken", ["metadata-wrong-type", "metadata-deep", "huge-max-len", "many-layers"])
def test_a_broken_default_falls_back_to_a_working_model_with_a_notice(repo, monkeypatch, broken):
    monkeypatch.setenv("ATTN_CHECKPOINT", f"checkpoints/{broken}")
    monkeypatch.setenv("ATTN_MODELS", f"checkpoints/{broken},checkpoints/good")
    at = new_app({"text": "a dog runs."})
    assert_clean(at)
    assert at.sidebar.selectbox(key="model_choice").value == "checkpoints/good"
    notices = [plain(w.value) for w in at.sidebar.warning]
    assert any(f"default model checkpoints/{broken} could not be opened" in n and "checkpoints/good opens instead"
               in n for n in notices), notices
    assert at.text_area(key="source_text").value == "a dog runs." and len(at.get("markdown")) > 0
    # a local server says what is wrong with the default instead (whoever runs it can fix it), never an error page
    monkeypatch.delenv("ATTN_PUBLIC")
    local = new_app({"text": "a dog runs."})
    assert not local.exception
    assert "could not be loaded" in local.error[0].value and broken.split("-")[0] in plain(local.error[0].value)


def test_a_load_failure_is_remembered_for_every_visitor_and_the_default_falls_back(repo, monkeypatch):
    """A model that passes its check but fails to load (what a hostile config did for minutes) is tried once per
    server, not once per visitor; the default falling so opens a working model, with a notice."""
    monkeypatch.setenv("ATTN_CHECKPOINT", "checkpoints/other")
    monkeypatch.setenv("ATTN_MODELS", "checkpoints/other,checkpoints/good")
    cached.get_translator.clear()
    tried = []
    real = catalog.load_translator

    def failing(checkpoint, device):
        tried.append(checkpoint)
        if checkpoint == "checkpoints/other":
            raise transformer.CheckpointError("model.safetensors is corrupt")
        return real(checkpoint, device)

    monkeypatch.setattr(catalog, "load_translator", failing)
    for _ in range(3):  # three visitors
        at = new_app({"text": "a dog runs."})
        assert_clean(at)
        assert at.sidebar.selectbox(key="model_choice").value == "checkpoints/good"
        assert any("default model checkpoints/other could not be opened (model.safetensors is corrupt)"
                   in plain(w.value) for w in at.sidebar.warning)
    assert tried.count("checkpoints/other") == 1
    (repo / "checkpoints" / "other" / "heads.json").write_text("{}")  # its files changed: tried again
    new_app({"text": "a dog runs."})
    assert tried.count("checkpoints/other") == 2
    cached.get_translator.clear()


def test_an_allow_listed_model_outside_checkpoints_is_named_by_its_short_name(repo, monkeypatch, tmp_path_factory):
    """Issue #37, 5: a damaged allow-listed directory outside checkpoints/ is checked and not offered, and no label or
    notice carries the server's path."""
    elsewhere = tmp_path_factory.mktemp("server-secret") / "models"
    shutil.copytree(repo / "checkpoints" / "good", elsewhere / "outside-good")
    shutil.copytree(repo / "checkpoints" / "zero-heads", elsewhere / "outside-broken")
    good, broken = str(elsewhere / "outside-good"), str(elsewhere / "outside-broken")
    monkeypatch.setenv("ATTN_MODELS", f"checkpoints/good,{good},{broken}")
    at = new_app({"text": "a dog runs."})
    assert_clean(at)
    picker = at.sidebar.selectbox(key="model_choice")
    assert picker.options == ["good", "outside-good"]  # the damaged one is not offered; short names only
    link = new_app({"text": "a dog runs.", "model": broken})
    assert not link.exception
    shown = [plain(e.value) for kind in ("warning", "caption", "markdown", "info", "error")
             for e in [*link.sidebar.get(kind), *link.main.get(kind)]]
    assert any("outside-broken is unavailable" in n for n in shown), shown
    assert not any(str(elsewhere) in n or "server-secret" in n for n in shown)
    picked = new_app({"text": "a dog runs.", "model": good})
    assert_clean(picked)
    assert picked.sidebar.selectbox(key="model_choice").value == good
    shown = [plain(e.value) for kind in ("warning", "caption", "markdown", "info") for e in picked.sidebar.get(kind)]
    assert not any("server-secret" in n for n in shown), shown


def test_public_mode_without_attn_models_offers_only_what_ships(repo, monkeypatch):
    monkeypatch.delenv("ATTN_MODELS", raising=False)
    allowed = catalog.allowed_models()
    assert allowed and all(m.startswith("checkpoints/") for m in allowed)  # no Hub id is downloaded by default
    assert not set(catalog.hub_models()) & set(allowed)


def test_the_image_names_the_models_it_offers():
    dockerfile = (ROOT / "Dockerfile").read_text()
    line = next(x for x in dockerfile.splitlines() if x.strip().startswith("ATTN_MODELS="))
    models = line.split("=", 1)[1].strip(" \\").split(",")
    assert models and all((ROOT / m / "config.json").is_file() for m in models), models
    assert {"checkpoints/multi30k-en-de", "checkpoints/multi30k-en-de-prenorm"} <= set(models)


def test_hub_files_come_from_the_revision_whose_sizes_were_checked(monkeypatch, tmp_path):
    import huggingface_hub

    from transformer.checkpoint.hub import download_repo

    storage = tmp_path / "models--someone--model"
    calls = []

    def fake_download(repo_id, filename, revision=None, **kwargs):
        calls.append(revision)
        target = storage / "snapshots" / str(revision) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(filename)
        return str(target)

    class Api:
        def model_info(self, repo_id, files_metadata=False):
            return SimpleNamespace(sha="c0ffee", siblings=[SimpleNamespace(rfilename=n, size=10)
                                                          for n in ("config.json", "model.safetensors")])

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    root = download_repo("someone/model", api=Api())
    assert calls == ["c0ffee", "c0ffee"]  # never "main", which may have moved since the sizes were read
    assert root == storage / "snapshots" / "c0ffee"
    assert (storage / "refs" / "main").read_text() == "c0ffee"  # later cache look-ups by repo id find it


def test_visitors_never_see_internal_urls_or_paths(repo, monkeypatch):
    import transformer.checkpoint.hub as hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("ATTN_MODELS", "checkpoints/good,someone/model")

    def refuse(repo_id, progress=None, api=None, max_mb=None):
        raise OSError("404 Client Error for url: https://hub-mirror.internal:8443/api/models/someone/model "
                      "(cache at /srv/secret/cache/hub)")

    monkeypatch.setattr(hub, "download_repo", refuse)
    at = new_app({"model": "someone/model"})
    assert not at.exception
    errors = " ".join(plain(e.value) for e in at.error)
    assert "could not be loaded" in errors and "someone/model" in errors
    assert "http" not in errors and "hub-mirror" not in errors and "/srv/secret" not in errors
    # outside public mode a developer keeps the whole message
    monkeypatch.delenv("ATTN_PUBLIC")
    assert "https://x.internal/a" in catalog.visitor_message(OSError("at https://x.internal/a"))
