"""The views beyond attention weights (AppTest, tiny checkpoint): every number from transformer.interpret."""

from __future__ import annotations

import html

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")

from conftest import arr, assert_clean, chart, new_app, set_view, svg_chart, translate  # noqa: E402

from transformer.interpret import attribute, head_computation, value_norms  # noqa: E402

torch.set_num_threads(1)
TEXT = "A man rides a red bike."


def tensors(tr, ref):
    src = torch.tensor([ref.source_ids])
    tgt = torch.tensor([[tr.config.bos_id, *ref.target_ids[:-1]]])
    return src, tgt, torch.tensor([ref.target_ids])


def test_inside_a_head_shows_the_models_numbers(app_env, tr):
    at = set_view(translate(new_app(), TEXT), "inside_a_head")
    assert_clean(at)
    ref = tr.translate(TEXT)
    src, tgt, _ = tensors(tr, ref)
    # it opens on head 1 of the last layer, query 1 (positions count from 1), never blank
    assert at.selectbox(key="head").value == "1" and at.selectbox(key="inside_query").value == 1
    opened = at.dataframe[0].value["softmax weight"].to_numpy()
    np.testing.assert_allclose(opened, ref.cross_attentions[-1][0, 0].numpy(), atol=1e-6)
    at.selectbox(key="head").set_value("2")
    at.selectbox(key="layer").set_value(1)
    at.run()
    at.selectbox(key="inside_query").set_value(2)  # the second output step
    at.run()
    assert_clean(at)
    hc = head_computation(tr.model, src, tgt, "cross", 0, 1, 1)
    table = at.dataframe[0].value
    np.testing.assert_allclose(table["softmax weight"].to_numpy(), hc.weights.numpy(), atol=1e-6)
    np.testing.assert_allclose(table["q·k"].to_numpy(), hc.scores.numpy(), atol=1e-5)
    np.testing.assert_allclose(hc.weights.numpy(), ref.cross_attentions[0][1, 1].numpy(), atol=1e-6)


def test_weighted_norms_toggle(app_env, tr):
    at = translate(new_app(), TEXT)
    at.segmented_control(key="measure").set_value("norms")
    at.run()
    assert_clean(at)
    ref = tr.translate(TEXT)
    src, tgt, _ = tensors(tr, ref)
    norms = value_norms(tr.model, src, tgt).cross_attentions[-1][0].mean(0).numpy()
    np.testing.assert_allclose(svg_chart(at, "Cross-attention · layer 2 · mean over heads")["z"], norms, atol=5.1e-4)
    at.toggle(key="interactive").set_value(True)
    at.run()
    np.testing.assert_allclose(arr(chart(at, "Cross-attention · layer 2 · mean over heads")["data"][0]["z"]), norms,
                               atol=1e-5)
    assert any("Kobayashi" in c.value for c in at.caption)
    assert chart(at, "Cross-attention · layer 2")["data"][0]["colorbar"]["title"]["text"] == "norm"
    assert at.segmented_control(key="scale").proto.disabled  # the 0-1 / stretch scale is for weights only
    at = set_view(at, "all_heads")
    assert_clean(at)
    assert at.segmented_control(key="scale").proto.disabled
    grid_chart = chart(at, "every head")
    assert grid_chart["data"][0]["colorbar"]["title"]["text"] == "norm"
    assert "norm" in grid_chart["data"][1]["hovertemplate"] and "weight" not in grid_chart["data"][1]["hovertemplate"]


def test_what_drives_each_word_shows_the_attributions(app_env, tr):
    at = set_view(translate(new_app(), TEXT), "what_drives_each_word")
    at.segmented_control(key="drivers_method").set_value("input_x_gradient")
    at.run()
    assert_clean(at)
    ref = tr.translate(TEXT)
    src, tgt, labels = tensors(tr, ref)
    source, target = attribute(tr.model, src, tgt, labels, method="input_x_gradient")
    np.testing.assert_allclose(arr(chart(at, "Attribution to the source")["data"][0]["z"]), source[0].numpy(),
                               atol=1e-5)
    np.testing.assert_allclose(arr(chart(at, "Attribution to the decoder input")["data"][0]["z"]),
                               target[0].numpy(), atol=1e-5)
    assert len(at.dataframe[0].value) == tr.config.n_decoder_layers * tr.config.n_heads
    share = chart(at, "Share of the attribution")  # a bar per output step, labelled with the piece it produced
    steps = list(range(1, len(ref.target_tokens) + 1))
    assert [list(arr(bar["x"])) for bar in share["data"]] == [steps, steps]
    assert list(share["layout"]["xaxis"]["tickvals"]) == steps
    assert len(share["layout"]["xaxis"]["ticktext"]) == len(steps)
    last = share["layout"]["xaxis"]["ticktext"][-1]
    assert last.split("·")[0] == html.escape(ref.target_tokens[-1])


