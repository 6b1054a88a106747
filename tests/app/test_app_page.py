"""The page does what the visitor just asked, at once, and says so when it changes their input (AppTest, tiny
checkpoint): issue #31's part 2."""

from __future__ import annotations

import pytest
import torch

import transformer

pytest.importorskip("streamlit")

from conftest import assert_clean, chart, new_app, pictures, plain, set_view, shown_texts  # noqa: E402

from app.analysis import inference  # noqa: E402
from app.page import controls, heatmaps, state
from app.views import GROUPS, VIEWS  # noqa: E402

torch.set_num_threads(1)


def infos(at) -> str:
    """The page's notices, with the names of a link's ignored parameters listed as plain text below one."""
    return " ".join([plain(i.value) for i in at.info] + [t.value for t in at.text])


def test_a_new_visitors_first_run_lets_the_browser_paint_its_picture_once(app_env, monkeypatch):
    """A session's first run waits ``state.FIRST_PAINT_S`` once its picture has been sent (the browser paints it
    before the page's controls arrive); its later runs, and a first run opening on a view with no picture, do not."""
    waits: list[float] = []
    monkeypatch.setattr(state, "sleep", waits.append)
    at = new_app()
    assert_clean(at)
    assert pictures(at) and waits == [state.FIRST_PAINT_S]
    at.selectbox(key=controls.LAYER).set_value(1).run()  # a control: the same session's next run
    assert_clean(at)
    assert pictures(at) and waits == [state.FIRST_PAINT_S]
    assert_clean(new_app({"view": "all_heads"}))  # a new visitor on a view drawn with plotly
    assert waits == [state.FIRST_PAINT_S]


def test_the_box_and_the_examples_apply_at_once(app_env, tr):
    at = new_app()
    text = "Two dogs play in the park."
    at.text_area(key="source_text").set_value(text)  # Ctrl+Enter (or leaving the box): no Translate press
    at.run()
    assert_clean(at)
    assert tr.translate(text).text in shown_texts(at) and at.query_params["text"] == text
    at.selectbox(key="example").set_value(state.EXAMPLES[1])
    at.run()
    assert tr.translate(state.EXAMPLES[1]).text in shown_texts(at)
    assert at.query_params["text"] == state.EXAMPLES[1]
    at.sidebar.radio(key="search").set_value("Greedy")  # the sidebar too
    at.run()
    assert at.query_params["beam"] == "1"
    assert tr.translate(state.EXAMPLES[1], beam_size=1).text in shown_texts(at)
    assert not any("press" in c.value.lower() for c in at.caption)  # no half-applied state to point at



def test_an_address_that_lags_behind_the_page_does_not_undo_the_visitors_input(app_env, tr):
    """A click sent before the browser got the previous run's address (Ctrl+Enter, then Translate at once)
    carries the older address; the page keeps what the visitor typed and writes the address anew. Only a first
    visit and Back/Forward adopt the address (Back/Forward is covered in Chromium by ``test_browser.py``)."""
    first, second = "A man rides a red bike.", "Two dogs play in the park."
    at = new_app({"text": first})
    stale = dict(at.query_params)
    assert stale["text"] == first
    at.text_area(key="source_text").set_value(second)  # Ctrl+Enter: applied, the address says the second
    at.run()
    assert at.query_params["text"] == second
    at.query_params.clear()
    at.query_params.update(stale)  # the browser still showed the first sentence's address when it clicked
    at.button(key="translate").click()
    at.run()
    assert_clean(at)
    assert at.text_area(key="source_text").value == second
    assert tr.translate(second).text in shown_texts(at) and tr.translate(first).text not in shown_texts(at)
    assert at.query_params["text"] == second

def test_a_long_paste_is_cut_with_a_notice(app_env):
    at = new_app()
    pasted = ("A dog runs on the beach. " * 500)[:11_589]
    at.text_area(key="source_text").set_value(pasted)
    at.run()
    assert_clean(at)
    assert at.text_area(key="source_text").value == pasted[:inference.MAX_INPUT_CHARS]
    assert "11,589" in infos(at) and f"{inference.MAX_INPUT_CHARS:,}" in infos(at)
    linked = new_app({"text": pasted})
    assert "11,589" in infos(linked)


def test_bidirectional_controls_are_removed_and_the_visitor_told(app_env, tr):
    at = new_app({"text": "A dog \u202eruns\u202c in the park."})
    assert_clean(at)
    assert at.text_area(key="source_text").value == "A dog runs in the park."
    assert "U+202E" in infos(at) and "2 bidirectional" in infos(at)
    assert tr.translate("A dog runs in the park.").text in shown_texts(at)
    at.text_area(key="source_text").set_value("Two \u2067dogs\u2069 play.")
    at.run()
    assert at.text_area(key="source_text").value == "Two dogs play."
    assert "bidirectional" in infos(at) and "\u2067" not in at.query_params["text"]


