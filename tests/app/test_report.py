"""The offline page (``python -m app.report``) and the notebook views (``app.notebook.show``): what the page holds
against the model's own attentions, escaping, the command line, every family, and the page in a real browser with
the network cut off."""

from __future__ import annotations

import base64
import html
import json
import re
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("plotly")

from app import notebook, report  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "multi30k-en-de"
CAPTION = "Two young men in red shirts and white hats are playing soccer on a green field near the stone wall."
HOSTILE = 'A dog <img src=x onerror="alert(1)"> runs </script><script>alert(2)</script> & plays.'


def page_figures(page: str) -> list[dict]:
    """The figures a page (or a notebook output) holds: plotly JSON, deflated and base64 in one element."""
    found = re.findall(r'<script type="application/octet-stream" id="attn-[^"]+-data">([A-Za-z0-9+/=]*)</script>', page)
    assert found, "the views hold their figures in one script element, deflated JSON in base64"
    return [f for b64 in found for f in json.loads(zlib.decompress(base64.b64decode(b64)).decode("utf-8"))]


def named(page: str, name: str) -> dict:
    """The figure whose PNG is ``name`` (each chart's camera button names its file)."""
    hits = [f for f in page_figures(page) if f["config"]["toImageButtonOptions"]["filename"] == name]
    assert hits, f"no figure {name!r}"
    return hits[0]


def values(data) -> np.ndarray:
    """A figure's array as plotly.js reads it: a list, or a typed array (``bdata``, base64 with its dtype)."""
    if isinstance(data, dict):
        out = np.frombuffer(base64.b64decode(data["bdata"]), dtype=np.dtype(data["dtype"]).newbyteorder("<"))
        return out.reshape([int(n) for n in str(data.get("shape", out.size)).split(",")]).astype(float)
    return np.array(data, dtype=float)


def views_of(page: str) -> tuple[list[str], list[str]]:
    """The views a page draws and those it leaves out (they need the model)."""
    match = re.search(r'data-views="([^"]*)" data-left-out="([^"]*)"', page)
    return [v for v in match.group(1).split(",") if v], [v for v in match.group(2).split(",") if v]


def test_every_view_with_a_description_is_offline_in_the_registry():
    from app import registry
    from app.views import PAGES, VIEWS

    assert VIEWS is registry.VIEWS  # one list of views, read by the page, the offline page and a notebook
    assert list(PAGES) == list(VIEWS)  # each one drawn on the page
    offline = [v for v in VIEWS.values() if v.offline]
    assert [v.key for v in offline] == list(report.OFFLINE_VIEWS)  # the offline page's, in the registry's order
    assert [report.VIEW_TITLES[v.key] for v in offline] == [v.title for v in offline]
    assert VIEWS["source_or_prefix"].offline and not VIEWS["ablation"].offline
    assert "source_or_prefix" in report.DEFAULT_VIEWS


@pytest.mark.slow  # among the fast loop's slowest (issue 57 §19: it stays under a minute)
def test_the_page_draws_the_builders_figures_of_the_model_s_own_numbers(tr):
    import transformer
    from transformer.interpret import contributions

    text = "Two dogs play in the park."
    result = tr.translate(text, beam_size=2)
    page = report.build_page(result, tr, report.OFFLINE_VIEWS, text=text, method="input_x_gradient")
    assert views_of(page) == (list(report.OFFLINE_VIEWS), [])
    for kind, attns in (("encoder", result.encoder_attentions), ("decoder", result.decoder_attentions),
                        ("cross", result.cross_attentions)):
        own = np.stack([a.numpy() for a in attns])  # (L, H, Q, K), the translation's own
        for layer in range(own.shape[0]):
            for head in range(own.shape[1]):
                z = values(named(page, f"{kind}-L{layer + 1}-H{head + 1}")["data"][0]["z"])
                np.testing.assert_allclose(z, own[layer, head], atol=5e-4 + 1e-7)
            mean = values(named(page, f"{kind}-L{layer + 1}-mean")["data"][0]["z"])
            np.testing.assert_allclose(mean, own[layer].mean(0), atol=5e-4 + 1e-7)
    # the candidates are the model's own next-token distribution, teacher-forced
    probs = tr.attentions(result.source_ids, result.target_ids[:-1]).logits[0].softmax(-1)
    bars = named(page, "step1-topk")["data"][0]["x"]
    assert bars[0] == pytest.approx(float(probs[0].max()), abs=1e-3)
    causal = [values(f["data"][0]["z"]) for f in page_figures(page)
              if f["config"]["toImageButtonOptions"]["filename"] == "mask-causal"]
    assert [len(c) for c in causal] == [len(result.decoder_input_tokens) + p for p in (0, 2)]  # 0 and 2 <pad>
    causal = causal[1]
    np.testing.assert_array_equal(causal, np.tril(np.ones_like(causal)))
    table = values(named(page, "positional-encoding")["data"][0]["z"])
    np.testing.assert_allclose(table, transformer.positional_encoding(len(table), tr.config.d_model).numpy(),
                               atol=6e-4)
    src, tgt = torch.tensor([result.source_ids]), torch.tensor([[tr.config.bos_id] + result.target_ids[:-1]])
    share = contributions(tr.model, src, tgt).source_share[0].numpy()  # ALTI+, computed apart
    np.testing.assert_allclose(values(named(page, "source-share")["data"][0]["y"]), share, atol=1e-3)
    assert len(named(page, "logit-lens")["data"][0]["z"]) == tr.config.n_decoder_layers


