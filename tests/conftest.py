"""Shared fixtures: tiny corpora and tiny checkpoints built on the spot (no shared data needed)."""

from __future__ import annotations

import base64
import functools
import inspect
import json
import os
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

# One thread: the test models are tiny, and on a busy machine (a training run beside the tests) a second
# OpenMP thread spin-waits for CPU time and makes every forward pass ~100x slower.
torch.set_num_threads(1)

# The app under test runs where the tests' oracles run, on the CPU, also on a machine with a GPU (where "auto" would
# take CUDA, whose float rounding can change a random tiny model's tokens); tests/transformer/test_cuda.py picks
# CUDA in the sidebar. Servers the tests start inherit it.
os.environ.setdefault("ATTN_DEVICE", "cpu")

# Multi30k for the tests that need the real corpus: $ATTN_DATA_DIR, else the README's download (data/multi30k),
# else the development machines' shared copy; without any, those tests skip.
_ROOT = Path(__file__).resolve().parents[1]
MULTI30K = next((p for p in (Path(os.environ.get("ATTN_DATA_DIR") or _ROOT / "data" / "multi30k"),
                             _ROOT / "data" / "multi30k", _ROOT.parent / "shared" / "data" / "multi30k")
                 if (p / "train.en").is_file()), _ROOT / "data" / "multi30k")

WORDS_EN = ["a", "man", "woman", "dog", "child", "rides", "runs", "on", "the", "street", "bike", "red", "blue",
            "ball", "plays", "with", "in", "park", "two", "people", "are", "walking", "beach", "girl", "boy"]
WORDS_DE = ["ein", "mann", "frau", "hund", "kind", "fährt", "läuft", "auf", "der", "straße", "fahrrad", "rot",
            "blau", "ball", "spielt", "mit", "im", "park", "zwei", "leute", "gehen", "strand", "mädchen", "junge"]


def make_corpus(directory: Path, src: str = "en", tgt: str = "de", sizes: dict[str, int] | None = None,
                seed: int = 0) -> Path:
    """Write a tiny word-for-word 'translation' corpus in the ``{split}.{lang}`` layout."""
    sizes = sizes or {"train": 300, "val": 20, "test": 20}
    rng = random.Random(seed)
    mapping = dict(zip(WORDS_EN, WORDS_DE))
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in sizes.items():
        src_lines, tgt_lines = [], []
        for _ in range(n):
            words = [rng.choice(WORDS_EN[:-1]) for _ in range(rng.randint(3, 8))]
            src_lines.append(" ".join(words).capitalize() + ".")
            tgt_lines.append(" ".join(mapping[w] for w in words).capitalize() + ".")
        (directory / f"{split}.{src}").write_text("\n".join(src_lines) + "\n", encoding="utf-8")
        (directory / f"{split}.{tgt}").write_text("\n".join(tgt_lines) + "\n", encoding="utf-8")
    return directory


@pytest.fixture(autouse=True)
def _no_remembered_load_failures():
    """The app remembers load failures for the whole server process (``app.analysis.cached.LOAD_FAILURES``); the tests
    share one process, so each test starts with none (a Hub id that one test made fail must not fail the next)."""
    yield
    import sys

    cached = sys.modules.get("app.analysis.cached")
    if cached is not None:
        cached.LOAD_FAILURES.clear()


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_corpus: Path):
    from transformer import Tokenizer

    return Tokenizer.train([tiny_corpus / "train.en", tiny_corpus / "train.de"], vocab_size=80)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:
    """A randomly initialised small model saved as a checkpoint directory (untrained: any output)."""
    from transformer import Transformer, TransformerConfig, save_checkpoint

    torch.manual_seed(0)
    v = tiny_tokenizer.vocab_size
    config = TransformerConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=32, n_heads=4, n_encoder_layers=2,
                               n_decoder_layers=2, d_ff=64, dropout=0.1, max_len=64)
    model = Transformer(config).eval()
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    save_checkpoint(path, model, tiny_tokenizer, {"note": "random weights, for tests"})
    return path