def test_link_values_that_cannot_be_used_are_named(app_env):
    cases = [({"view": "all_heads", "pick": "9.9"}, "pick="), ({"view": "lines", "lf": "999"}, "lf="),
             ({"view": "compare_models", "with": "checkpoints/nowhere"}, "with="),
             ({"view": "heatmap", "off": "cross.1.1"}, "off (not used by the Heatmap view)"),
             ({"view": "heatmap", "layer": "x"}, "layer")]
    for link, named in cases:
        at = new_app({"text": "A dog runs.", **link})
        assert_clean(at)
        assert named in infos(at), (link, infos(at))


def test_leaving_a_view_drops_its_parameters(app_env):
    at = new_app({"text": "A dog runs.", "view": "ablation", "off": "cross.1.2"})
    assert at.query_params["off"] == "cross.1.2"
    at = set_view(at, "heatmap")
    assert "off" not in at.query_params


def test_a_clicked_head_opens_beside_the_grid(app_env):
    at = new_app({"text": "A dog runs in the park.", "view": "all_heads"})
    at.pills(key="grid_pick").set_value("L1 · H2")
    at.run()
    assert_clean(at)
    places: dict[str, tuple] = {}

    def walk(node, path: tuple) -> None:
        if getattr(node, "type", "") == "plotly_chart":
            import json
            title = json.loads(node.proto.spec)["layout"].get("title", {}).get("text", "")
            places[title] = path
        for i, child in getattr(node, "children", {}).items():
            walk(child, (*path, (getattr(child, "type", ""), i)))

    walk(at.main, ())
    grid_path = next(p for t, p in places.items() if "every head" in t)
    large_path = next(p for t, p in places.items() if "layer 1 · head 2" in t)
    # the same row of columns, different columns: side by side, not below the grid
    split = next(i for i, (a, b) in enumerate(zip(grid_path, large_path)) if a != b)
    assert grid_path[split][0] == large_path[split][0] == "column"
    assert chart(at, "layer 1 · head 2")


def test_many_sentences_sit_in_a_bounded_scrolling_box(app_env):
    text = " ".join(f"Dog number {i} runs in the park." for i in range(1, 91))
    at = new_app({"text": text})
    assert_clean(at)
    boxes = []

    def walk(node) -> None:
        proto = getattr(node, "proto", None)
        height = getattr(getattr(proto, "height_config", None), "pixel_height", 0)
        if height and any("90. Dog number 90" in getattr(t, "value", "") for t in _texts(node)):
            boxes.append(height)
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    assert boxes and max(boxes) <= 400


def _texts(node) -> list:
    found = [node] if getattr(node, "type", "") == "text" else []
    for child in getattr(node, "children", {}).values():
        found += _texts(child)
    return found


def test_views_come_in_groups_with_help_and_the_name_is_on_the_page(app_env):
    at = new_app()
    assert_clean(at)
    assert 3 <= len(GROUPS) <= 6 and sum(len(v) for v in GROUPS.values()) == len(VIEWS)
    assert all(view.help.strip() for view in VIEWS.values())
    group = at.segmented_control(key="view_group")
    assert list(group.options) == list(GROUPS) and group.help
    view = at.segmented_control(key="view")
    assert len(view.options) == len(GROUPS[group.value]) and view.help
    assert all(VIEWS[v].help in plain(view.help) for v in GROUPS[group.value])  # one line of help per view
    assert any("Attention explorer" in m.value for m in at.main.markdown)
    shown = at.segmented_control(key="view").value
    at.segmented_control(key="view_group").set_value("Across data")  # a group shows its views and opens none
    at.run()
    view = at.segmented_control(key="view")
    assert view.value == shown and at.query_params.get("view", "heatmap") == shown  # the view last shown stays
    assert not pictures(at) and not at.get("plotly_chart")  # but is not drawn: nothing runs until a view is picked
    assert len(view.options) == len(GROUPS["Across data"]) + 1  # its pill kept, hidden, last
    assert any("Pick one of the views of Across data" in c.value for c in at.main.caption)
    set_view(at, GROUPS["Across data"][1])  # the work starts when one is picked
    assert at.query_params["view"] == GROUPS["Across data"][1]
    assert len(at.segmented_control(key="view").options) == len(GROUPS["Across data"])


def test_sidebar_scores_read_as_written(tiny_checkpoint, tmp_path, monkeypatch, tr):
    import transformer

    ckpt = tmp_path / "scored"
    meta = {"language_pair": "en-de", "test_2016_flickr": {"bleu": 38.56, "beam": 5, "sentences": 1000,
                                                           "seconds": 8.6}}
    transformer.save_checkpoint(ckpt, tr.model, tr.tokenizer, meta)
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    at = new_app()
    table = next(plain(m.value) for m in at.sidebar.markdown if m.value.startswith("| score"))
    rows = dict(line.strip("| ").split(" | ") for line in table.splitlines()[2:])
    assert rows["test (Flickr 2016): beam size"] == "5" and rows["test (Flickr 2016): sentences"] == "1000"
    assert rows["test (Flickr 2016): seconds"] == "8.6 s" and rows["test (Flickr 2016): BLEU"] == "38.56"