def charts_of(items) -> list:
    """Every chart of a description's parts, in the order the page draws them (each option of a picker in turn)."""
    from app.parts import Chart, Choice

    out = []
    for p in items:
        if isinstance(p, Chart):
            out.append(p)
        elif isinstance(p, Choice):
            for _, options in p.options:
                out += charts_of(options)
    return out


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
def test_every_copy_of_a_chart_is_what_the_builder_draws(tr):
    """The heatmap's layers and heads and the step's steps and layers are copies of one built chart's JSON with
    their own numbers and title (``parts.variant``, sharing the rest): each equals what its builder draws for it,
    title included, after every copy before it went through ``figure_json`` (none changes what the next shares);
    and the page holds the described charts as ``figure_json`` makes them."""
    from app import parts
    from app.drawing.analysis import KINDS

    text = "Two dogs play in the park."
    a = report.analysis_for(tr.translate(text, beam_size=2), tr, text)
    src = parts.Source(a, tr)
    charts = [c for described in (parts.heatmap, parts.step_through) for c in charts_of(described.describe(src))]
    shown = [report.figure_json(c.figure) for c in charts]
    n_layers = a.cross.shape[0]
    built = {}  # the builders' own charts, by name (a step's cross-attention: by name and layer)
    for kind in KINDS:
        for layer in range(1, a.attention(kind).shape[0] + 1):
            for head in ("mean", *map(str, range(1, a.attention(kind).shape[1] + 1))):
                built[f"{kind}-L{layer}-{'mean' if head == 'mean' else 'H' + head}"] = \
                    parts.heatmap.chart(a, kind, layer, head)
    for t in range(len(a.target_tokens)):
        for layer in range(1, n_layers + 1):
            built[f"step{t + 1}-cross {layer}"] = parts.step_through.looked(a, t, layer, (0.0, 1.0))
    copies = [(c, spec) for c, spec in zip(charts, shown) if c.name in built or c.name.endswith("-cross")]
    step_seen: dict[str, int] = {}
    for chart, spec in copies:
        name = chart.name
        if name.endswith("-cross"):  # the layers of a step, in order
            step_seen[name] = step_seen.get(name, 0) + 1
            name = f"{name} {step_seen[name]}"
        assert isinstance(chart.figure, dict), f"{name}: a copy, not a figure built again"
        assert spec == report.figure_json(built.pop(name).figure), name
    assert not built, f"not on the page: {sorted(built)}"
    page = report.build_page(a, tr, ("heatmap", "step_through"))
    for on_page, spec, chart in zip(page_figures(page), shown, charts, strict=True):
        assert {k: v for k, v in on_page.items() if k != "config"} == {k: v for k, v in spec.items() if k != "title"}, \
            chart.name


