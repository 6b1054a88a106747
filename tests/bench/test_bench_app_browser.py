"""The app's browser benchmarks on a tiny model in a real browser (Debian's chromium via Playwright):
``python -m bench.app_browser`` (answer time, first visits and the bare-page floors) and ``bench.app_load``
(visitors at once, each seeing their own)."""

from __future__ import annotations

import pytest

from bench.app_browser import measure, twenty_word_sentences
from bench.browser import CHROMIUM, streamlit_server

pytestmark = pytest.mark.browser


def test_answer_time_benchmark_runs_in_a_real_browser(tiny_checkpoint):
    """``python -m bench.app_browser`` on a tiny model: it times each new sentence until its heatmap shows."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    sentences = twenty_word_sentences(2, None)
    assert len(sentences) == 2 and sentences[0] != sentences[1]
    assert all(len(s.split()) == 20 for s in sentences)
    result = measure(tiny_checkpoint, sentences)
    assert result["app_sentences"] == 2 and result["app_page_errors"] == []
    assert all(t > 0 for t in result["app_translate_s"])
    assert result["app_translate_s_p50"] <= result["app_translate_s_max"]


def test_four_visitors_at_once_each_see_their_own(tiny_checkpoint):
    """``bench.app_load`` with 4 pages on one server, one of them running an ablation meanwhile: each of the other
    three sees its own translation and heatmap, none another's, and the ablating one its own result."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    pytest.importorskip("playwright.async_api")
    import asyncio

    from bench.app_load import visitors_round

    texts = ["A man rides a red bike.", "Two dogs play in the park.", "A girl walks on the beach.",
             "The boy kicks a blue ball."]
    with streamlit_server(tiny_checkpoint, env={"ATTN_PUBLIC": "1", "ATTN_MODELS": str(tiny_checkpoint)}) as url:
        r = asyncio.run(visitors_round(url, str(tiny_checkpoint), texts, ablate=True))
    assert r["all_saw_their_own"] and not r["any_saw_another"] and not r["errors"], r  # the ablating one: its
    assert len(r["seconds"]) == 3  # "With N head(s) off" waited for in the round (an error if it never came)


def test_bench_times_first_visits_and_the_bare_page_floors(tiny_checkpoint, capsys):
    """``python -m bench.app_browser --floor``: the app's first visits and two bare Streamlit pages, same method."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    import json

    from bench.app_browser import main

    assert main(["--checkpoint", str(tiny_checkpoint), "--visitors", "2", "--repeat", "0", "--floor", "--json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert len(result["app_first_visit_s"]) == 2
    for key in ("app_first_visit_floor_plotly_s_p50", "app_first_visit_floor_streamlit_s_p50"):
        assert result[key] > 0
    assert "Floor, a bare Streamlit page (plotly)" in out and "Floor, a bare Streamlit page (streamlit)" in out
