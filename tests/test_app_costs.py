"""What a visitor's link can cost a public server and the visitor's browser (issue #49): the chart data each view
sends for the worst link, downloads inside the heavy slot, a checkpoint that fails to load, checkpoint strings shown
as text, a link too long for Streamlit. AppTest pages, on the shipped checkpoint where the sizes matter."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, VIEWS, new_app

SHIPPED = ROOT / "checkpoints" / "multi30k-en-de"
CHART_BYTES = 1_000_000  # nothing a link asks for sends more chart data than this to the browser
WORST = {"text": " ".join(str(i) for i in range(400)), "beam": "16", "alpha": "5", "a": "4", "b": "200",
         # every window at its widest, every view's heaviest choice
         "qw": "1-120", "kw": "1-120", "mw": "1-200", "steps": "1-200", "pick": "1.1", "row": "cross.1.1",
         "d": "1024", "n": "512", "dims": ",".join(str(i) for i in range(0, 1024, 2))}


def chart_bytes(at) -> int:
    """The chart data of a page: every plotly figure's JSON and every Markdown element (the server-built pictures
    are Markdown images)."""
    return sum(len(c.proto.spec) for c in at.get("plotly_chart")) + sum(len(m.value) for m in at.markdown)


@pytest.fixture()
def public_shipped(monkeypatch):
    if not (SHIPPED / "model.safetensors").is_file():
        pytest.skip("the shipped checkpoint is not here")
    monkeypatch.setenv("ATTN_PUBLIC", "1")  # as the image runs: the work ceiling, the shipped models only
    monkeypatch.setenv("ATTN_CHECKPOINT", "checkpoints/multi30k-en-de")
    monkeypatch.delenv("ATTN_MODELS", raising=False)


@pytest.mark.parametrize(("view", "more"), [(v, {}) for v in VIEWS] + [
    ("Heatmap", {"i": "1", "att": "encoder"}), ("Heatmap", {"m": "norms"}), ("All heads", {"att": "encoder"}),
    ("All heads", {"m": "norms", "att": "decoder"})])
def test_the_worst_link_sends_at_most_a_megabyte_of_charts(public_shipped, view, more):
    at = new_app({**WORST, "view": view, **more})
    assert not at.exception, [e.value for e in at.exception]
    assert at.query_params.get("view", view) == view
    sent = chart_bytes(at)
    assert sent < CHART_BYTES, f"{view}: {sent / 1e6:.2f} MB of chart data"
