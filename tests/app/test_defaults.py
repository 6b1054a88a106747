"""The shipped defaults: the default checkpoint is the paper's post-norm model, the pre-norm one sits beside it
in ``checkpoints/multi30k-en-de-prenorm``, every default path names them, and every label of a model's length
penalty says "chosen on val" only when its model card says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transformer.checkpoint import check_checkpoint_dir

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "checkpoints" / "multi30k-en-de"
PRENORM = ROOT / "checkpoints" / "multi30k-en-de-prenorm"
SHIPPED = sorted(p for p in (ROOT / "checkpoints").glob("*") if (p / "metadata.json").is_file())


def _meta(folder: Path) -> dict:
    return json.loads((folder / "metadata.json").read_text(encoding="utf-8"))


def _chosen_on_val(folder: Path) -> bool:
    decoding = _meta(folder).get("decoding")
    return isinstance(decoding, dict) and decoding.get("chosen_on") == "val" and "alpha" in decoding


def test_the_default_checkpoint_is_post_norm_and_the_pre_norm_one_sits_beside_it():
    assert check_checkpoint_dir(DEFAULT).norm_first is False  # the paper's layout
    assert check_checkpoint_dir(PRENORM).norm_first is True
    assert not (ROOT / "checkpoints" / "multi30k-en-de-postnorm").exists()
    assert _chosen_on_val(DEFAULT)  # the default's alpha was chosen on val ...
    assert not _chosen_on_val(PRENORM)  # ... the pre-norm one's was not: it decodes with the untuned 0.6
    # each card says which it is
    card = (DEFAULT / "README.md").read_text(encoding="utf-8")
    assert "the default" in card.splitlines()[0]
    pre_card = (PRENORM / "README.md").read_text(encoding="utf-8")
    assert "checkpoints/multi30k-en-de-prenorm" in pre_card and "default 0.6 (not tuned)" in pre_card


def test_every_default_path_names_the_post_norm_default(monkeypatch):
    pytest.importorskip("streamlit")
    import bench.common
    from app.models import catalog
    from transformer import evaluate, heads, train

    monkeypatch.delenv("ATTN_CHECKPOINT", raising=False)
    assert catalog.default_checkpoint() == "checkpoints/multi30k-en-de"
    assert bench.common.DEFAULT_CHECKPOINT == DEFAULT
    assert Path(evaluate.parse_args([]).checkpoint) == Path("checkpoints/multi30k-en-de")
    # the data default is where the README's download puts the corpus, not a development machine's path
    for args in (evaluate.parse_args([]), heads.parse_args([]), train.parse_args([])):
        assert Path(args.data_dir) == Path("data/multi30k")
    assert bench.common.DEFAULT_DATA_DIR == ROOT / "data" / "multi30k"


def test_compare_models_pairs_the_default_with_the_other_layout():
    pytest.importorskip("streamlit")
    from app.models import catalog
    from app.views.compare_models import partner

    infos = catalog.list_checkpoints()
    assert partner("checkpoints/multi30k-en-de", infos) == \
        "checkpoints/multi30k-en-de-prenorm"
    assert partner("checkpoints/multi30k-en-de-prenorm", infos) == \
        "checkpoints/multi30k-en-de"


@pytest.mark.parametrize("folder", SHIPPED, ids=[p.name for p in SHIPPED])
def test_alpha_label_of_every_shipped_checkpoint(folder: Path):
    """"chosen on val" only where the card records ``decoding.chosen_on == "val"``; else the untuned default."""
    pytest.importorskip("streamlit")
    from app.models import catalog

    label = catalog.alpha_label(f"checkpoints/{folder.name}")
    if _chosen_on_val(folder):
        assert label == f"α {_meta(folder)['decoding']['alpha']:g}, chosen on the validation set"
    else:
        assert label == "α 0.6, default 0.6 (not tuned)" and "chosen on val" not in label


def test_alpha_label_follows_the_card(tmp_path):
    pytest.importorskip("streamlit")
    from app.models import catalog

    def label(meta: dict | None) -> str:
        folder = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        if meta is not None:
            (folder / "metadata.json").write_text(json.dumps(meta))
        return catalog.alpha_label(str(folder))

    assert label({"decoding": {"alpha": 1.7, "chosen_on": "val"}}) == "α 1.7, chosen on the validation set"
    assert label({"decoding": {"alpha": 1.7}}) == "α 1.7, from its model card (not chosen on the validation set)"
    assert label({"decoding": {"alpha": 1.7, "chosen_on": "test"}}) == \
        "α 1.7, from its model card (not chosen on the validation set)"
    assert label({"language_pair": "en-de"}) == "α 0.6, default 0.6 (not tuned)"
    assert label(None) == "α 0.6, default 0.6 (not tuned)"


def test_the_app_labels_each_shipped_models_length_penalty(monkeypatch):
    """The sidebar's α help and Compare models' radio, on the real checkpoints: the default's α is "chosen on val",
    the pre-norm partner's "default 0.6 (not tuned)"."""
    pytest.importorskip("streamlit")
    from conftest import assert_clean, new_app, plain, translate

    monkeypatch.delenv("ATTN_CHECKPOINT", raising=False)
    monkeypatch.delenv("ATTN_PUBLIC", raising=False)
    at = translate(new_app({"view": "compare_models"}), "A man rides a bike.")
    assert_clean(at)
    assert "α 1.4, chosen on the validation set" in at.sidebar.slider(key="alpha").help
    assert at.selectbox(key="compare_with").value == "checkpoints/multi30k-en-de-prenorm"
    at.radio(key="compare_alpha").set_value("own")  # each model's own α is named beside the choice
    at.run()
    assert_clean(at)
    own = " ".join(plain(c.value) for c in at.caption if "Each its own α" in plain(c.value))
    assert "multi30k-en-de-prenorm: α 0.6, default 0.6 (not tuned)" in own
    assert "multi30k-en-de: α 1.4, chosen on the validation set" in own
    assert "prenorm: α 0.6, chosen" not in own
