"""What carries the change (issue #67): the view shows transformer.interpret.patching's own numbers for the picked
edit, step, foil and direction, its choices live in the address, a bad substitute says why in one line, a click on
a head opens its attention, and the probe is counted in the request's work (AppTest, tiny checkpoint); the figures
on one diverging scale, the offline page and a notebook's show()."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")

from conftest import arr, assert_clean, chart, new_app, plain, set_view, translate  # noqa: E402

from transformer.interpret.patching import patch  # noqa: E402

torch.set_num_threads(1)
TEXT = "A man rides a red bike."
VIEW = "what_carries_the_change"


def edit_for(tr, text: str = TEXT):
    """A word of ``text`` and a substitute of the same piece count under the tiny tokenizer, found here by brute
    force over the vocabulary (independent of the app's suggestions): (word number from 1, word, substitute)."""
    from app.analysis.patching import edited_text, words

    length = len(tr.encode_source(text)[0])
    pieces = [p[1:] for p in tr.tokenizer.pieces(list(range(tr.tokenizer.vocab_size)))
              if p.startswith("▁") and p[1:].isalpha() and len(p) > 2]
    for i, (_, _, word) in enumerate(words(text)):
        for other in pieces:
            edited = edited_text(text, i, other)
            if other != word and len(tr.encode_source(edited)[0]) == length and edited != text:
                return i + 1, word, other
    raise AssertionError("no same-length substitute in the tiny vocabulary")


def test_the_view_shows_the_librarys_numbers_for_the_linked_edit(app_env, tr):
    number, word, substitute = edit_for(tr)
    at = new_app({"text": TEXT, "view": VIEW, "pw": str(number), "ps": substitute})
    assert_clean(at)
    assert at.selectbox(key="patch_word").value == number - 1 and at.selectbox(key="patch_substitute").value == \
        substitute
    ref = tr.translate(TEXT)
    edited = TEXT.replace(word, substitute, 1) if TEXT.count(word) == 1 else None
    expected = patch(tr, TEXT, edited or TEXT, target_ids=ref.target_ids)
    encoder = chart(at, "Encoder: one layer's stream")
    np.testing.assert_allclose(arr(encoder["data"][0]["z"]), expected.effect["enc_resid"], atol=1e-5)
    reading = chart(at, "Cross-attention reading")
    np.testing.assert_allclose(arr(reading["data"][0]["z"]), expected.effect["cross_kv"], atol=1e-5)
    heads = chart(at, "Cross-attention heads")
    np.testing.assert_allclose(arr(heads["data"][0]["z"]), expected.effect["cross_head"], atol=1e-5)
    np.testing.assert_allclose(arr(chart(at, "Decoder self-attention heads")["data"][0]["z"]),
                               expected.effect["dec_head"], atol=1e-5)
    # one diverging scale, zero at its centre, wide enough for every value (none clipped)
    bound = max(1.0, *(float(np.abs(expected.effect[k]).max()) for k in ("enc_resid", "cross_kv", "cross_head",
                                                                           "dec_head")))
    for c in (encoder, reading, heads):
        assert c["data"][0]["zmin"] == pytest.approx(-bound) and c["data"][0]["zmax"] == pytest.approx(bound)
    # the edited piece is outlined and its label names both pieces
    j = expected.edited_positions[0]
    shapes = encoder["layout"].get("shapes", [])
    assert [round(s["x0"] + 0.5) for s in shapes] == expected.edited_positions
    label = encoder["layout"]["xaxis"]["ticktext"][j]
    assert "→" in label and tr.tokenizer.pieces([ref.source_ids[j]])[0] in label
    texts = "\n".join(m.value for m in at.markdown)
    assert f"{expected.m_clean:+.3f}" in texts and f"{expected.m_edit:+.3f}" in texts
    assert f"{np.exp(expected.logp_clean):.3f}" in texts


def test_step_foil_and_direction_follow_the_pickers_and_the_address(app_env, tr):
    number, word, substitute = edit_for(tr)
    ref = tr.translate(TEXT)
    edited = TEXT.replace(word, substitute, 1)
    at = new_app({"text": TEXT, "view": VIEW, "pw": str(number), "ps": substitute})
    assert_clean(at)
    default = patch(tr, TEXT, edited, target_ids=ref.target_ids)
    step = (default.step + 1) % len(ref.target_ids)
    at.selectbox(key="patch_step").set_value(step)
    at.segmented_control(key="patch_direction").set_value("noise")
    at.run()
    assert_clean(at)
    assert at.query_params["pt"] == str(step + 1) and at.query_params["pd"] == "noise"
    expected = patch(tr, TEXT, edited, target_ids=ref.target_ids, step=step, direction="noise")
    foils = at.selectbox(key="patch_foil").options  # auto (the edited run's top piece), then the step's candidates
    assert foils[0] == f"auto: {tr.tokenizer.pieces([expected.foil])[0]}" and len(foils) >= 2
    np.testing.assert_allclose(arr(chart(at, "Cross-attention reading")["data"][0]["z"]),
                               expected.effect["cross_kv"], atol=1e-5)
    from app import report

    candidates = report.analysis_for(tr.translate(TEXT, return_attention=True), tr, TEXT).topk_ids[step]
    other = next(int(i) for i in candidates if i not in (expected.target, expected.foil))
    at.selectbox(key="patch_foil").set_value(other)
    at.run()
    assert_clean(at)
    assert at.query_params["pf"] == str(other)
    with_foil = patch(tr, TEXT, edited, target_ids=ref.target_ids, step=step, foil=other, direction="noise")
    np.testing.assert_allclose(arr(chart(at, "Cross-attention reading")["data"][0]["z"]),
                               with_foil.effect["cross_kv"], atol=1e-5)
    # the same address in a new session draws the same
    again = new_app(dict(at.query_params))
    assert_clean(again)
    assert again.selectbox(key="patch_step").value == step and again.segmented_control(
        key="patch_direction").value == "noise" and again.selectbox(key="patch_foil").value == other


def test_a_substitute_of_another_piece_count_says_why_in_one_line(app_env, tr):
    long_word = "x" * 30  # many pieces under any tokenizer
    at = new_app({"text": TEXT, "view": VIEW, "pw": "2", "ps": long_word})
    assert_clean(at)
    warnings = [w.value for w in at.warning]
    assert any("Not patched" in w and "pieces" in w and "\n" not in w for w in warnings), warnings
    assert not [c for c in at.get("plotly_chart")]
    bad = new_app({"text": TEXT, "view": VIEW, "pw": "99", "ps": "<b>"})  # not understood: left at the defaults
    assert_clean(bad)
    assert bad.selectbox(key="patch_word").value != 98 and bad.selectbox(key="patch_substitute").value != "<b>"
    number, _, substitute = edit_for(tr)
    ref = tr.translate(TEXT)
    same = new_app({"text": TEXT, "view": VIEW, "pw": str(number), "ps": substitute, "pf": str(ref.target_ids[0]),
                    "pt": "1"})  # a foil equal to the step's target: refused in one line, back to auto
    assert_clean(same)
    assert any("back to auto" in w.value and "\n" not in w.value for w in same.warning), [w.value for w in same.warning]
    assert same.get("plotly_chart") and "pf" not in same.query_params


def test_a_click_on_a_head_opens_its_attention(app_env, tr):
    number, _, substitute = edit_for(tr)
    at = new_app({"text": TEXT, "view": VIEW, "pw": str(number), "ps": substitute, "ph": "cross.2.3"})
    assert_clean(at)
    assert at.selectbox(key="patch_head").value == "cross.2.3" and at.query_params["ph"] == "cross.2.3"
    ref = tr.translate(TEXT)
    np.testing.assert_allclose(arr(chart(at, "Cross-attention · layer 2 · head 3")["data"][0]["z"]),
                               ref.cross_attentions[1][2].numpy(), atol=1e-5)
    # a click on a cell of the decoder heads' chart (layer 1, head 4) opens that head
    at.session_state["patching_dec_head"] = {"selection": {"points": [{"x": 3, "y": 0, "z": 0.1}]}}
    at.run()
    assert_clean(at)
    assert at.selectbox(key="patch_head").value == "decoder.1.4" and at.query_params["ph"] == "decoder.1.4"
    np.testing.assert_allclose(arr(chart(at, "layer 1 · head 4")["data"][0]["z"]),
                               ref.decoder_attentions[0][3].numpy(), atol=1e-5)


def test_the_view_is_reached_from_the_selector_and_counted_in_the_work(app_env, tr, monkeypatch):
    from app.analysis import probes
    from app.limits import ledger

    at = set_view(translate(new_app(), TEXT), VIEW)
    assert_clean(at)
    assert at.query_params["view"] == VIEW
    spent = []
    real = probes.PROBES["patching"].cost
    monkeypatch.setitem(probes.PROBES, "patching", probes.PROBES["patching"].__class__(
        probes.PROBES["patching"].run, lambda *a: spent.append(real(*a)) or spent[-1], "Patching…"))
    at.run()
    assert spent and spent[0] > 0
    monkeypatch.setenv("ATTN_MAX_WORK", str(spent[0] / 4))  # over the ceiling: nothing patched, and said so
    tight = new_app({"text": TEXT, "view": VIEW})
    assert_clean(tight)
    said = [plain(w.value) for w in tight.info]
    assert any("patching (what carries the change) not computed" in w for w in said), said
    assert not tight.get("plotly_chart")
    assert ledger.max_work() == spent[0] / 4


def test_the_npz_holds_every_site(tr):
    from app import report
    from app.analysis import patching

    number, word, substitute = edit_for(tr)
    a = report.analysis_for(tr.translate(TEXT, return_attention=True), tr, TEXT)
    p = patching.run(tr, a, TEXT.replace(word, substitute, 1))
    data = np.load(io.BytesIO(patching.npz(p, a)))
    for site, values in p.result.effect.items():
        np.testing.assert_array_equal(data[f"effect_{site}"], values)
        np.testing.assert_array_equal(data[f"metric_{site}"], p.result.metric[site])
    assert int(data["step"]) == p.result.step and str(data["edited"]) == p.edited



def test_the_page_translates_the_edited_sentence_once_and_reads_its_step_there(tr, monkeypatch):
    """``patching.run`` translates the edited sentence once, under the page's settings, and the library reads the
    default step from that translation (the one the page shows) instead of translating it again: with the model's
    own settings the result is the library's own (which translates it itself)."""
    from app import report
    from app.analysis import patching
    from transformer.interpret.patching import patch

    number, word, substitute = edit_for(tr)
    edited = TEXT.replace(word, substitute, 1)
    a = report.analysis_for(tr.translate(TEXT, return_attention=True), tr, TEXT)
    calls = []
    search = tr._decode

    def counted(*args, **kwargs):
        calls.append(args)
        return search(*args, **kwargs)

    monkeypatch.setattr(tr, "_decode", counted)
    p = patching.run(tr, a, edited)
    assert len(calls) == 1  # the edited sentence, once
    monkeypatch.setattr(tr, "_decode", search)
    own = patch(tr, patching.text_of(tr, a), edited, target_ids=list(a.target_ids))
    assert (p.result.step, p.result.target, p.result.foil) == (own.step, own.target, own.foil)
    for site, values in own.effect.items():
        np.testing.assert_allclose(p.result.effect[site], values, atol=1e-6)
    assert p.edited_translation == tr.translate(edited, return_attention=False).text

# ------------------------------------------------------------------------------------------------ figures


def test_the_effect_heatmap_is_one_diverging_scale_that_clips_nothing():
    import plotly.graph_objects as go

    from app.drawing import figures
    from app.drawing import patching as drawing

    effect = np.array([[0.0, 1.0, -0.4], [2.5, 0.2, np.nan]])  # a site beyond 1 and one below 0
    bound = drawing.scale_bound(effect, np.array([[0.3]]))
    assert bound == 2.5 and drawing.scale_bound(np.array([0.2, -0.5])) == 1.0  # at least the whole change
    tokens = drawing.marked_tokens(["▁a", "▁red", "▁bike"], ["▁a", "▁blue", "▁bike"], [1])
    assert tokens == ["▁a", "▁red→▁blue", "▁bike"]
    fig = drawing.effect_heatmap(effect, ["embeddings", "layer 1"], tokens, "t", "encoder layer", "source piece",
                                 bound, marked=[1]).to_plotly_json()
    heat = fig["data"][0]
    np.testing.assert_array_equal(arr(heat["z"]), effect)  # the values as they are
    diverging = go.Heatmap(colorscale=figures.DIVERGING).to_plotly_json()["colorscale"]
    assert (heat["zmin"], heat["zmax"]) == (-2.5, 2.5) and heat["colorscale"] == diverging  # zero at the centre
    assert list(fig["layout"]["xaxis"]["ticktext"]) == tokens
    (shape,) = fig["layout"]["shapes"]
    assert (shape["x0"], shape["x1"], shape["y0"], shape["y1"]) == (0.5, 1.5, -0.5, 1.5)
    assert drawing.head_pick({"points": [{"x": 3, "y": 1}]}) == (1, 3) and drawing.head_pick({"points": []}) is None
    heads = drawing.effect_heatmap(np.zeros((2, 3)), ["layer 1", "layer 2"], ["1", "2", "3"], "t", "decoder layer",
                                   "head", 1.0, clickable=True).to_plotly_json()
    cells = heads["data"][1]  # a click target on every cell (a heatmap cannot be selected), named in its hover
    assert sorted(zip(cells["y"], cells["x"])) == [(i, j) for i in range(2) for j in range(3)]
    assert cells["customdata"][-1] == [2, 3, 0.0] and heads["data"][0]["hoverinfo"] == "skip"
    assert drawing.layer_names(3, "embeddings") == ["embeddings", "layer 1", "layer 2"]


# ------------------------------------------------------------------------------------------------ offline


def test_show_draws_the_librarys_effects_in_a_notebook_and_the_offline_page(tr):
    import base64
    import json
    import re
    import zlib

    from app import report
    from app.notebook import show

    number, word, substitute = edit_for(tr)
    result = tr.translate(TEXT, return_attention=True)
    html = show(result, "what_carries_the_change", translator=tr, word=number, substitute=substitute, return_html=True)
    data = json.loads(zlib.decompress(base64.b64decode(re.search(
        r'<script type="application/octet-stream" id="[^"]+-data">([^<]+)</script>', html).group(1))))
    text = tr.tokenizer.decode(result.source_ids)  # a notebook's translation carries no text: its pieces decoded
    edited = text.replace(word, substitute, 1)
    for direction in ("denoise", "noise"):
        expected = patch(tr, text, edited, target_ids=result.target_ids, direction=direction)
        z = [np.asarray(f["data"][0]["z"], dtype=float) for f in data]
        assert any(a.shape == expected.effect["cross_kv"].shape and np.allclose(a, expected.effect["cross_kv"],
                                                                               atol=2e-3) for a in z), direction
        # both directions behind the picker, rounded to 3 decimals on the page
    assert "Cross-attention reading" in html and "Encoder: one layer" in html
    assert "what_carries_the_change" in report.DEFAULT_VIEWS
    with pytest.raises(ValueError, match="translator"):
        show(result, "what_carries_the_change")


def test_export_offers_the_last_patchings_numbers(app_env, tr):
    fresh = set_view(translate(new_app(), TEXT), "export")
    assert_clean(fresh)
    assert any("Open What carries the change" in plain(c.value) for c in fresh.caption)
    number, _, substitute = edit_for(tr)
    at = new_app({"text": TEXT, "view": VIEW, "pw": str(number), "ps": substitute, "pd": "noise"})
    assert_clean(at)
    at = set_view(at, "export")
    assert_clean(at)
    said = [plain(c.value) for c in at.caption]
    assert any("The last edit patched" in c and "(noise)" in c for c in said), said


def test_another_sentence_gets_its_own_edit(app_env, tr):
    at = new_app({"text": TEXT, "view": VIEW, "pw": "6", "ps": "car"})  # word 6 of TEXT, "bike"
    assert_clean(at)
    assert at.selectbox(key="patch_word").value == 5
    at = translate(at, "A woman walks a small brown dog.")  # as many words: its own default edit, not TEXT's
    assert_clean(at)
    assert at.selectbox(key="patch_substitute").value != "car" and "ps=car" not in str(at.query_params)


def test_every_suggestion_keeps_the_sentences_piece_count(tr):
    from app.analysis.patching import edited_text, substitutes, words

    length = len(tr.encode_source(TEXT)[0])
    offered = 0
    for i, (_, _, word) in enumerate(words(TEXT)):
        found = substitutes(tr, TEXT, i, 8)
        offered += len(found)
        assert len({f.casefold() for f in found}) == len(found) and word.casefold() not in {f.casefold() for f in found}
        for other in found:
            assert len(tr.encode_source(edited_text(TEXT, i, other))[0]) == length, (word, other)
    assert offered  # the tiny vocabulary has some
    assert [w for _, _, w in words("A dog's tail, well-kept: 3 cats.")] == ["A", "dog's", "tail", "well-kept", "cats"]
    assert edited_text("A red car, a red bike.", 4, "blue") == "A red car, a blue bike."


def test_a_model_too_large_to_patch_every_site_shows_the_preview(app_env, tr, monkeypatch):
    """Over ``work.PREVIEW_PARAMETERS`` on a CPU (here lowered to the tiny model's size): the charts show the
    library's first-order estimates, the top sites patched exactly beside them, with their agreement."""
    from app.analysis import cached
    from app.limits import work
    from transformer.interpret.patching import preview

    monkeypatch.setattr(work, "PREVIEW_PARAMETERS", work.parameters(tr) - 1)
    cached.RESULTS.clear()  # the exact patching of another test: the preview is a model's, never both
    number, word, substitute = edit_for(tr)
    at = new_app({"text": TEXT, "view": VIEW, "pw": str(number), "ps": substitute})
    assert_clean(at)
    ref = tr.translate(TEXT)
    expected = preview(tr, TEXT, TEXT.replace(word, substitute, 1), top=work.PREVIEW_TOP, target_ids=ref.target_ids)
    np.testing.assert_allclose(arr(chart(at, "Cross-attention reading")["data"][0]["z"]),
                               expected.estimate.effect["cross_kv"], atol=1e-5)
    assert any("first-order" in plain(i.value) for i in at.info)
    table = at.dataframe[0].value
    assert len(table) == len(expected.sites) and list(table.columns) == ["first-order effect", "exact effect"]
    np.testing.assert_allclose(table["exact effect"].astype(float).to_numpy(), expected.exact, atol=2e-3)
    cached.RESULTS.clear()