def test_the_page_is_one_file_with_nothing_to_fetch(tr):
    page = report.build_page(tr.translate("A girl walks."), tr)
    from plotly.offline import get_plotlyjs

    assert page.count(get_plotlyjs()[:200]) == 1  # plotly.js once, inline
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page, re.I)  # nothing loaded from elsewhere
    assert "@import" not in page


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
def test_text_from_the_sentence_is_shown_as_text(tr):
    result = tr.translate(HOSTILE)
    page = report.build_page(result, tr, text=HOSTILE)
    body = page.split("</head>", 1)[1]
    assert "<img src=x" not in body and "<script>alert(2)" not in body
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body  # the summary shows it escaped
    assert all("<img" not in t for f in page_figures(page) for t in f["layout"]["xaxis"].get("ticktext", []))


def test_the_command_writes_the_page_with_the_app_s_input_rules(tmp_path, tiny_checkpoint, capsys):
    out = tmp_path / "page.html"
    reversed_text = "A man \u202eekib a sedir\u202c on the road."  # U+202E shows "ekib a sedir" as "rides a bike"
    assert report.main([reversed_text, "--out", str(out), "--checkpoint", str(tiny_checkpoint), "--beam", "1",
                        "--views", "heatmap,lines"]) == 0
    page = out.read_text(encoding="utf-8")
    assert views_of(page) == (["heatmap", "lines"], [])
    assert "\u202e" not in page and "\u202c" not in page and "A man ekib a sedir on the road." in page
    assert "Removed 2 bidirectional control character(s)" in capsys.readouterr().err
    assert "Removed 2 bidirectional control character(s)" in page  # and the page says so
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


@pytest.mark.slow  # among the fast loop's slowest (issue 57 §19: it stays under a minute)
@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shipped checkpoint is not here")
def test_a_twenty_word_caption_makes_a_page_under_5_5_mb(tmp_path):
    out = tmp_path / "caption.html"
    assert len(CAPTION.split()) == 20
    subprocess.run([sys.executable, "-m", "app.report", CAPTION, "--out", str(out), "--checkpoint", str(SHIPPED)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    assert out.stat().st_size < 5_500_000


def test_show_draws_one_view_or_every_view(tr):
    result = tr.translate("A woman plays with a ball.")
    heat = notebook.show(result, "heatmap", kind="cross", layer=2, head=3)
    assert heat._repr_html_() == heat.html and heat.html.startswith("<svg")
    assert "Cross-attention · layer 2 · head 3" in heat.html
    cells = re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})"><title>', heat.html)
    weights = result.cross_attentions[1][2].numpy()
    assert len(cells) == weights.size
    from app.drawing import svg

    assert cells == list(svg.colours(weights, 0.0, 1.0).ravel())  # the head's own weights, in order
    grid = notebook.show(result, "all_heads", kind="decoder", return_html=True)
    n_layers, n_heads = len(result.decoder_attentions), result.decoder_attentions[0].shape[0]
    assert isinstance(grid, str) and grid.count("<img ") == n_layers * n_heads
    every = notebook.show(result, translator=tr)
    assert "<iframe" not in every.html and views_of(every.html) == (list(report.DEFAULT_VIEWS), [])
    alone = notebook.show(result)  # without the translator: the views of the attentions alone
    assert views_of(alone.html) == (["heatmap", "all_heads", "lines"],
                                    [v for v in report.DEFAULT_VIEWS if v not in ("heatmap", "all_heads", "lines")])
    # the Source row is the sentence, not the pieces joined
    assert "<th>Source</th><td>A woman plays with a ball.</td>" in alone.html
    step = notebook.show(result, "step_through", translator=tr)
    assert views_of(step.html) == (["step_through"], []) and named(step.html, "step1-topk")
    assert views_of(step.page) == (["step_through"], [])  # .save() writes the same view as a page
    with pytest.raises(ValueError, match="translator"):
        notebook.show(result, "step")
    with pytest.raises(ValueError, match="layer counts from 1 to 2"):
        notebook.show(result, "heatmap", layer=3)
    with pytest.raises(ValueError, match="kind must be"):
        notebook.show(result, "all_heads", kind="self")
    with pytest.raises(TypeError):
        notebook.show(result, "heatmap", colour="red")


