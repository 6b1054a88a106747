"""The Streamlit page, driven by ``streamlit.testing.v1.AppTest`` against the tiny checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

from conftest import (  # noqa: E402
    arr,
    assert_clean,
    chart,
    charts,
    new_app,
    pictures,
    plain,
    set_view,
    shown_texts,
    svg_chart,
    translate,
)

import transformer  # noqa: E402
from app.analysis import inference
from app.drawing import analysis, grid
from app.models import catalog
from app.page import frame  # noqa: E402

# ------------------------------------------------------------------------------------------------ the main path


@pytest.fixture()
def model_runs(monkeypatch):
    """Counts the runs of the model behind the page (a spy on ``inference.analyse``)."""
    calls = []
    real = inference.analyse

    def spy(*args, **kwargs):
        calls.append(args[1] if len(args) > 1 else kwargs.get("text"))
        return real(*args, **kwargs)

    monkeypatch.setattr(inference, "analyse", spy)
    return calls


def test_translate_and_heatmap_match_the_model(app_env, tr, model_runs):
    at = new_app()
    assert_clean(at)
    first = at.text_area(key="source_text").value  # a first visit opens on a translated example
    assert first and tr.translate(first).text in shown_texts(at)
    text = "A man rides a red bike past the old park."  # no other test translates it: the model runs here first
    at = translate(at, text)
    assert_clean(at)
    ref = tr.translate(text)  # the app's defaults: beam 4, alpha 0.6, a 1.5, b 10
    assert ref.text in shown_texts(at)
    # default view: cross-attention, last layer, mean over heads, drawn as an SVG (hover titles carry 3 decimals)
    assert not at.get("plotly_chart")  # the first screen needs no plotly.js
    spec = svg_chart(at, "Cross-attention · layer 2 · mean over heads")
    z = ref.cross_attentions[-1].mean(0).numpy()
    np.testing.assert_allclose(spec["z"], z, atol=5.1e-4)
    assert len(spec["y"]) == len(ref.target_tokens) and len(spec["x"]) == len(ref.source_tokens)
    assert (spec["zmin"], spec["zmax"]) == (0.0, 1.0)  # absolute colour scale by default
    at.segmented_control(key="scale").set_value("stretched")
    at.run()
    spec = svg_chart(at, "Cross-attention · layer 2 · mean over heads")
    assert spec["zmin"] == pytest.approx(z.min(), abs=1e-5)
    assert spec["zmax"] == pytest.approx(z.max(), abs=1e-5)
    # the Interactive switch draws the same numbers with plotly
    at.toggle(key="interactive").set_value(True)
    at.run()
    spec = chart(at, "Cross-attention · layer 2 · mean over heads")
    np.testing.assert_allclose(arr(spec["data"][0]["z"]), z, atol=1e-5)
    assert spec["data"][0]["zmin"] == pytest.approx(z.min(), abs=1e-6)
    at.toggle(key="interactive").set_value(False)
    at.run()
    # switching type, layer and head redraws from the cached result: the model does not run again
    runs = len(model_runs)
    assert runs >= 1
    at.segmented_control(key="att").set_value("encoder")
    at.selectbox(key="layer").set_value(1)
    at.selectbox(key="head").set_value("3")
    at.run()
    assert_clean(at)
    spec = svg_chart(at, "Encoder self-attention · layer 1 · head 3")
    np.testing.assert_allclose(spec["z"], ref.encoder_attentions[0][2].numpy(), atol=5.1e-4)
    at.segmented_control(key="att").set_value("decoder")
    at.run()
    spec = svg_chart(at, "Decoder self-attention · layer 1 · head 3")
    np.testing.assert_allclose(spec["z"], ref.decoder_attentions[0][2].numpy(), atol=5.1e-4)
    for view in ["all_heads", "lines", "step_through", "head_table", "heatmap"]:
        set_view(at, view)
        assert_clean(at)
    assert len(model_runs) == runs  # no model run for any of these changes
    # the URL carries the input, the view and the view's choices
    assert at.query_params["text"] == text and at.query_params["view"] == "heatmap"
    assert at.query_params["att"] == "decoder" and at.query_params["head"] == "3"


def test_every_view_renders_and_shows_the_models_numbers(app_env, tr):
    text = "Two dogs play with a ball on the beach."
    at = translate(new_app(), text)
    ref = tr.translate(text)
    n_layers, n_heads = tr.config.n_decoder_layers, tr.config.n_heads

    at = set_view(at, "all_heads")
    assert_clean(at)
    spec = chart(at, "every head")
    shape = tuple(spec["layout"]["meta"]["grid"])
    assert shape == (n_layers, n_heads, len(ref.target_tokens), len(ref.source_tokens))
    z = arr(spec["data"][0]["z"])
    for layer in range(n_layers):
        for head in range(n_heads):
            np.testing.assert_allclose(grid.grid_block(z, shape, layer, head),
                                       ref.cross_attentions[layer][head].numpy(), atol=1e-5)
    at.pills(key="grid_pick").set_value("L1 · H2")
    at.run()
    assert_clean(at)
    np.testing.assert_allclose(arr(chart(at, "layer 1 · head 2")["data"][0]["z"]),
                               ref.cross_attentions[0][1].numpy(), atol=1e-5)

    at = set_view(at, "lines")
    assert_clean(at)
    assert chart(at, "Cross-attention · layer 2")

    at = set_view(at, "step_through")
    assert_clean(at)
    at.slider(key="step").set_value(2)
    at.run()
    out = tr.attentions(ref.source_ids, ref.target_ids[:-1])
    probs = out.logits[0, 1].softmax(-1)
    bars = chart(at, "Top candidates")["data"][0]
    np.testing.assert_allclose(arr(bars["x"])[0], probs.max().item(), atol=1e-5)
    step_cross = chart(at, "Where this step looked")["data"][0]
    np.testing.assert_allclose(arr(step_cross["z"])[1:],
                               ref.cross_attentions[-1][:, 1, :].numpy(), atol=1e-5)

    at = set_view(at, "head_table")
    assert_clean(at)
    table = at.dataframe[0].value
    assert len(table) == (tr.config.n_encoder_layers + 2 * n_layers) * n_heads
    row = table[(table["type"] == "Cross") & (table["layer"] == 2) & (table["head"] == 1)].iloc[0]
    w = ref.cross_attentions[1][0].numpy()
    assert row["entropy"] == pytest.approx(float(analysis.entropy(w).mean()), rel=1e-4)
    assert row["on special token"] == pytest.approx(float(w[:, -1].mean()), rel=1e-4)
    # selecting a row opens that head's heatmap
    index = int(row.name)
    at.session_state["diag_table"] = {"selection": {"rows": [index], "columns": [], "cells": []}}
    at.run()
    assert_clean(at)
    np.testing.assert_allclose(arr(chart(at, "Cross-attention · layer 2 · head 1")["data"][0]["z"]), w, atol=1e-5)

    at = set_view(at, "masks")
    assert_clean(at)
    # one mask drawn at a time, the encoder's padding first; the picker draws each of the others
    assert len(charts(at)) == 1 and chart(at, "Encoder self-attention: padding mask")
    at.segmented_control(key="masks_shown").set_value("causal").run()
    assert len(charts(at)) == 1
    t = len(ref.target_ids) + 2  # default: two padding positions
    if t > 30:  # a longer sentence opens on a window of 30 positions: all of them, for the check below
        assert arr(chart(at, "Causal mask")["data"][0]["z"]).shape == (30, 30)
        at.slider(key="masks_window").set_value((1, t)).run()
    causal = arr(chart(at, "Causal mask")["data"][0]["z"])
    np.testing.assert_array_equal(causal, np.tril(np.ones((t, t))))
    at.segmented_control(key="masks_shown").set_value("decoder").run()
    padded = arr(chart(at, "padding AND causal")["data"][0]["z"])
    assert not padded[:, -2:].any()
    assert any("largest weight on any blocked position is 0" in s.value for s in at.success)

    at = set_view(at, "positional_encoding")
    assert_clean(at)
    at.slider(key="pe_d").set_value(64)
    at.slider(key="pe_len").set_value(40)
    at.run()
    pe = arr(chart(at, "Sinusoidal positional encoding")["data"][0]["z"])
    np.testing.assert_allclose(pe, transformer.positional_encoding(40, 64).numpy(), atol=1e-6)
    own = arr(chart(at, "The model's own table")["data"][0]["z"])
    np.testing.assert_allclose(own, tr.model.pe.numpy(), atol=1e-6)
    assert chart(at, "How large the encodings are")

    at = set_view(at, "training_evolution")
    assert_clean(at)
    assert any("no training snapshots" in i.value for i in at.info)

    at = set_view(at, "export")
    assert_clean(at)
    assert len(at.get("download_button")) == 3  # JSON, NPZ and the offline page, each built on its click
    assert any("text=" in c.value for c in at.code)


def test_head_ablation_shows_both_translations(app_env, tr):
    text = "A girl walks on the street."
    at = translate(new_app(), text)
    at = set_view(at, "ablation")
    assert_clean(at)
    at.multiselect(key="ablate").set_value(["Cross · L1 · H1", "Encoder · L2 · H3"])
    at.button(key="ablate_run").click()
    at.run()
    assert_clean(at)
    mask = inference.build_head_mask(tr, (("cross", 0, 0), ("encoder", 1, 2)))
    ref = tr.translate(text, head_mask=mask)
    base = tr.translate(text)
    texts = shown_texts(at)
    assert base.text in texts and ref.text in texts
    score_metrics = [m for m in at.metric if m.label == "Score"]
    assert [m.value for m in score_metrics] == [f"{base.score:.3f}", f"{ref.score:.3f}"]
    assert score_metrics[1].delta == f"{ref.score - base.score:+.3f}"
    # the chart opens where heads are off: the first attention type (encoder, decoder self, cross) and layer with one
    after = arr(chart(at, "heads off: Encoder self-attention · layer 2 · mean over the")["data"][0]["z"])
    live = [h for h in range(tr.config.n_heads) if h != 2]
    np.testing.assert_allclose(after, ref.encoder_attentions[1][live].mean(0).numpy(), atol=1e-5)
    at.segmented_control(key="att").set_value("cross").run()  # another type, then other heads: the chart stays on a
    at.selectbox(key="layer").set_value(1).run()  # place where heads are off
    at.multiselect(key="ablate").set_value(["Cross · L1 · H1", "Decoder self · L2 · H1"]).run()
    assert_clean(at)
    assert chart(at, "heads off: Cross-attention · layer 1 · mean over the")


def test_url_opens_the_same_view(app_env, tr):
    text = "A woman runs in the park."
    at = new_app({"text": text, "beam": "1", "view": "lines", "att": "encoder", "layer": "1", "b": "7"})
    assert_clean(at)
    ref = tr.translate(text, beam_size=1, max_len_b=7)
    assert ref.text in shown_texts(at)
    assert at.segmented_control(key="view").value == "lines"
    assert at.radio(key="search").value == "Greedy"
    assert chart(at, "Encoder self-attention · layer 1")
    # junk in the URL is ignored, not an error
    at = new_app({"text": "A dog.", "beam": "lots", "view": "<script>", "layer": "-4", "alpha": "nan"})
    assert_clean(at)


def test_two_visitors_each_get_their_own_result(app_env, tr):
    first = translate(new_app(), "A boy plays with a ball.")
    second = translate(new_app(), "Two people are walking on the beach.")
    first.run()
    assert tr.translate("A boy plays with a ball.").text in shown_texts(first)
    assert tr.translate("Two people are walking on the beach.").text in shown_texts(second)
    assert first.query_params["text"] != second.query_params["text"]


# ------------------------------------------------------------------------------------------------ bad input


def test_empty_text_gets_a_warning(app_env):
    at = translate(new_app(), "   \n ")
    assert_clean(at)
    assert any("empty" in w.value for w in at.warning)
    assert not [c for c in charts(at) if "attention" in str(c["layout"].get("title", "")).lower()]
    assert not pictures(at)
    assert any("Type or pick a sentence" in i.value for i in at.info)
    assert "text" not in at.query_params


def test_long_text_is_truncated_with_a_notice(app_env, tr):
    text = " ".join(["a red dog runs on the street"] * 20)
    at = translate(new_app(), text)
    assert_clean(at)
    assert any("only the first" in w.value and str(tr.max_source_tokens) in w.value for w in at.warning)
    spec = svg_chart(at, "Cross-attention")
    assert len(spec["x"]) <= tr.config.max_len


def test_emoji_and_markup_are_shown_as_text(app_env, tr):
    text = "A dog 🐕 <script>alert('x')</script> <b>runs</b> & 日本語"
    at = translate(new_app(), text)
    assert_clean(at)
    assert any("<unk>" in plain(i.value) for i in at.info)  # characters outside the vocabulary are named
    assert tr.translate(text).text in shown_texts(at)
    # no element lets HTML through, and token labels in the charts are escaped
    # no raw HTML anywhere; the heatmap is an image (an SVG in a data: address, which can run nothing)
    assert not [m.value for m in at.markdown if m.proto.allow_html] and at.markdown[0].value == frame.PAGE_NAME
    raw = pictures(at)
    assert len(raw) == 1 and raw[0].startswith("<svg")
    pieces = shown_texts(at)  # the subword pieces are plain text
    assert any("<unk>" in p and "▁" in p for p in pieces)
    spec = svg_chart(at, "Cross-attention")
    tags = {el.tag.split("}")[1] for el in spec["root"].iter()}
    assert tags <= {"svg", "text", "title", "g", "rect", "defs", "linearGradient", "stop"}  # no script, no link
    assert not [a for el in spec["root"].iter() for a in el.attrib if a.lower().startswith("on")]
    assert any(label.startswith("<unk>") for label in spec["x"])  # shown as typed, parsed from escaped text
    assert "&lt;unk&gt;" in raw[0] and "<unk>" not in raw[0]


def test_bad_checkpoint_gives_a_clear_message(app_env, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_CHECKPOINT", str(tmp_path / "missing"))
    at = new_app()
    assert not at.exception
    assert len(at.error) == 1 and "could not be loaded" in at.error[0].value
    assert "No such directory" in plain(at.error[0].value)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (broken / "model.safetensors").write_bytes(b"garbage")
    (broken / "tokenizer.model").write_bytes(b"garbage")
    at.sidebar.text_input(key="checkpoint").set_value(str(broken))
    at.run()
    assert not at.exception
    assert len(at.error) == 1 and "tokenizer.model" in plain(at.error[0].value)
    # a name that looks like markup is escaped in the message, never rendered
    at.sidebar.text_input(key="checkpoint").set_value("<b>no</b> *such* dir")
    at.run()
    assert not at.exception and len(at.error) == 1
    assert "\\<b\\>no\\</b\\> \\*such\\* dir" in at.error[0].value
    assert "<b>no</b> *such* dir" in plain(at.error[0].value)
    # back to a good checkpoint: the page works again
    at.sidebar.text_input(key="checkpoint").set_value(str(app_env))
    at.run()
    assert_clean(at)


def test_unreachable_hub_repo_gives_a_clear_message(app_env, monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", offline)
    at = new_app()
    at.sidebar.text_input(key="checkpoint").set_value("nobody/no-such-model")
    at.run()
    assert not at.exception
    message = plain(at.error[0].value)
    assert "Hugging Face Hub" in message and "nobody/no-such-model" in message


def test_missing_default_checkpoint_explains_what_to_do(monkeypatch, tmp_path):
    monkeypatch.delenv("ATTN_CHECKPOINT", raising=False)
    monkeypatch.setattr(catalog, "REPO_ROOT", tmp_path)
    monkeypatch.chdir(tmp_path)
    from app.analysis import cached

    cached.get_translator.clear()  # a test before may have loaded the real default under the same name
    at = new_app()
    assert not at.exception
    assert at.sidebar.text_input(key="checkpoint").value == "checkpoints/multi30k-en-de"
    assert "could not be loaded" in at.error[0].value
    assert any("python -m transformer.train" in i.value for i in at.info)
