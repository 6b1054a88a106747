"""The Space image without Docker: what ``.ci/image_check`` reads from the Dockerfile and ``.dockerignore``
(what goes in, how it is installed, how it starts), ``constraints.txt`` against the installed project, and what the
check waits for on a page (``.ci/image_page.py``, on small pages made here: it fails when the first picture is
missing, whichever way the picture is drawn). No network, no venv, no app server: the full check is
``.venv/bin/python .ci/image_check`` (minutes; ``.ci/run`` runs it)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def image_check():
    loader = importlib.machinery.SourceFileLoader("image_check", str(ROOT / ".ci" / "image_check"))
    spec = importlib.util.spec_from_loader("image_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def steps(image_check):
    return image_check.dockerfile.instructions((ROOT / "Dockerfile").read_text(encoding="utf-8"))


def test_the_image_gets_the_app_and_not_tests_bench_runs_or_training_state(image_check, tmp_path):
    """The real Dockerfile and .dockerignore over a made-up build context."""
    context, dest = tmp_path / "context", tmp_path / "image"
    dest.mkdir()
    wanted = ["pyproject.toml", "README.md", "constraints.txt", "transformer/__init__.py",
              "transformer/network/model.py", "app/main.py", "app/views/heatmap.py", ".streamlit/config.toml",
              "checkpoints/m/model.safetensors", "checkpoints/m/config.json",
              "checkpoints/m/snapshots/step1.safetensors"]
    unwanted = ["tests/transformer/test_model.py", "bench/speed.py",
                "runs/en-de/state.pt", "test-artifacts/browser.png",
                "transformer/__pycache__/model.cpython-311.pyc", "app/__pycache__/main.cpython-311.pyc",
                "checkpoints/m/state.pt", "checkpoints/m/averaging/step1.safetensors", ".git/HEAD",
                "training-logs/run.log", ".venv/bin/python"]
    for name in wanted + unwanted:
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        (context / name).write_text(name)
    shutil.copy(ROOT / "Dockerfile", context / "Dockerfile")
    shutil.copy(ROOT / ".dockerignore", context / ".dockerignore")
    staged = set(image_check.dockerfile.stage(context, dest))
    assert set(wanted) <= staged
    assert not staged & set(unwanted)
    assert (dest / "app/views/heatmap.py").read_text() == "app/views/heatmap.py"  # contents, at the same place


@pytest.mark.parametrize("rules, path, left_out", [
    ("**/__pycache__", "app/views/__pycache__/x.pyc", True),   # ** spans folders; a matched folder takes its files
    ("*.tmp", "x.tmp", True),
    ("*.tmp", "app/x.tmp", False),                            # Docker's * does not cross '/'
    ("checkpoints/**/state.pt", "checkpoints/state.pt", True),  # ** may be no folder at all
    ("checkpoints/**/averaging/", "checkpoints/a/b/averaging/s.safetensors", True),
    ("*.tmp\n!keep.tmp", "keep.tmp", False),                  # an exception after a rule: the last match decides
    ("!keep.tmp\n*.tmp", "keep.tmp", True),
    ("/runs", "runs/x/state.pt", True),                       # a leading / is the context root
    ("# comment\n\ntests/", "tests/test_x.py", True),
    ("tests/", "app/tests/x.py", False),
])
def test_dockerignore_rules_follow_docker(image_check, tmp_path, rules, path, left_out):
    (tmp_path / ".dockerignore").write_text(rules + "\n")
    assert image_check.dockerfile.ignored(path, image_check.dockerfile.ignore_rules(tmp_path)) is left_out


def test_the_image_installs_the_project_with_its_constraints_and_starts_public(image_check, steps):
    commands = [words for words, _ in image_check.dockerfile.pip_commands(steps)]
    torch_at = next(i for i, w in enumerate(commands) if any(a.startswith("torch==") for a in w))
    project_at = next(i for i, w in enumerate(commands) if ".[app]" in w)
    assert torch_at < project_at  # CPU torch first, so the project's install does not pull a CUDA build
    project = commands[project_at]
    assert project[project.index("-c") + 1] == "constraints.txt"
    assert not any(a.startswith("-r") for a in project)  # no second hand-written dependency list
    # the torch version installed first is the one constraints.txt pins
    torch_pin = next(a for a in commands[torch_at] if a.startswith("torch==")).split("==", 1)[1]
    assert image_check.dockerfile.read_constraints(ROOT / "constraints.txt")["torch"] == torch_pin
    assert image_check.dockerfile.env_before(steps)["ATTN_PUBLIC"] == "1"
    words = image_check.dockerfile.cmd(steps)
    assert words[:3] == ["streamlit", "run", "app/serve.py"]  # app/main.py's page, warmed before its health check
    moved = image_check.dockerfile.on_port(words, 4321)
    assert "--server.port=4321" in moved and "--server.address=127.0.0.1" in moved
    assert [w for w in moved if not w.startswith("--server.")] == [w for w in words if not w.startswith("--server.")]
    probe = image_check.dockerfile.healthcheck(steps)
    assert probe is not None and "/_stcore/health" in probe and image_check.IMAGE_PORT in probe


def test_the_image_fetches_the_test_split_where_the_app_reads_it(image_check, steps, tmp_path):
    """The shipped tables hold no Multi30k line; the image downloads the test split (its two languages) to the
    folder ``ATTN_DATA_DIR`` names, relative to the app's folder, where "Whole test set" joins them back. The check
    (which cannot download) puts its stand-in copy where that ``RUN`` writes, and the app reads it there."""
    import posixpath

    command, dest, files = image_check.dockerfile.data_fetch(steps)
    assert command in image_check.dockerfile.other_runs(steps)  # not a pip install: the check does not run it
    assert "test_2016_flickr.en" in files and "test_2016_flickr.de" in files and not any("train" in f for f in files)
    workdir = image_check.dockerfile.workdir(steps)
    data_dir = image_check.dockerfile.env_before(steps)["ATTN_DATA_DIR"]
    assert posixpath.join(workdir, dest) == data_dir
    app, work = tmp_path / "app", tmp_path
    assert Path(image_check.in_image(data_dir, workdir, app, work)) == app / dest
    assert Path(image_check.in_image("/home/user", workdir, app, work)) == work / "home" / "user"
    assert image_check.in_image("checkpoints/x", workdir, app, work) == "checkpoints/x"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("extra", ["app", "dev"])
def test_constraints_pin_every_runtime_dependency(image_check, extra):
    """Every distribution ``pip install .[app]`` (the image) and ``pip install -e .[dev]`` (.ci/run, the README's
    set-up) brings in (the installed metadata's requirements, followed) has a pin in constraints.txt, and the pins
    satisfy the project's own version ranges."""
    requirements = pytest.importorskip("packaging.requirements")
    try:
        project = metadata.distribution("attention-explorer")
    except metadata.PackageNotFoundError:
        pytest.skip("attention-explorer is not installed (pip install -e .)")
    pins = image_check.dockerfile.read_constraints(ROOT / "constraints.txt")
    direct = [requirements.Requirement(r) for r in project.requires or []]
    direct = [r for r in direct if r.marker is None or r.marker.evaluate({"extra": extra})
              or r.marker.evaluate({"extra": ""})]
    own = [r for r in direct if _canonical(r.name) == "attention-explorer"]  # dev = [app, bench] + tools
    direct = [r for r in direct if _canonical(r.name) != "attention-explorer"]
    direct += [requirements.Requirement(r) for r in project.requires or [] for o in own
               if (m := requirements.Requirement(r).marker) is not None and any(m.evaluate({"extra": e})
                                                                                for e in o.extras)]
    for req in direct:
        assert _canonical(req.name) in pins, f"{req.name} is not pinned"
        assert req.specifier.contains(pins[_canonical(req.name)], prereleases=True), (req, pins[_canonical(req.name)])
    seen, todo = set(), [(r.name, set(r.extras)) for r in direct]
    while todo:
        name, extras = todo.pop()
        key = _canonical(name)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{name} is required but not installed here")
        for text in dist.requires or []:
            req = requirements.Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
                todo.append((req.name, set(req.extras)))
    missing = sorted(seen - set(pins))
    assert not missing, f"not pinned in constraints.txt: {missing}"


def test_ci_and_the_readme_setup_build_the_pinned_environment():
    """.ci/run installs into a new virtual environment with constraints.txt (what the image pins), not into the
    machine's Python, and runs the linter and the suite there."""
    script = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv" in script
    install = next(line for line in script.splitlines() if '-e ".[dev]"' in line)
    assert install.startswith(".venv/bin/python -m pip install") and "-c constraints.txt" in install
    assert ".venv/bin/python -m pytest" in script and ".venv/bin/python -m ruff" in script
    # the image check too, with the interpreter that has Playwright
    assert ".venv/bin/python .ci/image_check" in script.replace("\\\n", " ")


# ------------------------------------------------------------------------------------- what the check waits for

SENTENCE = {"sentence": "Two dogs are playing in the snow.", "translations": ["Zwei Hunde spielen im Schnee."],
            "pieces": [["▁Two", "▁dogs", "▁are", "▁play", "ing", "▁in", "▁the", "▁snow", ".", "</s>"],
                       ["▁Zwei", "▁Hunde", "▁spiel", "en", "▁im", "▁Schnee", ".", "</s>"]]}
OTHER = {"sentence": "A man rides a bike.", "translations": ["Ein Mann fährt Fahrrad."],
         "pieces": [["▁A", "▁man", "▁rides", "▁a", "▁bike", ".", "</s>"],
                    ["▁Ein", "▁Mann", "▁fährt", "▁Fahr", "rad", ".", "</s>"]]}
TITLE = "Cross-attention · layer 4 · mean over heads"  # as the app names its first picture: not the sentence


@pytest.mark.parametrize("picture, named", [
    ({"name": TITLE, "text": "".join(SENTENCE["pieces"][1] + SENTENCE["pieces"][0])}, True),  # its labels
    ({"name": TITLE, "text": "▁Zwei▁Hunde▁spiel en▁im▁Schnee."}, True),   # one side's pieces are enough
    ({"name": "Attention in: Two dogs are playing in the snow.", "text": ""}, True),  # its name (an alt text)
    ({"name": "Zwei Hunde spielen im Schnee.", "text": ""}, True),
    ({"name": TITLE, "text": "".join(OTHER["pieces"][0] + OTHER["pieces"][1])}, False),  # another sentence's
    ({"name": TITLE, "text": "▁Zwei▁Hunde▁im▁Schnee."}, False),  # a piece missing: not all of this sentence
    ({"name": TITLE, "text": ""}, False),
])
def test_a_picture_is_named_for_the_sentence_by_its_name_or_its_labels(image_check, picture, named):
    assert image_check.image_page.names_sentence(picture, SENTENCE) is named


def _figure_html(fig) -> str:
    return fig.to_html(include_plotlyjs=True, full_html=True, config={"displayModeBar": False})


def _svg(pieces_q, pieces_k) -> str:
    from app.drawing import svg

    weights = np.full((len(pieces_q), len(pieces_k)), 1.0 / len(pieces_k))
    return svg.heatmap_svg(weights, pieces_q, pieces_k, title=TITLE, query_title="output", key_title="source")


def _page(body: str) -> str:
    """A page as Streamlit lays it out: the main area, the translation, ``body``."""
    return (f"<html><body><div data-testid='stMain'><p>{SENTENCE['translations'][0]}</p>{body}</div>"
            "</body></html>")


def _drawn_as(how: str) -> str:
    """The sentence's picture, drawn each way the check must accept."""
    from app.drawing import figures, svg

    q, k = SENTENCE["pieces"][1], SENTENCE["pieces"][0]
    if how == "an SVG image":  # the first screen's picture
        return _page(f"<img alt='{TITLE}' src='{svg.data_uri(_svg(q, k))}'>")
    if how == "an inline SVG":
        return _page(_svg(q, k))
    if how == "a plotly chart":  # the Interactive switch's
        weights = np.full((len(q), len(k)), 1.0 / len(k))
        html = _figure_html(figures.attention_heatmap(weights, q, k, title=TITLE))
        return html.replace("<body>", f"<body><div data-testid='stMain'><p>{SENTENCE['translations'][0]}</p>", 1)
    # an image file (a 1x1 PNG here) whose alt text names the sentence
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    return _page(f"<img style='width:200px;height:100px' alt='Attention in: {SENTENCE['sentence']}' "
                 f"src='data:image/png;base64,{png}'>")


@pytest.fixture(scope="module")
def browser_page():
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip(f"{chromium} not found (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=["--headless", "--no-sandbox"])
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            browser.close()


@pytest.mark.browser
@pytest.mark.parametrize("how", ["an SVG image", "an inline SVG", "a plotly chart", "an image"])
def test_the_check_sees_the_picture_however_it_is_drawn(image_check, browser_page, how):
    browser_page.set_content(_drawn_as(how))
    translation, picture = image_check.image_page.wait_for_translation(browser_page, SENTENCE, timeout_s=30)
    assert translation == SENTENCE["translations"][0]
    assert picture["how"] == how


@pytest.mark.browser
@pytest.mark.parametrize("body, why", [
    ("", "no picture named for the sentence"),  # the translation, and no picture at all
    (f"<img alt='{TITLE}' src='data:,'>", "no picture named for the sentence"),  # a picture not drawn (broken)
    ("OTHER", "no picture named for the sentence"),  # a picture of another sentence (the last one's)
    ("HIDDEN", "no picture named for the sentence"),  # this sentence's picture, but not shown
], ids=["none", "broken", "another-sentence", "hidden"])
def test_the_check_fails_when_the_first_picture_is_missing(image_check, browser_page, body, why):
    from app.drawing import svg

    if body == "OTHER":
        body = f"<img alt='{TITLE}' src='{svg.data_uri(_svg(OTHER['pieces'][1], OTHER['pieces'][0]))}'>"
    elif body == "HIDDEN":
        body = (f"<img style='display:none' alt='{TITLE}' "
                f"src='{svg.data_uri(_svg(SENTENCE['pieces'][1], SENTENCE['pieces'][0]))}'>")
    browser_page.set_content(_page(body))
    with pytest.raises(image_check.CheckFailed, match=why):
        image_check.image_page.wait_for_translation(browser_page, SENTENCE, timeout_s=1)


@pytest.mark.browser
def test_the_check_fails_without_the_translation_and_on_any_stack_trace(image_check, browser_page):
    from app.drawing import svg

    picture = f"<img alt='{TITLE}' src='{svg.data_uri(_svg(SENTENCE['pieces'][1], SENTENCE['pieces'][0]))}'>"
    browser_page.set_content(f"<div data-testid='stMain'>{picture}</div>")
    with pytest.raises(image_check.CheckFailed, match="no translation"):
        image_check.image_page.wait_for_translation(browser_page, SENTENCE, timeout_s=1)
    for trace in ("<pre>Traceback (most recent call last):\n  File ...</pre>",
                  "<div data-testid='stException'>KeyError: 'x'</div>"):
        browser_page.set_content(f"<div data-testid='stMain'><p>Loading…</p>{trace}</div>")
        with pytest.raises(image_check.CheckFailed, match="stack trace"):
            image_check.image_page.wait_for_translation(browser_page, SENTENCE, timeout_s=60)  # fails before
        browser_page.set_content(_page(picture + trace))  # what was waited for is there, and a trace beside it
        with pytest.raises(image_check.CheckFailed, match="stack trace"):
            image_check.image_page.wait_for_translation(browser_page, SENTENCE, timeout_s=60)


NOTICE = ("<div data-testid='stAlertContainer'><span>description</span><div data-testid='stMarkdownContainer'>"
          "The source sentences are not on this server. Get it with: python -m transformer.data</div></div>")
LINE = "A man in an orange hat starring at something."


@pytest.mark.browser
@pytest.mark.parametrize("shown, has_data, passes", [
    (NOTICE + "<div data-testid='stDataFrame'>0 Ein Mann</div>", False, True),   # says why the text is missing
    (f"<div data-testid='stDataFrame'>0 {LINE} Ein Mann</div>", True, True),     # the split found: its text
    ("<div data-testid='stDataFrame'>0 Ein Mann</div>", False, False),           # missing, and nothing says why
    ("<div data-testid='stException'>FileNotFoundError</div>", False, False),   # a trace instead of the notice
    (NOTICE + "<div data-testid='stDataFrame'>0 Ein Mann</div>", True, False),   # the data was there: no notice
    (f"{NOTICE}<div data-testid='stDataFrame'>0 {LINE}</div>", False, False),  # a notice that is not true
], ids=["notice", "text", "silent", "trace", "notice-with-data", "untrue-notice"])
def test_whole_test_set_must_say_why_its_text_is_missing(image_check, browser_page, shown, has_data, passes):
    """The check's visit of Whole test set, on pages served here as the app's address would be."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the standard library's name)
            body = f"<html><body><div data-testid='stMain'>{shown}</div></body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        visit = lambda: image_check.image_page.whole_test_set(browser_page, url, has_data, timeout_s=1,  # noqa: E731
                                                               line=LINE)
        if passes:
            said = visit()
            assert ("not on this server" in said) is not has_data
            assert "description" not in said  # the notice's text, not its icon's name
        else:
            with pytest.raises(image_check.CheckFailed):
                visit()
    finally:
        server.shutdown()
        server.server_close()
