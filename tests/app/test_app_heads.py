"""The "Heads across the test set" view and the Ablation view's "N least important" (AppTest, tiny checkpoint)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")

from conftest import arr, assert_clean, chart, new_app, set_view, translate  # noqa: E402

import transformer  # noqa: E402
from transformer.decoding import DecodeSettings  # noqa: E402
from transformer.interpret.heads import KINDS, ranked_heads, run  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture()
def with_heads(tiny_checkpoint, tiny_corpus, tmp_path, monkeypatch):
    ckpt = tmp_path / "tiny"
    shutil.copytree(tiny_checkpoint, ckpt)
    tr = transformer.load(ckpt, device="cpu")
    sources = (tiny_corpus / "test.en").read_text().splitlines()[:8]
    refs = (tiny_corpus / "test.de").read_text().splitlines()[:8]
    data = run(tr, sources, refs, "de", DecodeSettings(beam_size=2), batch_size=8)
    data.update(split="test", checkpoint=str(ckpt))
    (ckpt / "heads.json").write_text(json.dumps(data))
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    monkeypatch.setenv("ATTN_DATA_DIR", str(tiny_corpus))
    return ckpt, data, sources


def test_heads_view_draws_heads_json(with_heads):
    ckpt, data, sources = with_heads
    at = translate(new_app({"view": "heads_across_the_test_set"}), "A dog runs in the park.")
    assert_clean(at)
    grid = chart(at, "Head importance")
    for i, kind in enumerate(KINDS):
        np.testing.assert_allclose(arr(grid["data"][i]["z"]), np.asarray(data["importance"][kind]), atol=1e-9)
    curve = chart(at, "Pruning curve")
    assert [p["bleu"] for p in data["pruning"]] == list(arr(curve["data"][0]["y"]))
    table = at.dataframe[0].value
    assert len(table) == sum(len(r) for k in KINDS for r in data["importance"][k])
    columns = json.loads(at.dataframe[0].proto.columns)
    assert columns["top offset"]["type_config"]["format"] == "%+d"  # a position difference, not 1.000 / -1.000
    assert columns["entropy"]["type_config"]["format"] == "%.3f"
    index = int(table[(table["type"] == "Cross") & (table["layer"] == 1) & (table["head"] == 2)].index[0])
    at.session_state["heads_table"] = {"selection": {"rows": [index], "columns": [], "cells": []}}
    at.run()
    assert_clean(at)
    assert chart(at, "Cross-attention · layer 1 · head 2")
    assert at.query_params["row"] == "cross.1.2"  # the selected row is in the address, and the address opens it
    assert chart(new_app(dict(at.query_params)), "Cross-attention · layer 1 · head 2")
    top = data["most_confident"]["cross"][0][1]
    listing = "\n".join(t.value for t in at.text)
    assert sources[top[0]] in listing


def test_heads_view_without_heads_json_says_how_to_make_it(tiny_checkpoint, monkeypatch):
    monkeypatch.setenv("ATTN_CHECKPOINT", str(tiny_checkpoint))
    at = new_app({"view": "heads_across_the_test_set"})
    assert_clean(at)
    assert any("python -m transformer.heads" in i.value for i in at.info)


def test_ablation_switches_off_the_least_important_heads(with_heads):
    ckpt, data, _ = with_heads
    at = set_view(translate(new_app(), "A dog runs in the park."), "ablation")
    at.number_input(key="ablate_n").set_value(3)
    at.button(key="ablate_least").click()
    at.run()
    assert_clean(at)
    expected = ranked_heads(data["importance"], KINDS)[:3]
    labels = {"encoder": "Encoder", "decoder": "Decoder self", "cross": "Cross"}
    assert at.multiselect(key="ablate").value == [f"{labels[k]} · L{layer + 1} · H{h + 1}" for k, layer, h in expected]
