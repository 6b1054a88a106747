"""What a visitor's link can cost a public server and the visitor's browser (issue #49): the chart data each view
sends for the worst link, downloads inside the heavy slot, a checkpoint that fails to load, checkpoint strings shown
as text, a link too long for Streamlit. AppTest pages, on the shipped checkpoint where the sizes matter."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import PICTURE, ROOT, VIEWS, new_app

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
    ("heatmap", {"i": "1", "att": "encoder"}), ("heatmap", {"m": "norms"}), ("all_heads", {"att": "encoder"}),
    ("all_heads", {"m": "norms", "att": "decoder"})])
def test_the_worst_link_sends_at_most_a_megabyte_of_charts(public_shipped, view, more):
    at = new_app({**WORST, "view": view, **more})
    assert not at.exception, [e.value for e in at.exception]
    assert at.query_params.get("view", view) == view
    sent = chart_bytes(at)
    assert sent < CHART_BYTES, f"{view}: {sent / 1e6:.2f} MB of chart data"


# ------------------------------------------------------------------------------------------------ a failed load


def plant_f64(good: Path, where: Path) -> Path:
    """A copy of the checkpoint ``good`` whose first tensor's safetensors header says F64 over float32 bytes: it
    passes the folder check (shapes and names), and only a real load finds it broken."""
    import json
    import shutil
    import struct

    shutil.copytree(good, where)
    weights = where / "model.safetensors"
    raw = weights.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    first = next(k for k in header if k != "__metadata__")
    header[first]["dtype"] = "F64"
    text = json.dumps(header, separators=(",", ":")).encode()
    weights.write_bytes(raw[:8] + text.ljust(n) + raw[8 + n:])
    return where


@pytest.fixture()
def broken_server(tmp_path, tiny_checkpoint, monkeypatch):
    """A public server offering a good model under checkpoints/ and, outside it, one that fails to load, in a
    directory whose name has a space (a path the page must never show); counts the real loads."""
    import shutil

    from app.analysis import cached
    from app.models import catalog
    from transformer.checkpoint import check_checkpoint_dir

    shutil.copytree(tiny_checkpoint, tmp_path / "checkpoints" / "good")
    broken = plant_f64(tiny_checkpoint, tmp_path / "srv models (v2)" / "broken")
    check_checkpoint_dir(broken)  # passes the check
    monkeypatch.setattr(catalog, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("ATTN_PUBLIC", "1")
    monkeypatch.setenv("ATTN_CHECKPOINT", "checkpoints/good")
    monkeypatch.setenv("ATTN_MODELS", f"checkpoints/good,{broken}")
    loads: list[str] = []
    real = catalog.load_translator

    def counted(checkpoint, device):
        loads.append(checkpoint)
        return real(checkpoint, device)

    monkeypatch.setattr(catalog, "load_translator", counted)
    cached.get_checkpoint_list.clear()
    clock = [1000.0]
    monkeypatch.setattr(cached, "LOAD_FAILURES", cached.LoadFailures(clock=lambda: clock[0]))
    yield broken, loads, clock
    cached.get_checkpoint_list.clear()


def test_a_failed_load_is_tried_again_at_most_once_a_minute_and_names_no_path(broken_server):
    import transformer
    from app.analysis import cached

    broken, loads, clock = broken_server
    model = cached.Model(str(broken), "cpu")
    messages = []
    for _ in range(3):
        with pytest.raises(transformer.CheckpointError) as err:
            _ = model.tr
        messages.append(str(err.value))
    assert len([x for x in loads if x == str(broken)]) == 1  # one real load; the others told at once
    assert all("srv models" not in m and str(broken.parent) not in m for m in messages), messages
    assert "corrupt" in messages[0] and cached.LOAD_FAILURES.retry_in(model) == pytest.approx(60)
    clock[0] += 59
    with pytest.raises(transformer.CheckpointError):
        _ = model.tr
    assert len(loads) == 1
    clock[0] += 2  # over a minute: the next visitor's load tries again, once
    for _ in range(2):
        with pytest.raises(transformer.CheckpointError):
            _ = model.tr
    assert len(loads) == 2


def test_compare_models_and_try_again_do_not_reload_a_failed_model(broken_server):
    broken, loads, clock = broken_server
    link = {"text": "a man rides a bike.", "view": "compare_models", "with": str(broken)}
    pages = [new_app(link) for _ in range(3)]  # three visitors of the same link
    assert loads.count(str(broken)) == 1, loads
    for at in pages:
        assert not at.exception, [e.value for e in at.exception]
        shown = " ".join([e.value for e in at.error] + [m.value for m in at.markdown] + [c.value for c in at.caption])
        assert "broken could not be loaded" in shown.replace("\\", ""), shown
        assert "srv models" not in shown and str(broken.parent) not in shown
    picked = new_app({"text": "a dog runs.", "model": str(broken)})  # the model picker's way, with "Try again"
    assert not picked.exception
    errors = " ".join(e.value for e in picked.error)
    assert "could not be loaded" in errors and "srv models" not in errors, errors
    assert any("at most once a minute" in c.value for c in picked.caption)
    picked.button(key="retry_load").click().run()
    assert loads.count(str(broken)) == 1  # within the minute: told again, not loaded again
    clock[0] += 61
    picked.button(key="retry_load").click().run()
    assert loads.count(str(broken)) == 2


# ------------------------------------------------------------------------------------------------ checkpoint text

LINK, BARE = "https://evil.example", "www.evil.example"


def markdown_shown(at) -> list[str]:
    """Every string of the page that Streamlit renders as Markdown: Markdown, captions, notices, widget labels and
    their help (``st.text`` and tables are plain text)."""
    out = [e.value for kind in ("markdown", "caption", "info", "warning", "error", "success") for e in at.get(kind)
           if not PICTURE.fullmatch(e.value)]  # the server-built pictures: an image of data, no text to link
    for kind in ("button", "text_area", "selectbox", "slider", "radio", "multiselect", "segmented_control", "pills",
                 "toggle", "checkbox"):
        for w in at.get(kind):
            out += [str(getattr(w, "label", "") or ""), str(getattr(w, "help", "") or "")]
    return out


@pytest.fixture()
def hostile_checkpoint(tmp_path, monkeypatch):
    """The shipped checkpoint with a link in metadata.json's ``language_pair`` and links in heads.json's strings."""
    import json
    import shutil

    if not (SHIPPED / "model.safetensors").is_file():
        pytest.skip("the shipped checkpoint is not here")
    path = tmp_path / "hostile"
    shutil.copytree(SHIPPED, path, ignore=shutil.ignore_patterns("snapshots"))
    meta = json.loads((path / "metadata.json").read_text(encoding="utf-8"))
    meta["language_pair"] = f"[en]({LINK})-de"
    (path / "metadata.json").write_text(json.dumps(meta), encoding="utf-8")
    heads = json.loads((path / "heads.json").read_text(encoding="utf-8"))
    heads["split"] = f"[test]({LINK}) {BARE}"
    heads["role_rules"] = {f"[mixed]({LINK})": BARE}
    heads["alti"].update(threshold_split=f"[val]({LINK}) {BARE}", split=f"{BARE} [x]({LINK})",
                         hallucination_threshold=0.99)  # the warning, with its split, is shown
    heads["alti"]["alignment_agreement"]["best_layer"] = BARE
    (path / "heads.json").write_text(json.dumps(heads), encoding="utf-8")
    monkeypatch.setenv("ATTN_CHECKPOINT", str(path))
    return path


@pytest.mark.parametrize("view", ["source_or_prefix", "heads_across_the_test_set", "compare_models", "heatmap"])
def test_checkpoint_files_never_put_a_live_link_on_the_page(hostile_checkpoint, view):
    at = new_app({"text": "Un homme fait du vélo. A man rides a bike.", "view": view, "row": "cross.1.1"})
    assert not at.exception, [e.value for e in at.exception]
    shown = markdown_shown(at)
    assert any("evil" in s for s in shown) or view in ("compare_models", "heatmap")  # shown, as text
    for s in shown:
        assert LINK not in s and BARE not in s and "](" not in s.replace("\\]\\(", ""), s


# ------------------------------------------------------------------------------------------------ downloads


@pytest.mark.parametrize("fmt", ["json", "npz"])
def test_a_download_is_built_inside_a_heavy_slot(app_env, monkeypatch, fmt):
    """The JSON and NPZ files are built in one of the server's heavy slots (as the offline page is): a click waits
    while another visitor's heavy job holds the only slot, and builds its file only then."""
    import threading
    import time

    from app.analysis import cached, inference
    from app.limits import ledger
    from transformer import DecodeSettings

    monkeypatch.setattr(ledger, "HEAVY", ledger.HeavyJobs(lambda: 1))
    model, settings = cached.Model(str(app_env), "cpu"), DecodeSettings(beam_size=1)
    model.analysis("a man rides a bike.", settings)  # on the page already: only the file is left to build
    held = []
    real = inference.export_json if fmt == "json" else inference.export_npz

    def spy(*args, **kwargs):
        held.append(getattr(ledger.HEAVY._local, "held", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(inference, "export_json" if fmt == "json" else "export_npz", spy)
    done = threading.Event()
    slot_taken, release = threading.Event(), threading.Event()

    def other_visitor() -> None:  # a heavy job holding the only slot
        with ledger.HEAVY.slot():
            slot_taken.set()
            release.wait(10)

    threading.Thread(target=other_visitor).start()
    assert slot_taken.wait(10)
    click = model.export_file("a man rides a bike.", settings, (), fmt)
    threading.Thread(target=lambda: (click(), done.set())).start()
    time.sleep(0.6)
    assert not done.is_set() and not held  # waiting for the slot, nothing built
    release.set()
    assert done.wait(30) and held == [True]


# ------------------------------------------------------------------------------------------------ a link too long


@pytest.mark.browser
def test_a_link_too_long_for_streamlit_says_so_in_the_browser(tiny_server):
    """Streamlit drops an address of over 524,288 characters or 1,000 parameters before the script sees it: only
    the browser knows, and the page says so there; a link within the limits shows no such notice."""
    from bench.browser import APP_HEATMAP, CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    banner = ".attn-link-too-long"
    # (an address over 524,288 characters never reaches the page: the server refuses a request that long, and the
    # browser shows its error)
    links = {"many": "&".join(["text=A+dog+runs."] + [f"p{i}=1" for i in range(1000)]),  # 1,001 parameters
             "fine": "text=A+dog+runs.&view=heatmap"}
    url = tiny_server
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for name, query in links.items():
                page = browser.new_page(viewport={"width": 1280, "height": 720})
                page.goto(f"{url}/?{query}", wait_until="domcontentloaded")
                page.locator(APP_HEATMAP).first.wait_for(timeout=90_000)  # the page opened (its defaults)
                if name == "fine":
                    page.wait_for_timeout(1500)
                    assert page.locator(banner).count() == 0
                else:
                    page.locator(banner).wait_for(timeout=30_000)
                    text = page.locator(banner).inner_text()
                    assert "too long" in text and "defaults" in text and "aaaa" not in text, text
                    page.locator(f"{banner} button").click()  # it can be closed
                    assert page.locator(banner).count() == 0
                page.close()
        finally:
            browser.close()


def test_the_json_download_is_the_json_of_the_whole_and_encoded_a_head_at_a_time(app_env, monkeypatch):
    """The file is exactly one ``json.dumps`` of everything (the oracle), built from one call per head: no single
    call holds the interpreter lock over a long input's millions of numbers."""
    import json

    import numpy as np

    from app.analysis import cached, inference
    from transformer import DecodeSettings

    result = cached.Model(str(app_env), "cpu").analysis("a man rides a red bike in the park.", DecodeSettings())
    whole = {"checkpoint": "x", "source": result.text, "translation": result.translation, "score": result.score,
             "hit_max_len": result.hit_max_len, "settings": result.settings.__dict__, "ablated_heads": [],
             "source_tokens": result.source_tokens, "target_tokens": result.target_tokens,
             "decoder_input_tokens": result.decoder_input_tokens,
             "layout": "attention[type][layer][head][query][key]; decoder query t produced target_tokens[t]",
             "attention": {k: np.round(result.attention(k).astype(np.float64), 6).tolist()
                           for k in ("encoder", "decoder", "cross")}}
    sizes = []
    real = json.dumps

    def counted(value, *args, **kwargs):
        text = real(value, *args, **kwargs)
        sizes.append(len(text))
        return text

    monkeypatch.setattr(inference.json, "dumps", counted)
    made = inference.export_json(result, "x")
    assert made == real(whole, ensure_ascii=False)
    heads = sum(result.attention(k).shape[0] * result.attention(k).shape[1] for k in ("encoder", "decoder", "cross"))
    assert len(sizes) >= heads and max(sizes) < len(made) / heads * 3  # one call per head, none over the whole