def test_a_long_sentences_attribution_window_names_its_pieces(app_env, tr):
    """The window sliders of a long sentence say what the attribution maps' rows and columns are (output and source
    pieces), not the attention maps' queries and keys."""
    long = " ".join(["a man rides a red bike in the park"] * 10)
    at = set_view(translate(new_app(), long), "what_drives_each_word")
    at.segmented_control(key="drivers_method").set_value("input_x_gradient")
    at.run()
    assert_clean(at)
    labels = {s.key: s.label for s in at.slider if s.key.startswith("drivers_chart_")}
    assert labels.get("drivers_chart_kwin") == "Source pieces (columns)", labels
    assert labels.get("drivers_chart_qwin", "Output pieces (rows)") == "Output pieces (rows)", labels
    heatmap = set_view(at, "heatmap")
    assert {s.key: s.label for s in heatmap.slider}.get("heatmap_chart_kwin") == "Key columns"


def test_a_large_model_starts_attribution_with_the_one_pass_method(app_env, tr, monkeypatch):
    from app.page import controls

    small = set_view(translate(new_app(), TEXT), "what_drives_each_word")
    assert small.segmented_control(key="drivers_method").value == "integrated_gradients"
    assert not any("parameters" in c.value for c in small.caption)
    monkeypatch.setattr(controls, "LARGE_MODEL", 1000)  # the tiny model counts as large
    big = set_view(translate(new_app(), "Two dogs run."), "what_drives_each_word")
    assert_clean(big)
    assert big.segmented_control(key="drivers_method").value == "input_x_gradient"
    assert any("parameters: integrated gradients run 32 passes" in c.value for c in big.caption)
    ref = tr.translate("Two dogs run.")
    source, _ = attribute(tr.model, *tensors(tr, ref), method="input_x_gradient")
    np.testing.assert_allclose(arr(chart(big, "Attribution to the source")["data"][0]["z"]), source[0].numpy(),
                               atol=1e-5)


def test_layer_by_layer_ends_at_the_models_own_probabilities(app_env, tr):
    at = set_view(translate(new_app(), TEXT), "layer_by_layer")
    assert_clean(at)
    ref = tr.translate(TEXT)
    out = tr.attentions(ref.source_ids, ref.target_ids[:-1])
    probs = out.logits[0].softmax(-1)
    chosen = probs.gather(1, torch.tensor(ref.target_ids)[:, None])[:, 0].numpy()
    z = arr(chart(at, "Probability of the piece the model produced")["data"][0]["z"])
    np.testing.assert_allclose(z[-1], chosen, atol=1e-5)
    assert z.shape == (tr.config.n_decoder_layers, len(ref.target_ids))


def test_beam_tree_view(app_env, tr):
    at = set_view(translate(new_app(), TEXT), "beam_tree")
    assert_clean(at)
    ref = tr.translate(TEXT, return_tree=True)
    spec = chart(at, "Beam search tree")
    shown = sum(len(t.get("x", [])) for t in spec["data"] if t.get("mode") == "markers+text")
    steps = max(n.step for n in ref.tree.nodes)
    if steps > 25:  # a long search is drawn a window of output steps at a time, the first 25 at first
        assert at.slider(key="beam_tree_swin").value == (1, 25)
        assert shown == sum(n.step <= 25 for n in ref.tree.nodes)
        at.slider(key="beam_tree_swin").set_value((20, steps)).run()
        spec = chart(at, "Beam search tree")
        assert sorted(x for t in spec["data"] if t.get("mode") == "markers+text" for x in t["x"]) == \
            sorted(n.step for n in ref.tree.nodes if n.step >= 20)
    else:
        assert shown == len(ref.tree.nodes)
    assert any(f"{ref.score:.3f}" in c.value for c in at.caption)
    assert not any("transformers' beam-search rules" in c.value for c in at.caption)  # GNMT rules: the same search
    at.sidebar.radio(key="search").set_value("Greedy")
    at.run()
    at.button(key="translate").click()
    at.run()
    assert any("Greedy search keeps one hypothesis" in i.value for i in at.info)


