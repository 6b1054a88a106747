"""The offline page (``python -m app.report``) and the notebook views (``app.notebook.show``): what the page holds
against the model's own attentions, escaping, the command line, every family, and the page in a real browser with
the network cut off."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("plotly")

from app import notebook, report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "checkpoints" / "multi30k-en-de"
CAPTION = "Two young men in red shirts and white hats are playing soccer on a green field near the stone wall."
HOSTILE = 'A dog <img src=x onerror="alert(1)"> runs </script><script>alert(2)</script> & plays.'


def page_json(page: str) -> dict:
    match = re.search(r'<script type="application/octet-stream" id="attn-data">([A-Za-z0-9+/=]*)</script>', page)
    assert match, "the page holds its data in one script element, deflated JSON in base64"
    return json.loads(zlib.decompress(base64.b64decode(match.group(1))).decode("utf-8"))


def unpacked(packed: dict) -> np.ndarray:
    """The page's ``unpack``, written again from the format (inflate, 16-bit little-endian steps above lo)."""
    steps = np.frombuffer(zlib.decompress(base64.b64decode(packed["b64"])), dtype="<u2")
    return (packed["lo"] + packed["step"] * steps.astype(np.float64)).reshape(packed["shape"])


def test_the_page_holds_every_attention_weight_to_three_decimals(tr):
    result = tr.translate("Two dogs play in the park.", beam_size=2)
    page = report.build_page(result, tr, report.VIEWS, text="Two dogs play in the park.", method="input_x_gradient")
    data = page_json(page)
    assert data["views"] == list(report.VIEWS)
    for kind, attns in (("encoder", result.encoder_attentions), ("decoder", result.decoder_attentions),
                        ("cross", result.cross_attentions)):
        expected = np.stack([a.numpy() for a in attns])  # (L, H, Q, K), the translation's own
        got = unpacked(data["kinds"][kind]["weights"])
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=5e-4 + 1e-7)
    assert data["target"]["raw"] == result.target_tokens and data["source"]["raw"] == result.source_tokens
    assert abs(data["summary"]["score"] - result.score) < 1e-6
    # the page's candidates are the model's own next-token distribution, teacher-forced
    out = tr.attentions(result.source_ids, result.target_ids[:-1])
    probs = out.logits[0].softmax(-1)
    first = data["step"]["steps"][0]
    assert first["probs"][0] == pytest.approx(float(probs[0].max()), abs=1e-4)
    assert first["p"] == pytest.approx(float(probs[0, result.target_ids[0]]), abs=1e-4)
    masks = data["masks"]["2"]
    causal = unpacked(masks["causal"])
    assert causal.shape == (len(result.decoder_input_tokens) + 2,) * 2
    np.testing.assert_array_equal(causal, np.tril(np.ones_like(causal)))
    assert unpacked(masks["encoder"])[:, -2:].sum() == 0  # the two <pad> keys are blocked
    np.testing.assert_allclose(unpacked(data["positional"]["table"]),
                               __import__("transformer").positional_encoding(data["positional"]["length"],
                                                                             tr.config.d_model).numpy(), atol=6e-4)
    assert data["attribution"]["method"] == "input_x_gradient" and "lens" in data


def test_a_large_model_s_weights_are_rounded_to_two_decimals(tr, monkeypatch):
    result = tr.translate("Two dogs play in the park.")
    assert page_json(report.build_page(result))["kinds"]["cross"]["decimals"] == 3
    monkeypatch.setattr(report, "ATTENTION_BUDGET", 0)  # as if the model were large
    data = page_json(report.build_page(result))
    expected = np.stack([a.numpy() for a in result.cross_attentions])
    assert data["kinds"]["cross"]["decimals"] == 2
    np.testing.assert_allclose(unpacked(data["kinds"]["cross"]["weights"]), expected, atol=5e-3 + 1e-7)
    assert np.abs(unpacked(data["kinds"]["cross"]["weights"]) - expected).max() > 5e-4  # coarser than 3 decimals


def test_the_page_is_one_file_with_nothing_to_fetch(tr):
    page = report.build_page(tr.translate("A girl walks."), tr)
    from plotly.offline import get_plotlyjs

    assert page.count(get_plotlyjs()[:200]) == 1  # plotly.js once, inline
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page, re.I)  # nothing loaded from elsewhere
    assert "@import" not in page


def test_text_from_the_sentence_is_shown_as_text(tr):
    result = tr.translate(HOSTILE)
    page = report.build_page(result, tr, text=HOSTILE)
    body = page.split("</head>", 1)[1]
    assert "<img src=x" not in body and "<script>alert(2)" not in body
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body  # the summary shows it escaped
    data = page_json(page)  # the data (base64: it cannot end its element early) keeps the text exactly
    assert data["summary"]["text"] == HOSTILE
    assert all("<" not in label for label in data["source"]["html"])