@pytest.fixture()
def app_env(tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The app opens the tiny checkpoint (``ATTN_CHECKPOINT``)."""
    monkeypatch.setenv("ATTN_CHECKPOINT", str(tiny_checkpoint))
    return tiny_checkpoint


@pytest.fixture(scope="session")
def tr(tiny_checkpoint: Path):
    """The tiny checkpoint loaded on CPU (an oracle for what the app shows)."""
    import transformer

    return transformer.load(tiny_checkpoint, device="cpu")


@pytest.fixture(scope="session")
def tiny_server(tiny_checkpoint: Path):
    """A Streamlit server of the app on the tiny checkpoint, started once for the browser tests that need no setting
    of their own (each opens its own browser: its own session); its URL."""
    from bench.browser import streamlit_server

    with streamlit_server(tiny_checkpoint) as url:
        yield url


SHIPPED = _ROOT / "checkpoints" / "multi30k-en-de"  # the shipped model: what a visitor sees first


@pytest.fixture(scope="session")
def shipped_server():
    """A Streamlit server of the app on the shipped model, started once for every browser test that reads it (a
    visitor's page is their own session; the server's caches are shared, as on the Space); its URL."""
    from bench.browser import CHROMIUM, streamlit_server

    if not (SHIPPED / "model.safetensors").is_file():
        pytest.skip("the shipped checkpoint is not here")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    with streamlit_server(SHIPPED) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium through Playwright, launched once for a module's browser tests (each opens its own page)."""
    from playwright.sync_api import sync_playwright

    from bench.browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    if not (MULTI30K / "train.en").is_file():
        pytest.skip(f"Multi30k not found at {MULTI30K} (python -m transformer.data --download data/multi30k)")
    return MULTI30K


# ------------------------------------------------------------------------------------------------ the fast loop
# ``python -m pytest -q -m "not slow"``: every test but those that open a whole page (AppTest), drive a browser,
# train, or re-score the shipped models. ``python -m pytest -q`` still runs everything.

SLOW_FILES = {"test_train.py", "test_learning.py", "test_shipped.py"}
PAGE_NAMES = {"new_app", "AppTest"}


def _opens_page(code, module, seen: set) -> bool:
    """Whether ``code`` (a test, a fixture, or a helper of its module they call) opens an ``AppTest`` page."""
    if code in seen:
        return False
    seen.add(code)
    if PAGE_NAMES & set(code.co_names):
        return True
    inner = [c for c in code.co_consts if inspect.iscode(c)]  # nested functions and lambdas
    helpers = [getattr(module, n) for n in code.co_names if inspect.isfunction(getattr(module, n, None))]
    inner += [f.__code__ for f in helpers if f.__module__ == module.__name__]
    return any(_opens_page(c, module, seen) for c in inner)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` (and so out of the fast loop) the page-level, browser, training and shipped-model tests."""
    for item in items:
        fn, module = getattr(item, "obj", None), getattr(item, "module", None)
        codes = [fn.__code__] if inspect.isfunction(fn) else []
        fixtures = getattr(item, "_fixtureinfo", None)
        for name in item.fixturenames if fixtures else ():
            for fixturedef in fixtures.name2fixturedefs.get(name, ()):
                func = fixturedef.func
                if inspect.isfunction(func) and func.__module__ == getattr(module, "__name__", ""):
                    codes.append(func.__code__)
        if (item.path.name in SLOW_FILES or item.get_closest_marker("browser")
                or (module is not None and any(_opens_page(c, module, set()) for c in codes))):
            item.add_marker(pytest.mark.slow)
    _longest_files_first(items)


# a test's likely seconds on a 2-core machine, by its marks: what orders the files for pytest-xdist
LIKELY_S = {"browser": 30.0, "slow": 4.0}
LIKELY_S_OTHER = 0.3


def _longest_files_first(items: list[pytest.Item]) -> None:
    """Order the files by their likely seconds (``LIKELY_S``), the longest first, each file's tests in their order.
    With ``--dist loadfile --no-loadscope-reorder`` (pyproject.toml) pytest-xdist hands the files out in this order,
    so the last ones, given to whichever process is free, are short and the two processes end together (its own
    order, the files with the most tests first, left the browser files, few tests of half a minute or more, last)."""
    likely: dict[Path, float] = {}
    for item in items:
        mark = next((m for m in LIKELY_S if item.get_closest_marker(m)), None)
        likely[item.path] = likely.get(item.path, 0.0) + LIKELY_S.get(mark, LIKELY_S_OTHER)
    items.sort(key=lambda item: -likely[item.path])  # stable: a file's tests stay together and in order


# ------------------------------------------------------------------------------------------------ tiny models

TINY_SIZES = dict(src_vocab_size=20, tgt_vocab_size=20, d_model=32, n_heads=4, n_encoder_layers=2,
                  n_decoder_layers=2, d_ff=64, dropout=0.0, max_len=32)


def tiny_model(seed: int = 0, **overrides):
    """A randomly initialised small ``Transformer`` in eval mode: ``TINY_SIZES`` with ``overrides``."""
    from transformer import Transformer, TransformerConfig

    torch.manual_seed(seed)
    return Transformer(TransformerConfig(**{**TINY_SIZES, **overrides})).eval()


# ------------------------------------------------------------------------------------------------ AppTest helpers
# Imported by the app's test files (``from conftest import new_app, ...``); streamlit is imported lazily so
# that the model tests run without the app's extras.

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app" / "main.py")


def _views() -> list[str]:
    try:
        from app.views import VIEWS as REGISTRY
    except ImportError:  # the app's extras are not installed
        return []
    return list(REGISTRY)


VIEWS = _views()


def _scan_components_once() -> None:
    """A new ``AppTest`` scans the metadata of every installed distribution for Streamlit components on its first run
    (0.15-0.4 s on the development machines, as long as a tiny page's whole run); what is installed does not change
    within a test process, so the scan is made once and its answer (the same list) kept for the others."""
    from streamlit.components.v2 import manifest_scanner

    if not hasattr(manifest_scanner.scan_component_manifests, "cache_info"):
        manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)


def new_app(query: dict[str, str] | None = None):
    """A fresh page (``AppTest``) opened at ``query``, run once."""
    from streamlit.testing.v1 import AppTest

    _scan_components_once()
    at = AppTest.from_file(APP, default_timeout=60)
    if query:
        at.query_params.update(query)
    return at.run()


def translate(at, text: str):
    at.text_area(key="source_text").set_value(text)
    at.button(key="translate").click()
    return at.run()


def navigate(at, query: dict[str, str]):
    """The browser's Back or Forward to the address ``query``, then the page's run. Streamlit marks such a run as
    history navigation (the only run besides a first visit whose address the page adopts); AppTest cannot send
    the mark, so it is given here, for that one run."""
    from app.page import state

    at.query_params.clear()
    at.query_params.update(query)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(state, "history_navigation", lambda: True)
        return at.run()


def charts(at) -> list[dict]:
    """The page's plotly figures (a wide chart's frozen row labels are none: ``app.page.frozen``)."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def chart(at, title_part: str) -> dict:
    found = [c for c in charts(at) if title_part in str(c["layout"].get("title", {}).get("text", ""))]
    assert found, f"no chart titled {title_part!r}; have {[c['layout'].get('title') for c in charts(at)]}"
    return found[0]


PICTURE = re.compile(r"!\[[^\]]*\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)")


def pictures(at) -> list[str]:
    """The SVG documents the page shows as Markdown images (``heatmaps.picture``), decoded, in page order."""
    import base64

    return [base64.b64decode(m.group(1)).decode("utf-8") for md in at.markdown for m in PICTURE.finditer(md.value)]


def svg_chart(at, title_part: str) -> dict:
    """The server-built SVG heatmap titled ``title_part`` as numbers: ``z`` from the cells' hover titles (cells
    placed by their x/y), the tick labels, the colour range, and the parsed ``root``."""
    import html
    import xml.etree.ElementTree as ET

    ns = {"s": "http://www.w3.org/2000/svg"}
    for source in pictures(at):
        root = ET.fromstring(source)
        title = root.find("s:text[@class='title']", ns)
        if title is None or title_part not in (title.text or ""):
            continue
        cells = root.findall("s:g[@class='cells']/s:rect", ns)
        xs = sorted({float(c.get("x")) for c in cells})
        ys = sorted({float(c.get("y")) for c in cells})
        z = np.full((len(ys), len(xs)), np.nan)
        for c in cells:
            weight = float(c.find("s:title", ns).text.rsplit(" ", 1)[1])  # "… → …: weight 0.123"
            z[ys.index(float(c.get("y"))), xs.index(float(c.get("x")))] = weight
        ticks = {axis: [t.find("s:title", ns).tail for t in root.findall(f"s:text[@class='{axis}tick']", ns)]
                 for axis in "xy"}
        return {"z": z, "x": ticks["x"], "y": ticks["y"], "zmin": float(root.get("data-zmin")),
                "zmax": float(root.get("data-zmax")), "root": root, "source": html.unescape(source)}
    raise AssertionError(f"no SVG heatmap titled {title_part!r}")


def arr(value) -> np.ndarray:
    """A plotly JSON array: a plain list or a typed array ``{"dtype", "bdata", "shape"}``."""
    if isinstance(value, dict) and "bdata" in value:
        data = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if shape:
            data = data.reshape([int(n) for n in str(shape).split(",")])
        return data.astype(float)
    return np.asarray(value, dtype=float)


def plain(markdown: str) -> str:
    """Markdown with backslash escapes removed: the text a visitor reads."""
    return re.sub(r"\\(.)", r"\1", markdown)


def assert_clean(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def shown_texts(at) -> list[str]:
    return [t.value for t in at.text]


def set_view(at, view: str):
    """Open ``view`` (its key, ``app.registry.View.key``): its group first (when another group shows), then the view."""
    from app.views import group_of

    if at.segmented_control(key="view_group").value != group_of(view):
        at.segmented_control(key="view_group").set_value(group_of(view))
        at.run()
    at.segmented_control(key="view").set_value(view)
    return at.run()


def counting_jobs(slots: int = 1):
    """The server's heavy slots (``app.limits.ledger.HeavyJobs``), counting every time a job takes one (``.taken``)."""
    from app.limits import ledger

    class CountingJobs(ledger.HeavyJobs):
        taken = 0

        def _take(self, *args, **kwargs) -> None:
            super()._take(*args, **kwargs)
            self.taken += 1

    return CountingJobs(slots=lambda: slots)


@pytest.fixture()
def counted_slot(monkeypatch):
    """The server's heavy slot (one), counting every time a job takes it."""
    from app.limits import ledger

    jobs = counting_jobs(1)
    monkeypatch.setattr(ledger, "HEAVY", jobs)
    return jobs
