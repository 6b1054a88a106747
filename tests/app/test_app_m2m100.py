"""A tiny M2M100 and a tiny NLLB checkpoint (12 layers x 16 heads), saved by transformers, open in every view of
the explorer; the picker offers the multilingual Hub models and says when one is over the download limit."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("streamlit")
pytest.importorskip("transformers")

from conftest import VIEWS, assert_clean, new_app, set_view, shown_texts, translate  # noqa: E402
from m2m100_models import save_m2m100, train_spm  # noqa: E402

import transformer  # noqa: E402

torch.set_num_threads(1)
TEXT = "A man rides a red bike."


@pytest.fixture(scope="module")
def spm_dir(tmp_path_factory, tiny_corpus):
    return train_spm(tmp_path_factory.mktemp("fairseq-spm"), tiny_corpus)


@pytest.mark.parametrize("name,target", [("m2m100", "fr"), ("nllb-12x16", "fra_Latn")])
def test_a_multilingual_checkpoint_opens_in_every_view(tmp_path, spm_dir, monkeypatch, name, target):
    from app.page import controls

    _, _, path = save_m2m100(tmp_path, spm_dir, name)
    monkeypatch.setenv("ATTN_CHECKPOINT", str(path))  # the save_pretrained directory itself, converted on load
    monkeypatch.setattr(controls, "LARGE_VOCABULARY", 100)  # these vocabularies count as NLLB-large
    tr = transformer.load(path, device="cpu")
    at = new_app()
    assert_clean(at)
    src, tgt = at.selectbox(key="src_lang"), at.selectbox(key="tgt_lang")
    assert src.value == tr.tokenizer.default_src and len(tgt.options) == len(tr.languages)
    assert at.slider(key="alpha").value == tr.default_alpha == 1.0  # generate()'s length penalty, as beam scores it
    assert "French · " + target in tgt.options and "English · " + tr.tokenizer.default_src in src.options
    at = tgt.set_value(target).run()
    at = translate(at, TEXT)
    assert_clean(at)
    expected = tr.translate(TEXT, beam_size=4, alpha=1.0, tgt_lang=target, return_attention=False)
    assert expected.target_tokens[0] == (target if name.startswith("nllb") else f"__{target}__")
    assert expected.text in shown_texts(at)
    for view in VIEWS:
        at = set_view(at, view)
        assert_clean(at)
        if view == "what_drives_each_word":  # attribution says what it caps at a large vocabulary
            assert at.segmented_control(key="drivers_method").value == "input_x_gradient"
            assert any(f"{tr.config.tgt_vocab_size:,}-piece vocabulary" in c.value for c in at.caption)


def test_the_picker_offers_nllb_and_m2m100_and_says_when_too_large(monkeypatch, app_env):
    import huggingface_hub

    def not_cached(*args, **kwargs):
        raise FileNotFoundError("not in the local cache")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", not_cached)
    monkeypatch.setenv("ATTN_MAX_DOWNLOAD_MB", "2000")
    at = new_app()
    assert_clean(at)
    picker = at.selectbox(key="model_choice")
    nllb = next(o for o in picker.options if o.startswith("facebook/nllb-200-distilled-600M"))
    m2m = next(o for o in picker.options if o.startswith("facebook/m2m100_418M"))
    assert "over the 2,000 MB download limit" in nllb and "ATTN_MAX_DOWNLOAD_MB" in nllb
    assert "over" not in m2m and "100 languages" in m2m
    monkeypatch.setenv("ATTN_PUBLIC", "1")  # the hosted demo: only when ATTN_MODELS names them
    assert not [o for o in new_app().selectbox(key="model_choice").options if o.startswith("facebook/")]
    monkeypatch.setenv("ATTN_MODELS", f"{app_env},facebook/m2m100_418M")
    assert any(o.startswith("facebook/m2m100_418M") for o in new_app().selectbox(key="model_choice").options)


def test_the_languages_are_in_the_address_and_a_link_restores_them(tmp_path, spm_dir, monkeypatch):
    _, _, path = save_m2m100(tmp_path, spm_dir, "m2m100")
    monkeypatch.setenv("ATTN_CHECKPOINT", str(path))
    tr = transformer.load(path, device="cpu")
    at = translate(new_app(), TEXT)
    at = at.selectbox(key="tgt_lang").set_value("fr").run()
    assert_clean(at)
    assert at.query_params["tgt"] == "fr" and at.query_params["src"] == tr.tokenizer.default_src
    fresh = new_app(dict(at.query_params))  # only the address: a new visitor
    assert_clean(fresh)
    assert fresh.selectbox(key="tgt_lang").value == "fr"
    expected = tr.translate(TEXT, beam_size=4, alpha=1.0, tgt_lang="fr", return_attention=False)
    assert expected.text in shown_texts(fresh)
    odd = new_app({**dict(at.query_params), "tgt": "xx"})  # a language this model does not take
    assert_clean(odd)
    assert odd.selectbox(key="tgt_lang").value == tr.tokenizer.default_tgt
    assert any("tgt=" in i.value and "no language xx" in i.value for i in odd.info)
