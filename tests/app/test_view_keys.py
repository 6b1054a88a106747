"""Stable view keys (``app.registry.View.key``): the code and the address name a view by its key (``view=heatmap``),
people read its title; a link that names a title still opens the view, and the page then writes its key."""

from __future__ import annotations

import re

import pytest

st = pytest.importorskip("streamlit")

from app.registry import ALIASES, DESCRIBED, GROUPS, TITLES, VIEWS, view_key  # noqa: E402


def test_every_view_has_a_lower_case_key_and_its_own_title():
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", key) and VIEWS[key].key == key for key in VIEWS)
    titles = [v.title for v in VIEWS.values()]
    assert len(set(titles)) == len(titles) and all(t and t[0].isupper() for t in titles)
    assert [k for keys in GROUPS.values() for k in keys] == list(VIEWS)  # the groups list keys, every view once
    assert VIEWS["heatmap"].title == "Heatmap" and VIEWS["whole_test_set"].title == "Whole test set"


def test_a_key_or_a_title_names_a_view_and_nothing_else_does():
    for key, view in VIEWS.items():
        assert view_key(key) == key
        assert view_key(view.title) == view_key(view.title.upper()) == view_key(f" {view.title} ") == key
    for other in ("", "heat map", "Whole+test+set", "../../etc", "<x>", "heatmap2", "VIEWS", "Step", "inside_head"):
        assert view_key(other) is None, other


def test_every_view_has_one_name_and_the_old_short_names_are_aliases():
    """The registry key is a view's one name: the offline views and their titles are keyed by it, and the short names
    the descriptions had (``step``, ``lens``, ...) are aliases only, each resolved to one view's key."""
    assert list(DESCRIBED) == [k for k, v in VIEWS.items() if v.described] == list(TITLES)
    assert all(TITLES[k] == VIEWS[k].title for k in TITLES)
    assert not set(ALIASES) & set(VIEWS)  # an alias never shadows a key
    for alias, key in ALIASES.items():
        assert view_key(alias) == key and VIEWS[key].offline, alias
    assert view_key("step") == "step_through" and view_key("lens") == "layer_by_layer"
    assert all(not hasattr(module, "KEY") for module in DESCRIBED.values())  # no second name in a description


def test_a_view_s_modules_are_named_by_its_key():
    """``app/views/<key>.py`` and ``app/parts/<key>.py``: the registry needs no second name to find them."""
    from pathlib import Path

    import app

    root = Path(app.__file__).parent
    helpers = {"__init__", "whole_test_set_lines", "whole_test_set_charts"}
    pages = {p.stem for p in (root / "views").glob("*.py")} - helpers
    parts = {p.stem for p in (root / "parts").glob("*.py")} - {"__init__"}
    assert pages == {k for k, v in VIEWS.items() if v.page}
    assert parts == set(DESCRIBED) and all(m.__name__ == f"app.parts.{k}" for k, m in DESCRIBED.items())


def test_an_old_short_name_in_the_offline_page_and_a_notebook_is_its_key():
    from app import report

    assert report.view_keys(["step", "lens", "heatmap", "Masks"]) == ["step_through", "layer_by_layer", "heatmap",
                                                                      "masks"]
    for bad in (["nope"], ["ablation"], ["step", "whole_test_set"]):  # unknown, or a view the offline page lacks
        with pytest.raises(ValueError, match="unknown view"):
            report.view_keys(bad)


@pytest.fixture()
def session(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("ATTN_PUBLIC", raising=False)
    monkeypatch.setenv("ATTN_CHECKPOINT", "checkpoints/the-default")
    st.session_state.clear()
    yield st.session_state
    st.session_state.clear()


@pytest.mark.parametrize("given", ["Source or prefix", "source or prefix", "source_or_prefix", "source_prefix"])
def test_a_link_with_a_title_or_a_key_opens_the_view_and_the_address_writes_its_key(session, given):
    from app import views  # noqa: F401 (registers every view's parameters)
    from app.page import state

    ignored = state.adopt_url({"text": "A dog runs.", "view": given, "cl": "1"})
    assert ignored == [] and session[state.VIEW] == "source_or_prefix"
    assert state.url_params(session[state.VIEW])["view"] == "source_or_prefix"
    assert state.url_params(session[state.VIEW])["cl"] == "1"  # the view's own parameter was taken with it


def test_a_title_link_opens_the_view_on_the_page(app_env):
    from conftest import assert_clean, new_app

    at = new_app({"text": "A dog runs in the park.", "view": "Whole test set"})
    assert_clean(at)
    assert at.segmented_control(key="view").value == "whole_test_set"
    assert at.query_params["view"] == "whole_test_set"  # the page writes the key back
    options = at.segmented_control(key="view").options
    assert any(o.endswith("Whole test set") for o in options) and not any("whole_test_set" in o for o in options)