def test_a_notebook_gets_plotly_js_once(tr, monkeypatch):
    from plotly.offline import get_plotlyjs

    monkeypatch.setitem(notebook._sent, "plotly", False)  # a new kernel
    result = tr.translate("A dog runs in the park.")
    outputs = [notebook.show(result, "lines").html, notebook.show(result, "masks", translator=tr).html,
               notebook.show(result, translator=tr).html, notebook.show(result, "heatmap").html]
    head = get_plotlyjs()[:200]
    assert [o.count(head) for o in outputs] == [1, 0, 0, 0]
    assert sum(len(o) for o in outputs[1:]) < 1_000_000  # the others: their figures only


@pytest.mark.slow  # among the fast loop's slowest (issue 57 §19: it stays under a minute)
def test_show_takes_every_family(tmp_path, tiny_corpus):
    transformers = pytest.importorskip("transformers")  # noqa: F841
    import sentencepiece as spm
    from m2m100_models import save_m2m100, train_spm
    from marian_models import save_marian

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
        shown = notebook.show(result, translator=tr).html
        if langs:
            assert result.target_tokens[0] == "fra_Latn"
        n_layers = len(result.cross_attentions)
        cross = values(named(shown, f"cross-L{n_layers}-H1")["data"][0]["z"])
        np.testing.assert_allclose(cross, result.cross_attentions[-1][0].numpy(), atol=5e-4 + 1e-7)
        ticks = named(shown, f"cross-L{n_layers}-mean")["layout"]["yaxis"]["ticktext"]
        assert len(ticks) == len(result.target_tokens)
    out = tmp_path / "nllb.html"  # the command with a multilingual model's languages
    assert report.main(["A man rides a red bike.", "--out", str(out), "--checkpoint", str(nllb), "--beam", "1",
                        "--src-lang", "eng_Latn", "--tgt-lang", "fra_Latn", "--views", "heatmap,step"]) == 0
    page = out.read_text(encoding="utf-8")
    assert "<th>Languages</th><td>eng_Latn → fra_Latn</td>" in page
    assert views_of(page) == (["heatmap", "step_through"], [])


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
def test_importing_the_notebook_module_imports_no_streamlit():
    code = "import sys, app.notebook, app.report; print([m for m in sys.modules if m.split('.')[0] == 'streamlit'])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------------ real clients

CHROMIUM = "/usr/bin/chromium"


