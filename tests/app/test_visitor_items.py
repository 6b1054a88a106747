"""What a careful first visit found (issue 57, "What a visitor sees"), each item checked where no browser is needed:
a chart's CSS names its elements as Streamlit writes their classes (Ablation's frozen column), Layer by layer's
"on top from layer", the Lines' colours and numbers, Heads across the test set's lines and dashes, the Positional
encoding's wording, the Export blurb and the first picture's alt text. The browser's side: ``test_visitor_browser``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")

from conftest import assert_clean, new_app, pictures, plain, set_view, translate  # noqa: E402

torch.set_num_threads(1)
TEXT = "A man rides a red bike in the park."


def _frontend_rule() -> re.Pattern | None:
    """The rule Streamlit's own frontend turns a key into a class with (``st-key-`` + the key, every character
    outside it replaced): read from the installed bundle, an oracle independent of the app."""
    import streamlit

    for bundle in (Path(streamlit.__file__).parent / "static" / "static" / "js").glob("index.*.js"):
        found = re.search(r"`st-key-`\+e\.trim\(\)\.replaceAll\(/(\[[^\]]+\])/g,`(.)`\)", bundle.read_text())
        if found:
            return re.compile(found.group(1)), found.group(2)
    return None


@pytest.mark.parametrize("key", ["ablation_heads off_chart", "a.b/c", "plain_key-1", " spaced "])
def test_a_key_is_named_in_css_as_streamlit_names_its_element(key):
    from app.page.plots import css_name

    rule = _frontend_rule()
    if rule is None:
        pytest.skip("this Streamlit's bundle writes the class another way")
    pattern, replacement = rule
    assert css_name(key) == pattern.sub(replacement, key.strip())


def test_the_ablation_charts_css_names_classes_that_exist(app_env):
    """Issue 57 §1: every ``.st-key-...`` the page's CSS names is a class some element of the page has (a key with a
    space once named none: the frozen column fell under its chart, the swipe hint showed on a desktop)."""
    from app.page.plots import css_name

    at = new_app({"text": TEXT, "view": "ablation", "off": "cross.1.1,cross.2.2"})
    assert_clean(at)
    keys = set()

    def walk(node) -> None:
        for name in ("key", "id"):
            value = getattr(getattr(node, "proto", None), name, None) or getattr(node, name, None)
            if isinstance(value, str) and value:
                keys.add(value.split("-", 2)[-1] if value.startswith("$$ID") else value)
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    styles = " ".join(h.proto.body for h in at.get("html"))
    named = set(re.findall(r"\.st-key-([A-Za-z0-9_-]+)", styles))
    assert any("ablation_heads_off_chart" in n for n in named)
    classes = {css_name(k) for k in keys}
    mine = {n for n in named if "ablation" in n}  # the view's charts' (the page's own CSS names others)
    assert mine and mine <= classes, (mine - classes, sorted(classes))


def test_on_top_from_layer_is_the_layer_from_which_the_piece_stays_on_top(tr):
    """Issue 57 §6: the column names the layer from which every layer's top guess is the produced piece (a piece on
    top at layer 2, not at 3, and again at 4 is on top from layer 4), read against the lens's own top pieces."""
    from app import report
    from app.analysis import probes
    from app.parts import Table
    from app.parts import layer_by_layer as layers

    assert layers.stays_top_from(np.array([0, 1, 0, 0])) == 3
    assert layers.stays_top_from(np.array([1, 0, 1])) is None and layers.stays_top_from(np.array([0, 0])) == 1
    a = report.analysis_for(tr.translate(TEXT), tr)
    data = probes.lens(tr, a, 5)
    table = next(p for p in layers.parts(a, data, tr.tokenizer.pieces) if isinstance(p, Table))
    column = table.columns.index(layers.STAYS)
    n_layers = data["ids"].shape[0]
    for t, row in enumerate(table.rows):
        on_top = [int(data["ids"][i, t, 0]) == int(data["labels"][t]) for i in range(n_layers)]  # the oracle
        if row[column] == "never":
            assert not on_top[-1]
        else:
            first = int(row[column])
            assert all(on_top[first - 1:]) and (first == 1 or not on_top[first - 2])