def test_head_table_gains_the_agreement_column(app_env, tr):
    at = set_view(translate(new_app(), TEXT), "head_table")
    at.toggle(key="table_agreement").set_value(True)
    at.run()
    assert_clean(at)
    table = at.dataframe[0].value
    ref = tr.translate(TEXT)
    src, tgt, labels = tensors(tr, ref)
    from transformer.interpret import attention_attribution_agreement

    source, _ = attribute(tr.model, src, tgt, labels, method="integrated_gradients", steps=32)
    expected = attention_attribution_agreement(ref.cross_attentions, source[0])
    row = table[(table["type"] == "Cross") & (table["layer"] == 2) & (table["head"] == 3)].iloc[0]
    assert row["agrees with attribution"] == pytest.approx(float(expected[1, 2]), abs=1e-4)
    assert table[table["type"] == "Encoder"]["agrees with attribution"].isna().all()
    # in view beside the head's name (not past the right edge), and a dash, not "None", for the self-attention heads
    assert list(table.columns).index("agrees with attribution") == list(table.columns).index("head") + 1
    import pyarrow as pa

    shown = pa.ipc.open_stream(at.dataframe[0].proto.arrow_data.styler.display_values).read_pandas()
    encoder = (table["type"] == "Encoder").to_numpy()
    assert set(shown["agrees with attribution"][encoder]) == {"—"}
    assert shown["agrees with attribution"][~encoder & (table["type"] == "Cross").to_numpy()].str.match(
        r"^[+-]\d\.\d{3}$").all()


def alti_checkpoint(tiny_checkpoint, tmp_path, monkeypatch, rule):
    """A copy of the tiny checkpoint with a heads.json ALTI+ section and a ``flag.json`` holding ``rule`` (its
    conditions as JSON; None: no file, the default rule)."""
    import json
    import shutil

    path = tmp_path / "tiny-alti"
    shutil.copytree(tiny_checkpoint, path)
    section = {"hallucination_threshold": 0.5, "threshold_percentile": 1.0, "threshold_split": "val",
               "split": "test", "alignment_agreement": {"mean_of_layers_and_heads": 0.5, "best_layer": 2}}
    (path / "heads.json").write_text(json.dumps({"importance": {}, "alti": section}))
    if rule is not None:
        (path / "flag.json").write_text(json.dumps({"any": rule}))
    monkeypatch.setenv("ATTN_CHECKPOINT", str(path))
    return path