def test_the_command_writes_the_page_and_refuses_bad_input(tmp_path, tiny_checkpoint, capsys):
    out = tmp_path / "page.html"
    assert report.main(["A man rides a bike.", "--out", str(out), "--checkpoint", str(tiny_checkpoint), "--beam", "1",
                        "--views", "heatmap,lines"]) == 0
    data = page_json(out.read_text(encoding="utf-8"))
    assert data["views"] == ["heatmap", "lines"] and data["summary"]["beam_size"] == 1
    for argv, message in (([" ", "--out", str(out)], "empty"), (["a " * 3000, "--out", str(out)], "at most 5,000"),
                          (["x", "--out", str(out), "--views", "heatmap,nope"], "unknown view"),
                          (["x", "--out", str(out), "--checkpoint", str(tiny_checkpoint), "--src-lang", "fr"],
                           "not multilingual")):
        with pytest.raises(SystemExit):
            report.main(argv)
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        report.main(["x", "--out", str(out), "--checkpoint", str(tmp_path / "missing")])
    assert exit_info.value.code == 2 and "cannot load" in capsys.readouterr().err


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shipped checkpoint is not here")
def test_a_twenty_word_caption_makes_a_page_under_5_mb(tmp_path):
    out = tmp_path / "caption.html"
    assert len(CAPTION.split()) == 20
    subprocess.run([sys.executable, "-m", "app.report", CAPTION, "--out", str(out), "--checkpoint", str(SHIPPED)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    assert out.stat().st_size < 5_000_000


def test_show_draws_one_view_or_the_page(tr):
    result = tr.translate("A woman plays with a ball.")
    heat = notebook.show(result, "heatmap", kind="cross", layer=2, head=3)
    assert heat._repr_html_() == heat.html and heat.html.startswith("<svg")
    assert "Cross-attention · layer 2 · head 3" in heat.html
    cells = re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})"><title>', heat.html)
    weights = result.cross_attentions[1][2].numpy()
    assert len(cells) == weights.size
    from app import svg

    assert cells == list(svg.colours(weights, 0.0, 1.0).ravel())  # the head's own weights, in order
    grid = notebook.show(result, "all_heads", kind="decoder", return_html=True)
    n_layers, n_heads = len(result.decoder_attentions), result.decoder_attentions[0].shape[0]
    assert isinstance(grid, str) and grid.count("<img ") == n_layers * n_heads
    page = notebook.show(result, translator=tr)
    assert page.html.startswith("<iframe") and 'srcdoc="' in page.html and "<script" not in page.html
    assert page_json(page.page)["views"] == list(report.DEFAULT_VIEWS)
    alone = page_json(notebook.show(result).page)  # without the translator: the views of the attentions alone
    assert alone["views"] == ["heatmap", "all_heads", "lines"] and "step" in alone["left_out"]
    with pytest.raises(ValueError, match="translator"):
        notebook.show(result, "lens")
    with pytest.raises(ValueError, match="layer counts from 1 to 2"):
        notebook.show(result, "heatmap", layer=3)
    with pytest.raises(ValueError, match="kind must be"):
        notebook.show(result, "all_heads", kind="self")
    with pytest.raises(TypeError):
        notebook.show(result, "heatmap", colour="red")


