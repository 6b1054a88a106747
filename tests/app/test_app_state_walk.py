"""The address describes every control of every view: a walk over each view's widgets (AppTest, tiny checkpoint).

For each widget a view shows: set a value other than the one shown, check that the address changed, then open a
fresh page with only that address and check that the widget shows the value again. A widget the walk finds but
has no other value for below fails the test, so a new control cannot be left out of the address unnoticed.
"""

from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("streamlit")

from conftest import VIEWS, assert_clean, new_app  # noqa: E402
from streamlit.testing.v1.element_tree import Widget  # noqa: E402

torch.set_num_threads(1)

TEXT = "A man rides a red bike in the park."
FRAME = {"source_text", "example", "view", "view_group", "sentence", "show_card"}  # the frame's, tested elsewhere
ACTIONS = ("button", "download_button")  # actions, not state
# A value other than the default for each view control (the tiny model: 2 + 2 layers, 4 heads)
CHANGES: dict[str, object] = {
    "att": "encoder", "layer": 1, "head": "2", "scale": "stretched", "measure": "norms", "grid_pick": "L1 · H2",
    "lines_heads": [1, 3], "lines_focus": 2, "lines_threshold": 0.1, "step": 2, "topk": 4, "step_layer": 1,
    "table_agreement": True, "table_pick": "cross.1.2", "ablate": ["Cross · L1 · H2"], "pad_src": 3, "pad_tgt": 0,
    "pe_d": 16, "pe_len": 20, "pe_dims": [0, 1], "inside_query": 2, "drivers_method": "input_x_gradient",
    "compare_alpha": "own", "interactive": True, "heatmap_chart_row": 2, "source_prefix_layer": "all",
    "testset_table": ":file", "testset_preset": "flagged", "testset_find": "dog", "testset_signal": "source_share",
    "testset_paste": "A dog runs.\nTwo men play.", "testset_refs": "Ein Hund läuft.\nZwei Männer spielen.",
    "testset_path": "runs/no-such-table.parquet",
    "flow_step": 2, "flow_threshold": 0.1, "flow_head": lambda widget: flow_ref(widget.options[0]),  # in the graph
    "flow_compare": 2, "masks_shown": "cross",
    "masks_window": (2, 20),  # a translation of the tiny model past 30 positions: a window
    "patch_word": 4, "patch_substitute": "blue", "patch_step": 2, "patch_direction": "noise",
    "patch_foil": lambda widget: piece_id(widget, widget.options[2]), "patch_head": "decoder.2.3",
}


def piece_id(widget, label: str) -> int:
    """The id of the piece a picker of piece ids shows as ``label`` (its own format)."""
    return next(i for i in range(10_000) if widget.format_func(i) == label)


def flow_ref(label: str) -> str:
    """The "How each word is built" head picker's label (``Cross-attention · L1 · H4 at output 3 (0.22)``) as its
    value (``cross.1.4@3``)."""
    kind = {"Encoder": "encoder", "Decoder": "decoder", "Cross-attention": "cross"}[label.split(" ")[0]]
    layer, head, query = re.search(r"L(\d+) · H(\d+) at \w+ (\d+)", label).groups()
    return f"{kind}.{layer}.{head}@{query}"
WINDOW_CHANGE = (5, 40)  # a long sentence's window sliders (``*_qwin``, ``*_kwin``): rows / columns 5 to 40
ALONE = {"compare_with"}  # a picker with one model to offer here (test_app_models covers with= on two models)


def controls(at) -> dict[str, object]:
    """The main area's widgets with a value, by key (buttons left out); fails on a widget without a key."""
    found: dict[str, object] = {}

    def walk(node) -> None:
        kind = getattr(node, "type", "")
        if isinstance(node, Widget) and kind not in ACTIONS:
            key = getattr(node, "key", None)
            assert key, f"a {kind} without a key cannot be in the address: {getattr(node, 'label', '')!r}"
            found[key] = node
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    return {k: w for k, w in found.items() if k not in FRAME}


def same(a: object, b: object) -> bool:
    if isinstance(b, float):
        return a == pytest.approx(b)
    return list(a) == list(b) if isinstance(b, (list, tuple)) else a == b


def change_for(view: str, key: str) -> object:
    if key.endswith(("_qwin", "_kwin", "_swin")):
        return WINDOW_CHANGE
    assert key in CHANGES, f"{view}: no other value known for the control {key!r}: add one to CHANGES"
    return CHANGES[key]


@pytest.mark.parametrize("view", VIEWS)
def test_every_control_is_in_the_address_and_the_address_alone_restores_it(app_env, view):
    walk_controls(view, TEXT)


@pytest.mark.parametrize("view", ["heatmap", "all_heads", "head_table", "what_drives_each_word", "beam_tree"])
def test_a_long_sentences_window_is_in_the_address_too(app_env, view):
    """A long sentence adds window sliders to each large chart (rows and columns; the beam tree's output steps);
    they are walked like every other control."""
    keys = walk_controls(view, " ".join(["a man rides a red bike in the park"] * 10))
    if view == "beam_tree":
        assert any(k.endswith("_swin") for k in keys), keys
    else:
        assert any(k.endswith("_qwin") for k in keys) and any(k.endswith("_kwin") for k in keys), keys


def walk_controls(view: str, text: str) -> set[str]:
    """Change every control ``view`` shows for ``text`` (and those that appear after a change) and check the address
    each time; returns the keys walked."""
    start = {"text": text, "view": view}
    todo = [(start, key) for key in controls(new_app(start))]
    done: set[str] = set()
    while todo:
        base, key = todo.pop(0)
        if key in done or key in ALONE:
            continue
        done.add(key)
        change = change_for(view, key)
        at = new_app(base)
        before = dict(at.query_params)
        widget = controls(at)[key]
        change = change(widget) if callable(change) else change  # a value known only from what the page offers
        assert not same(widget.value, change), f"{key}: the change must differ from what is shown"
        widget.set_value(change)
        at.run()
        assert_clean(at)
        after = dict(at.query_params)
        assert after != before, f"{view}: changing {key} left the address as it was"
        assert after["view"] == view
        fresh = new_app(after)  # only the address: a new visitor
        assert_clean(fresh)
        shown = controls(fresh)
        assert key in shown and same(shown[key].value, change), (view, key, after)
        assert after.items() <= dict(fresh.query_params).items()  # and the page keeps the address it was given
        todo += [(after, k) for k in controls(at) if k not in done]  # controls that appear after the change
    return done


def test_no_view_parameter_shadows_a_frame_parameter():
    from app.page import params, state

    assert state.VIEW in {p.key for p in params.frame()}  # the frame's are registered (by app.page.state)
    clashes = {p.name for p in params.all_params()} & {p.name for p in params.frame()}
    assert not clashes, f"view parameters named like the frame's: {clashes}"
