"""The model picker and the Compare models view (AppTest), on tiny checkpoints in a temporary checkpoints/."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")

from test_app import arr, assert_clean, chart, new_app, plain, set_view, shown_texts, translate  # noqa: E402

import transformer  # noqa: E402
from app import cached, inference  # noqa: E402
from transformer import Transformer, TransformerConfig, save_checkpoint  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture()
def repo(tmp_path, tiny_tokenizer, monkeypatch):
    """A repository root whose checkpoints/ holds a post-norm and a pre-norm model and two broken ones."""
    v = tiny_tokenizer.vocab_size
    for name, norm_first, seed in (("post", False, 1), ("pre", True, 2)):
        torch.manual_seed(seed)
        config = TransformerConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=32, n_heads=4, n_encoder_layers=2,
                                   n_decoder_layers=2, d_ff=64, max_len=64, norm_first=norm_first)
        save_checkpoint(tmp_path / "checkpoints" / name, Transformer(config).eval(), tiny_tokenizer,
                        {"language_pair": "en-de", "test_2016_flickr": {"bleu": 12.5 if norm_first else 13.25}})
    truncated = tmp_path / "checkpoints" / "truncated"
    save_checkpoint(truncated, Transformer(config).eval(), tiny_tokenizer, {})
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    mismatch = tmp_path / "checkpoints" / "mismatch"
    save_checkpoint(mismatch, Transformer(config).eval(), tiny_tokenizer, {})
    cfg = json.loads((mismatch / "config.json").read_text())
    (mismatch / "config.json").write_text(json.dumps({**cfg, "n_encoder_layers": 3}))
    monkeypatch.setattr(inference, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("ATTN_CHECKPOINT", "checkpoints/post")
    cached.get_checkpoint_list.clear()
    yield tmp_path
    cached.get_checkpoint_list.clear()


def test_checkpoint_check_names_what_is_broken(repo):
    from transformer.checkpoint import check_checkpoint_dir

    assert check_checkpoint_dir(repo / "checkpoints" / "post").norm_first is False
    with pytest.raises(transformer.CheckpointError, match="truncated"):
        check_checkpoint_dir(repo / "checkpoints" / "truncated")
    with pytest.raises(transformer.CheckpointError, match="does not match"):
        check_checkpoint_dir(repo / "checkpoints" / "mismatch")
    # the quick check agrees with a real load
    for name in ("truncated", "mismatch"):
        with pytest.raises(transformer.CheckpointError):
            transformer.load(repo / "checkpoints" / name)


def test_picker_lists_every_checkpoint_and_names_the_broken_ones(repo):
    at = new_app()
    assert_clean(at)
    picker = at.sidebar.selectbox(key="model_choice")
    assert picker.value == "checkpoints/post"
    assert any("post · en-de · post-norm · test BLEU 13.2" in o for o in picker.options)
    assert any("pre · en-de · pre-norm · test BLEU 12.5" in o for o in picker.options)
    assert not any("truncated" in o or "mismatch" in o for o in picker.options)
    notes = " ".join(plain(c.value) for c in at.sidebar.caption)
    assert "checkpoints/truncated is unavailable" in notes and "checkpoints/mismatch is unavailable" in notes
    # picking the other model loads it; the link carries it
    tr_pre = transformer.load(repo / "checkpoints" / "pre", device="cpu")
    picker.set_value("checkpoints/pre")
    at.run()
    assert_clean(at)
    assert at.sidebar.text_input(key="checkpoint").value == "checkpoints/pre"
    assert tr_pre.translate(at.text_area(key="source_text").value).text in shown_texts(at)
    assert at.query_params["model"] == "checkpoints/pre"
    other = new_app(dict(at.query_params))
    assert_clean(other)
    assert other.sidebar.selectbox(key="model_choice").value == "checkpoints/pre"


def test_compare_view_shows_each_models_own_numbers(repo):
    text = "A man rides a red bike."
    at = translate(new_app({"view": "Compare models"}), text)
    assert_clean(at)
    assert at.selectbox(key="compare_with").value == "checkpoints/pre"  # the other layout by default
    post = transformer.load(repo / "checkpoints" / "post", device="cpu")
    pre = transformer.load(repo / "checkpoints" / "pre", device="cpu")
    ref_post, ref_pre = post.translate(text), pre.translate(text)
    texts = shown_texts(at)
    assert ref_post.text in texts and ref_pre.text in texts
    a = arr(chart(at, "Cross-attention · layer 2 · mean over heads · post")["data"][0]["z"])
    b = arr(chart(at, "Cross-attention · layer 2 · mean over heads · pre")["data"][0]["z"])
    np.testing.assert_allclose(a, ref_post.cross_attentions[-1].mean(0).numpy(), atol=1e-5)
    np.testing.assert_allclose(b, ref_pre.cross_attentions[-1].mean(0).numpy(), atol=1e-5)
    summaries = [d.value for d in at.dataframe]
    assert len(summaries) == 2
    w = ref_pre.encoder_attentions[0].numpy()  # (H, S, S)
    entropy = -(w * np.log(np.where(w > 0, w, 1))).sum(-1).mean()
    row = summaries[1][(summaries[1]["type"] == "Encoder") & (summaries[1]["layer"] == 1)].iloc[0]
    assert row["entropy"] == pytest.approx(entropy, rel=1e-4)
    at.selectbox(key="compare_head").set_value("2")
    at.segmented_control(key="compare_att").set_value("encoder")
    at.run()
    b = arr(chart(at, "Encoder self-attention · layer 2 · head 2 · pre")["data"][0]["z"])
    np.testing.assert_allclose(b, ref_pre.encoder_attentions[1][1].numpy(), atol=1e-5)
    set_view(at, "Heatmap")
    assert_clean(at)