def test_show_takes_every_family(tmp_path, tiny_corpus):
    transformers = pytest.importorskip("transformers")  # noqa: F841
    import sentencepiece as spm
    from m2m100_models import save_m2m100, train_spm
    from test_marian import save_marian

    import transformer

    d = tmp_path / "marian-spm"
    d.mkdir()
    spm.SentencePieceTrainer.train(input=",".join(str(tiny_corpus / f) for f in ("train.en", "train.de")),
                                   model_prefix=str(d / "sp"), vocab_size=90, character_coverage=1.0,
                                   model_type="unigram", bos_id=-1, eos_id=-1, pad_id=-1, unk_id=0, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(d / "sp.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.id_to_piece(i) != "<unk>"]
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
    vocab["<pad>"] = len(vocab)
    (d / "vocab.json").write_text(json.dumps(vocab))
    _, marian = save_marian(tmp_path, vocab, files=(d, vocab))
    (tmp_path / "fairseq").mkdir()
    spm_dir = train_spm(tmp_path / "fairseq", tiny_corpus)
    _, _, nllb = save_m2m100(tmp_path, spm_dir, "nllb")
    for path, langs in ((marian, {}), (nllb, {"src_lang": "eng_Latn", "tgt_lang": "fra_Latn"})):
        tr = transformer.load(path, device="cpu")
        result = tr.translate("A man rides a red bike.", beam_size=2, max_len_b=4, **langs)
        heat = notebook.show(result, "heatmap", kind="encoder", layer=1, head=1)
        assert len(re.findall(r'<rect [^>]*fill="#[0-9a-f]{6}"><title>', heat.html)) == \
            result.encoder_attentions[0][0].numel()
        data = page_json(notebook.show(result, translator=tr).page)
        assert data["target"]["raw"] == result.target_tokens
        if langs:
            assert result.target_tokens[0] == "fra_Latn"
        np.testing.assert_allclose(unpacked(data["kinds"]["cross"]["weights"]),
                                   np.stack([a.numpy() for a in result.cross_attentions]), atol=5e-4 + 1e-7)
    out = tmp_path / "nllb.html"  # the command with a multilingual model's languages
    assert report.main(["A man rides a red bike.", "--out", str(out), "--checkpoint", str(nllb), "--beam", "1",
                        "--src-lang", "eng_Latn", "--tgt-lang", "fra_Latn", "--views", "heatmap,step"]) == 0
    data = page_json(out.read_text(encoding="utf-8"))
    assert (data["summary"]["src_lang"], data["summary"]["tgt_lang"]) == ("eng_Latn", "fra_Latn")
    assert data["target"]["raw"][0] == "fra_Latn" and data["source"]["raw"][0] == "eng_Latn"


def test_importing_the_notebook_module_imports_no_streamlit():
    code = "import sys, app.notebook, app.report; print([m for m in sys.modules if m.split('.')[0] == 'streamlit'])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------------ real clients

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists() or not SHIPPED.is_dir(), reason="needs chromium and the shipped model")
def test_the_page_draws_offline_in_chromium(tmp_path):
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    out = tmp_path / "page.html"
    subprocess.run([sys.executable, "-m", "app.report", HOSTILE, "--out", str(out), "--checkpoint", str(SHIPPED),
                    "--views", ",".join(report.VIEWS), "--method", "input_x_gradient"],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
            fetched: list[str] = []

            def only_the_file(route):
                if route.request.url.startswith("file:"):
                    route.continue_()
                else:
                    fetched.append(route.request.url)
                    route.abort()

            context.route("**/*", only_the_file)
            page = context.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: (errors.append("a dialog opened: " + d.message), d.dismiss()))
            page.goto(out.as_uri())
            page.wait_for_function("document.querySelectorAll('section.view[data-drawn]').length === "
                                   f"{len(report.VIEWS)}", timeout=120_000)
            for view in report.VIEWS:  # every section drew its charts
                drawn = page.locator(f"#{view} .js-plotly-plot")
                assert drawn.count() >= 1, view
                assert page.locator(f"#{view} .main-svg").count() >= drawn.count(), view
            heat = page.locator("#heatmap .js-plotly-plot")
            z_mean = page.evaluate("document.querySelector('#heatmap .js-plotly-plot').data[0].z")
            page.locator("#heatmap select").nth(2).select_option("1")  # head 2
            page.wait_for_function("document.querySelector('#heatmap .gtitle').textContent.endsWith('head 2')")
            z_head = page.evaluate("document.querySelector('#heatmap .js-plotly-plot').data[0].z")
            assert z_head != z_mean and heat.locator(".heatmaplayer image, .hm image").count() >= 1
            page.locator("#heatmap select").nth(0).select_option("encoder")
            page.wait_for_function("document.querySelector('#heatmap .gtitle').textContent.startsWith('Encoder')")
            assert "<img" not in page.locator("#summary").inner_html().replace("&lt;img", "")
            assert page.locator("#summary").inner_text().count('<img src=x onerror="alert(1)">') == 1
            assert not errors, errors
            assert not fetched, fetched
        finally:
            browser.close()


@pytest.mark.slow
@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shipped checkpoint is not here")
def test_the_docs_notebook_runs_in_a_real_kernel():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(ROOT / "docs" / "notebook.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error" or o.get("name") == "stderr"], outputs
    shown = [o["data"]["text/html"] for o in outputs if o.output_type in ("display_data", "execute_result")
             and "text/html" in o.get("data", {})]
    assert any(h.startswith("<svg") and "Cross-attention · layer 2" in h for h in shown)  # the heatmap
    assert any('class="attn-all-heads"' in h for h in shown)  # all heads
    pages = [h for h in shown if h.startswith('<iframe class="attn-page"')]
    assert pages and all(v in pages[0] for v in ("id=&quot;heatmap&quot;", "id=&quot;step&quot;"))


def test_the_export_view_builds_the_page_only_when_asked(app_env, tr, monkeypatch):
    from conftest import assert_clean, new_app, set_view, translate

    built: list[str] = []
    real = report.build_page
    monkeypatch.setattr(report, "build_page", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    text = "A girl <b>walks</b> on the street."
    at = set_view(translate(new_app(), text), "Export")
    assert_clean(at)
    buttons = at.get("download_button")
    assert len(buttons) == 3 and not built  # JSON, NPZ and the page: none of them built before its click
    assert buttons[-1].proto.label == "Download the page (HTML)"
    from app import cached

    key = next(k for k in cached.RESULTS._items if k[0] == "analysis" and k[3] == text)
    before = cached.RESULTS.nbytes
    model = cached.Model(key[1], key[2])
    page = model.report_file(key[3], key[4])()  # what the button's click calls
    assert page.decode("utf-8") == built[0] and cached.RESULTS.nbytes - before >= len(page)  # counted in the budget
    assert model.report_file(key[3], key[4])() is page  # kept: a second click builds nothing
    assert len(built) == 1
    data = page_json(built[0])
    assert data["summary"]["translation"] == tr.translate(text).text  # the sentence on screen
    assert data["views"] == list(report.DEFAULT_VIEWS)