OVERLAPS = (ROOT / "tests" / "overlap.js").read_text(encoding="utf-8")  # pairs of a chart's texts whose glyph boxes
# (rotation included) cross, in one element
REVERSED = ('A "blue" dog <img src=x onerror="alert(1)"> \u202eekib a sedir\u202c </script><script>alert(2)</script> '
            "& runs.")


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists() or not SHIPPED.is_dir(), reason="needs chromium and the shipped model")
def test_the_page_draws_offline_in_chromium_on_every_screen(tmp_path):
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    out = tmp_path / "page.html"  # HTML-like text, quotes and a U+202E in one sentence
    subprocess.run([sys.executable, "-m", "app.report", REVERSED, "--out", str(out), "--checkpoint", str(SHIPPED),
                    "--views", ",".join(report.OFFLINE_VIEWS), "--method", "input_x_gradient"],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for width, height in ((1280, 720), (390, 844)):
                phone = width < 500
                context = browser.new_context(offline=True, viewport={"width": width, "height": height},
                                              is_mobile=phone, has_touch=phone)
                fetched: list[str] = []

                def only_the_file(route, fetched=fetched):
                    if route.request.url.startswith("file:"):
                        route.continue_()
                    else:
                        fetched.append(route.request.url)
                        route.abort()

                context.route("**/*", only_the_file)
                page = context.new_page()
                errors: list[str] = []
                page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.on("dialog", lambda d, errors=errors: (errors.append("a dialog opened: " + d.message),
                                                            d.dismiss()))
                page.goto(out.as_uri())
                page.wait_for_function("document.querySelectorAll('section.view[data-drawn]').length === "
                                       f"{len(report.OFFLINE_VIEWS)}", timeout=120_000)
                where = f"{width}x{height}"
                crossing = page.evaluate_handle("""() => {  // the counter itself: two labels on one spot do cross
                    const div = document.createElement("div"); document.body.appendChild(div);
                    return Plotly.newPlot(div, [{x: [0, 0], y: [0, 0], mode: "text", text: ["crossing", "labels"]}],
                                          {width: 400, height: 300, xaxis: {visible: false}, yaxis: {visible: false}})
                                          .then(() => div); }""")
                assert len(page.evaluate(OVERLAPS, crossing)) == 1
                page.evaluate("(div) => div.remove()", crossing)
                for view in report.OFFLINE_VIEWS:  # every section drew its charts, and no chart text sits on another
                    section = page.locator(f"#{view}")
                    assert section.locator(".js-plotly-plot .main-svg").count() >= 1, (view, where)
                    assert page.evaluate(OVERLAPS, section.element_handle()) == [], (view, where)
                    cut = page.evaluate("(s) => Array.from(s.querySelectorAll('.fig-title')).filter((t) => "
                                        "t.offsetParent && t.scrollWidth > t.clientWidth + 1).length",
                                        section.element_handle())
                    assert cut == 0, (view, where)  # every title whole (it wraps)
                # plotly's toolbar: on hover on a desktop; none on a phone (it would sit on the charts)
                assert (page.locator(".modebar-group").count() == 0) == phone, where
                if not phone:
                    assert "<img" not in page.locator("#summary").inner_html().replace("&lt;img", "")
                    assert page.locator("#summary").inner_text().count('<img src=x onerror="alert(1)">') == 1
                    title = "#heatmap .fig-title >> visible=true"
                    z_mean = page.evaluate("document.querySelector('#heatmap .js-plotly-plot').data[0].z")
                    page.locator("#heatmap select >> visible=true").nth(2).select_option("2")  # type, layer, head
                    assert page.locator(title).inner_text().endswith("head 2")
                    z_head = page.evaluate("Array.from(document.querySelectorAll('#heatmap .js-plotly-plot'))"
                                           ".find((d) => d.offsetParent).data[0].z")
                    assert z_head != z_mean
                    page.locator("#heatmap select").first.select_option("0")  # the type: encoder
                    assert page.locator(title).inner_text().startswith("Encoder")
                # the app's input rules: the U+202E is removed (and said), the text reads as typed
                body = page.locator("body").inner_text()
                assert "\u202e" not in body and "ekib a sedir" in page.locator("#summary").inner_text()
                assert "Removed 2 bidirectional control character(s)" in body
                if phone:  # a chart wider than the phone scrolls, and says so
                    assert page.locator(".hint:not([hidden])").count() >= 1
                assert not errors, (errors, where)
                assert not fetched, fetched
                context.close()
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
    from plotly.offline import get_plotlyjs

    drawn = [h for h in shown if 'class="attn-report"' in h]
    assert [views_of(h)[0] for h in drawn] == [list(report.DEFAULT_VIEWS), ["step_through"]]  # every view, one alone
    assert sum(h.count(get_plotlyjs()[:200]) for h in shown) == 1  # plotly.js once per notebook
    assert sum(len(h) for h in shown) < len(get_plotlyjs()) + 1_500_000  # the rest: a few figures
    assert "<th>Source</th><td>Two young men are playing soccer on a green field.</td>" in drawn[0]


def test_the_export_view_builds_the_page_only_when_asked(app_env, tr, monkeypatch):
    from conftest import assert_clean, new_app, set_view, translate

    built: list[str] = []
    real = report.build_page
    monkeypatch.setattr(report, "build_page", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    text = "A girl <b>walks</b> on the street."
    at = set_view(translate(new_app(), text), "export")
    assert_clean(at)
    buttons = at.get("download_button")
    assert len(buttons) == 3 and not built  # JSON, NPZ and the page: none of them built before its click
    assert buttons[-1].proto.label == "Download the page (HTML)"
    from app.analysis import cached

    key = next(k for k in cached.RESULTS._items if k[0] == "analysis" and k[3] == text)
    before = cached.RESULTS.nbytes
    model = cached.Model(key[1], key[2])
    from app.views.export import page_html

    page = model.report_file(key[3], key[4], page_html)()  # what the button's click calls
    assert page.decode("utf-8") == built[0] and cached.RESULTS.nbytes - before >= len(page)  # counted in the budget
    assert model.report_file(key[3], key[4], page_html)() is page  # kept: a second click builds nothing
    assert len(built) == 1
    assert f"<th>Translation</th><td>{html.escape(tr.translate(text).text)}</td>" in built[0]  # the sentence shown
    assert views_of(built[0]) == (list(report.DEFAULT_VIEWS), [])
