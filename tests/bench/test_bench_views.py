"""``python -m bench.app_browser --views`` and ``--split`` on a tiny model in a real browser (Debian's chromium)."""

from __future__ import annotations

import json
import os

import pytest

from bench.app_browser import CHROMIUM, main, view_keys


def _needs_browser() -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")


def test_a_walk_switches_to_every_view_and_ends_on_heatmap():
    from app.views import VIEWS
    from bench.app_views import walk_order

    assert sorted(walk_order()) == sorted(VIEWS) and walk_order()[-1] == "heatmap"
    assert walk_order(["all_heads", "masks"]) == [v for v in VIEWS if v in ("all_heads", "masks")] + ["heatmap"]


def test_only_takes_view_keys_and_goes_with_views(capsys):
    with pytest.raises(SystemExit) as bad_key:
        main(["--views", "--only", "all_heads,Heatmap"])
    with pytest.raises(SystemExit) as without_views:
        main(["--only", "all_heads"])
    err = capsys.readouterr().err
    assert bad_key.value.code == 2 and without_views.value.code == 2
    assert "not a view key: Heatmap" in err and "--only goes with --views" in err
    assert view_keys("all_heads, step") == ["all_heads", "step_through"]  # an old short name is its key


@pytest.mark.browser
def test_views_mode_times_the_views_asked_and_both_attribution_methods(tiny_checkpoint, capsys):
    """The walk of ``--views`` on two views (every view is walked by ``test_every_view_browser``)."""
    _needs_browser()
    from bench.app_views import ATTRIBUTION_VIEW, METHOD_NAMES

    assert main(["--checkpoint", str(tiny_checkpoint), "--views", "--repeat", "1", "--json",
                 "--only", f"all_heads,{ATTRIBUTION_VIEW}"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    expected = {"all_heads", "heatmap"} | {f"{ATTRIBUTION_VIEW}: {m}" for m in METHOD_NAMES.values()}
    assert set(result["views_s"]) == expected
    assert all(len(t) == 1 and t[0] > 0 for t in result["views_s"].values())
    assert set(result["views_cpu_s"]) == expected  # the browser's and the server's CPU seconds of each switch
    assert all(len(c) == 1 and c[0][0] > 0 and c[0][1] >= 0 for c in result["views_cpu_s"].values())
    attribution = [c[0][1] for name, c in result["views_cpu_s"].items() if name.startswith(ATTRIBUTION_VIEW)]
    assert max(attribution) > 0  # the server computed the attributions
    assert "| Heatmap |" in out and "| view | p50 s | browser CPU s | server CPU s | max s | goal s |" in out


@pytest.mark.browser
def test_split_mode_keeps_the_browsers_off_the_servers_core(tiny_checkpoint, capsys):
    _needs_browser()
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores")
    assert main(["--checkpoint", str(tiny_checkpoint), "--split", "1,2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert not set(result["split_server_cores"]) & set(result["split_browser_cores"])
    assert [r["visitors"] for r in result["split_rounds"]] == [1, 2]
    assert all(r["server_cpu_s"] > 0 and len(r["seconds"]) == r["visitors"] for r in result["split_rounds"])
    assert result["split_server_cpu_s_per_click"] > 0
    assert os.sched_getaffinity(0) == set(result["split_server_cores"]) | set(result["split_browser_cores"])