def test_positions_count_from_1_and_probabilities_show_three_decimals(app_env, tr):
    text = "A dog runs in the park."
    ref = tr.translate(text)
    lens = new_app({"text": text, "view": "layer_by_layer"})
    assert_clean(lens)
    frame = lens.dataframe[0].value
    assert list(frame.index[:2]) == [f"1: {ref.target_tokens[0]}", f"2: {ref.target_tokens[1]}"]
    assert all(len(cell.rsplit("(", 1)[1].rstrip(")").split(".")[1]) == 3 for cell in frame.iloc[:, 1])
    inside = new_app({"text": text, "view": "inside_a_head"})
    assert inside.dataframe[0].value["key"].iloc[0] == f"1: {ref.source_tokens[0]}"
    lines = new_app({"text": text, "view": "lines", "lf": "1"})
    assert lines.selectbox(key="lines_focus").value == 1
    assert f"1: {ref.target_tokens[0]}" in lines.selectbox(key="lines_focus").options
    assert "query (output (query))" not in lines.selectbox(key="lines_focus").label


def test_a_head_table_row_is_in_the_address(app_env):
    at = new_app({"text": "A dog runs in the park.", "view": "head_table"})
    table = at.dataframe[0].value
    index = int(table[(table["type"] == "Cross") & (table["layer"] == 2) & (table["head"] == 1)].index[0])
    at.session_state["diag_table"] = {"selection": {"rows": [index], "columns": [], "cells": []}}
    at.run()
    assert at.query_params["row"] == "cross.2.1"
    assert chart(new_app(dict(at.query_params)), "Cross-attention · layer 2 · head 1")


def test_a_window_the_sentence_cannot_show_is_named_and_a_wide_one_is_capped(app_env, tr, monkeypatch):

    monkeypatch.setattr(heatmaps, "MOST", 40)  # the tiny model reads at most 64 pieces: a lower cap to pass
    text = " ".join(["a man rides a red bike in the park"] * 20)
    n = len(tr.encode_source(text)[0])
    assert heatmaps.WINDOW < n < 2 * heatmaps.WINDOW
    at = new_app({"text": text, "view": "heatmap", "att": "encoder", "qw": f"{n - 9}-{n + 50}", "kw": f"3-{n}"})
    assert_clean(at)
    assert "qw= value was ignored" in infos(at)  # past the sentence's end
    assert at.slider(key="heatmap_chart_qwin").value == (1, heatmaps.WINDOW)  # the default instead
    assert at.slider(key="heatmap_chart_kwin").value == (3, n)
    assert "Showing 3–42: at most 40 at a time." in " ".join(c.value for c in at.caption)
    svg = pictures(at)[0]
    assert svg.count('class="xtick"') == 40 and svg.count('class="ytick"') == 40  # rows: (1, 60) capped too
    assert at.query_params["kw"] == f"3-{n}" and "qw" not in at.query_params
    short = new_app({"text": "A man rides a red bike.", "view": "heatmap", "qw": "5-40"})  # no window to choose
    assert "qw= value was ignored" in infos(short) and "qw" not in short.query_params


@pytest.mark.parametrize("device", ["", "auto", "cpu"])
def test_the_device_pickers_default_is_the_servers_attn_device(app_env, monkeypatch, device):
    monkeypatch.setenv("ATTN_DEVICE", device)
    at = new_app()
    assert_clean(at)
    picker = at.sidebar.selectbox(key="device")
    assert picker.value == (device or "auto")
    assert picker.help.endswith("This server's `ATTN_DEVICE` picks the default.") == bool(device)
    expected = "cpu" if device == "cpu" else str(transformer.resolve_device("auto"))
    assert any(f" on {expected}" in c.value for c in at.caption)  # the translation's line names where it ran


@pytest.mark.parametrize("dtype", ["", "bfloat16"])
def test_the_weights_dtype_is_said_beside_the_device_and_its_variable_only_when_set(app_env, monkeypatch, dtype):
    monkeypatch.setenv("ATTN_DTYPE", dtype)
    at = new_app()
    assert_clean(at)
    said = [c.value for c in at.sidebar.caption if c.value.startswith("Weights in")]
    assert said == [f"Weights in {dtype or 'float32'}{' (this server' + chr(39) + 's `ATTN_DTYPE`)' if dtype else ''}; "
                    "attention weights and every interpretation in float32."]
    details = next(e for e in at.sidebar.expander if e.label == "Training details")
    assert not [c for c in details.caption if c.value.startswith("Weights in")]  # beside the device, not hidden