def test_lines_never_blend_and_number_their_repeated_pieces():
    """Issue 57 §7: two heads on the same pair of pieces draw two lines apart, each an opaque tint of its own colour
    (nothing see-through, so no colour the legend has not); repeated pieces carry their numbers."""
    from app.drawing import figures

    attn = np.zeros((2, 3, 3))
    attn[:, 0, 0] = 0.9  # both heads: query 1 -> key 1
    attn[:, 1:, 1] = 0.5
    fig = figures.attention_lines(attn, ["▁a", "▁b", "▁a"], ["▁x", "▁y", "▁x"])
    lines = [t for t in fig.data if t.mode == "lines" and t.x is not None and len(t.x) > 1]
    legend = {t.name: t.line.color for t in fig.data if t.mode == "lines" and t.showlegend is not False}
    strong = {t.name: t for t in lines if t.line.width == figures.LINE_BUCKETS[-1][3]}
    assert set(strong) == {"head 1", "head 2"}
    assert strong["head 1"].y[0] != strong["head 2"].y[0]  # apart, not one over the other
    for t in lines:
        assert t.opacity in (None, 1)
        base = legend[t.name]
        assert any(figures.tint(base, a) == t.line.color for _, _, a, _ in figures.LINE_BUCKETS)
    assert figures.tint("#1f77b4", 1.0) == "#1f77b4" and figures.tint("#1f77b4", 0.0) == "#ffffff"
    left, right = [t for t in fig.data if t.mode == "markers+text"]
    assert list(left.text) == ["▁a·1", "▁b", "▁a·3"] and list(right.text) == ["▁x·1", "▁y", "▁x·3"]


def test_the_positional_view_says_the_table_equals_the_formula(tr):
    """Issue 57 §10: no "differs by 0.0e+00": equal to float precision, said so; a table that differs says by how
    much."""
    from app.analysis import probes
    from app.parts import positional_encoding as positional

    diff = float(np.abs(probes.model_pe(tr) - probes.positional_table(*probes.model_pe(tr).shape)).max())
    assert diff <= positional.FLOAT_PRECISION
    assert "equals the formula above, to float precision" in positional.model_table(tr, 10).caption
    assert positional.same_as_formula(0.25) == "it differs from the formula above by 2.5e-01 at most."


def test_the_export_blurb_lists_the_views_the_offline_page_holds(app_env, tr):
    """Issue 57 §11: the Export view's offline page blurb names each view the page draws (its sections), from the
    registry, and none it leaves out."""
    from app import report, views

    page = report.fragment(report.analysis_for(tr.translate(TEXT), tr), tr)
    drawn = re.search(r'data-views="([^"]*)"', page).group(1).split(",")
    at = set_view(translate(new_app(), TEXT), "export")
    assert_clean(at)
    blurb = next(plain(c.value) for c in at.caption if "no server and no network" in c.value)
    for key, title in report.VIEW_TITLES.items():
        assert (title in blurb) == (key in drawn), title
    assert set(report.VIEW_TITLES.values()) <= {view.title for view in views.VIEWS.values()}


def test_the_first_picture_names_its_sentence_and_head(app_env):
    """Issue 57 §20: the first screen's picture has a text alternative naming its sentence and its head."""
    at = new_app({"text": TEXT, "view": "heatmap", "att": "cross", "layer": "2", "head": "3"})
    assert_clean(at)
    alt = re.search(r"!\[(.*?)\]\(data:image/svg", next(m.value for m in at.markdown if "data:image/svg" in m.value))
    said = plain(alt.group(1))
    assert TEXT in said and "Cross-attention · layer 2 · head 3" in said
    assert pictures(at)  # the picture itself is still there


def test_heads_view_numbers_lines_from_0_and_says_why_a_cell_is_a_dash(tiny_checkpoint, tiny_corpus, tmp_path,
                                                                       monkeypatch):
    """Issue 57 §3, §4: the most concentrated sentences are "line i" counted from 0 (as Whole test set and the corpus
    table count them: line i is the (i+1)-th line of the file); a statistic a type has not shows "—", and its
    column's tooltip says why."""
    import shutil

    import transformer
    from transformer.decoding import DecodeSettings
    from transformer.interpret.heads import run

    ckpt = tmp_path / "tiny"
    shutil.copytree(tiny_checkpoint, ckpt)
    tr = transformer.load(ckpt, device="cpu")
    sources = (tiny_corpus / "test.en").read_text().splitlines()[:6]
    data = run(tr, sources, (tiny_corpus / "test.de").read_text().splitlines()[:6], "de", DecodeSettings(beam_size=1),
               batch_size=6)
    data.update(split="test", checkpoint=str(ckpt))
    (ckpt / "heads.json").write_text(json.dumps(data))
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    monkeypatch.setenv("ATTN_DATA_DIR", str(tiny_corpus))
    at = new_app({"text": TEXT, "view": "heads_across_the_test_set", "row": "encoder.1.2"})
    assert_clean(at)
    listing = "\n".join(t.value for t in at.text)
    for i in data["most_confident"]["encoder"][0][1]:
        assert f"line {i}: {sources[i]}" in listing
    grid = at.dataframe[0]
    assert grid.proto.placeholder == "—"
    columns = json.loads(grid.proto.columns)
    assert "shown as — for" in columns["on start token"]["help"]
    assert "Encoder" in columns["alignment agreement"]["help"]