@pytest.mark.parametrize("rule", ["always", "never", None, "refused"])
def test_source_or_prefix_shows_alti_and_the_hallucination_notice(tiny_checkpoint, tmp_path, monkeypatch, tr, rule):
    from transformer.interpret import contributions, looping

    conditions = {"always": [{"column": "source_share", "op": "<", "value": 1.01}],
                  "never": [{"column": "seq_logprob", "op": "<", "value": -1000}], None: None,
                  "refused": [{"column": "seq_logprob", "op": "<", "value": -1000}] * 33}[rule]
    alti_checkpoint(tiny_checkpoint, tmp_path, monkeypatch, conditions)
    at = set_view(translate(new_app(), TEXT), "source_or_prefix")
    assert_clean(at)
    ref = tr.translate(TEXT)
    src, tgt, _ = tensors(tr, ref)
    c = contributions(tr.model, src, tgt)
    share = c.source_share[0].numpy()
    np.testing.assert_allclose(arr(chart(at, "Share from the source")["data"][0]["y"]), share, atol=1e-6)
    np.testing.assert_allclose(arr(chart(at, "Share from the source")["data"][1]["y"]), 1 - share, atol=1e-6)
    full = arr(chart(at, "Contributions to each output piece")["data"][0]["z"])
    np.testing.assert_allclose(full, np.hstack([c.source[0].numpy(), c.target[0].numpy()]), atol=1e-6)
    np.testing.assert_allclose(full.sum(1), 1, atol=1e-5)
    last = ref.cross_attentions[-1].mean(0).numpy()  # (T, S): the last layer, mean over heads (the default)
    np.testing.assert_allclose(arr(chart(at, "Cross-attention · layer 2")["data"][0]["z"]), last, atol=1e-6)
    warned = [w.value for w in at.warning if "may be a hallucination" in w.value]
    said = " ".join([*warned, *(c.value for c in at.caption)])
    if rule == "always":  # the checkpoint's rule flags every translation, and the notice says why, with the value
        assert len(warned) == 1 and "the part of the rule that fired: the output may come from the decoder's own " \
            f"prefix: the mean share taken from the source is {share.mean():.1%} (below 101.0%)" in warned[0]
        assert "flagged when the mean share taken from the source is below 101.0%" in warned[0]
        assert "chosen on the validation set" in warned[0]
    elif rule == "never":
        assert not warned and "Not flagged" in said and "chosen on the validation set" in said
    elif rule == "refused":  # a flag.json the reader refuses (33 conditions): said, not taken for a missing one
        assert bool(warned) == looping(ref.text) and "no rule chosen" not in said
        assert "flag.json is there but was refused (a flag rule has at most 32 conditions, not 33)" in said
    else:  # no flag.json: looping outputs only
        assert bool(warned) == looping(ref.text) and "no rule chosen on the validation set yet" in said
    # the layer to compare with is the view's own address parameter
    at.selectbox(key="source_prefix_layer").set_value("all")
    at.run()
    assert_clean(at)
    assert at.query_params["cl"] == "all"
    every = np.mean([a.mean(0).numpy() for a in ref.cross_attentions], axis=0)
    np.testing.assert_allclose(arr(chart(at, "Cross-attention · every layer")["data"][0]["z"]), every, atol=1e-6)


def test_source_or_prefix_from_a_link_and_over_the_work_limit(app_env, tr, monkeypatch):
    at = new_app({"text": TEXT, "view": "source_or_prefix", "cl": "1"})
    assert_clean(at)
    assert at.selectbox(key="source_prefix_layer").value == 1
    chart(at, "Cross-attention · layer 1")
    monkeypatch.setenv("ATTN_MAX_WORK", "0.0001")
    at = new_app({"text": TEXT, "view": "source_or_prefix", "cl": "9"})  # a layer this model lacks: dropped
    assert not at.exception
    assert any("not computed for this sentence" in i.value for i in at.info)
    assert not [c for c in at.get("plotly_chart") if "Contributions" in c.proto.spec]


def test_the_notice_and_the_table_agree_on_a_cut_outputs_omission(tiny_checkpoint, tmp_path, monkeypatch, tr):
    """An output cut at the length limit: the app's notice reads ``omission`` (the surprise at ``</s>`` not coming
    at the last step) as the corpus table computes it, not NaN."""
    from app.analysis.inference import analyse
    from app.parts.source_or_prefix import row_of
    from transformer.decoding.settings import DecodeSettings
    from transformer.interpret import contributions, table
    from transformer.interpret.columns import COLUMNS
    from transformer.interpret.flagging import DEFAULT_RULE

    settings = tr.settings(DecodeSettings(max_len_a=0.0, max_len_b=3))  # at most 3 output pieces
    [want] = table.batch_rows(tr, [0], [TEXT], None, settings, DEFAULT_RULE)
    a = analyse(tr, TEXT, settings)
    assert a.hit_max_len and want["hit_max_len"] and np.isfinite(want["omission"])
    src, tgt, _ = tensors(tr, a)
    got = row_of(tr, a, contributions(tr.model, src, tgt).source_share[0].numpy())
    for name in ("omission", "seq_logprob", "min_piece_logprob", "source_share", "eos_attention", "repetition"):
        assert got[name] == pytest.approx(want[name], abs=1e-5), name
    # the page: a rule on omission alone fires and names the table's value
    alti_checkpoint(tiny_checkpoint, tmp_path, monkeypatch, [{"column": "omission", "op": ">", "value": -1000}])
    at = new_app({"text": TEXT, "view": "source_or_prefix", "a": "0", "b": "3"})
    assert_clean(at)
    [warned] = [w.value for w in at.warning if "may be a hallucination" in w.value]
    assert f"ending there is {COLUMNS['omission'].value_text(want['omission'])}" in warned
