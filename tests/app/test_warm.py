"""The server warms before its first visitor: ``app.page.warm.warm_up`` fills the caches the page reads (the model in
``st.cache_resource``, the first screen's analysis in the results cache), so the first run finds them."""

from __future__ import annotations

import ast
import gc
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_after_warm_up_the_first_visit_runs_no_model(app_env, monkeypatch):
    """After ``warm_up`` the page's first run (the default sentence, the default settings) finds the analysis in
    the cache: with the model's forward pass made to fail, the page still shows the translation."""
    import conftest

    from app.analysis import inference
    from app.page import state, warm

    warm.warm_up()
    from app.page import frame, languages, selector, sidebar  # noqa: F401  (as app/serve.py imports them)

    warmed = set(sys.modules)

    def fail(*args, **kwargs):
        raise AssertionError("the model ran on the first visit")

    assert gc.get_freeze_count() > 0  # what the server keeps is out of the post-run collections' way
    gc.unfreeze()
    monkeypatch.setattr(inference, "analyse", fail)
    at = conftest.new_app()
    conftest.assert_clean(at)
    assert at.text_area(key="source_text").value == state.EXAMPLES[0]
    assert any(c.value.startswith("Translation · score") for c in at.caption)
    # nor does it import what a warm server has (the Hub's library for the model picker's labels: about 0.3 s)
    assert not [m for m in set(sys.modules) - warmed if m.startswith(("huggingface_hub", "app.", "yaml"))]


def test_the_entry_point_is_a_streamlit_app_with_a_warming_lifespan():
    """``streamlit run app/serve.py`` finds an ``st.App`` (Streamlit's own discovery) serving app/main.py."""
    from streamlit.web.server.app_discovery import discover_asgi_app

    assert discover_asgi_app(ROOT / "app" / "serve.py").is_asgi_app
    tree = ast.parse((ROOT / "app" / "serve.py").read_text(encoding="utf-8"))
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "App")
    assert [k.arg for k in call.keywords] == ["lifespan", "middleware"]  # middleware: app.page.preload's Link header
