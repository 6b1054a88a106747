"""The page's ``Link`` header (``app.page.preload``): the first screen's lazily loaded scripts, read from Streamlit's
bundle, named for the browser to fetch while it parses the main bundle."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.page import preload

INDEX = ('<html><head><script type="module" crossorigin src="./static/js/index.AAA.js"></script>'
         '<link rel="modulepreload" crossorigin href="./static/js/react.BBB.js"></head></html>')
# a bundle as Vite writes it: a table of file names, lazy imports that index it
MAIN = ('const __vite__mapDeps=(i,m=__vite__mapDeps,d=(m.f||(m.f=["./Slider.S1.js","./react.BBB.js",'
        '"./moment.M1.js","./Plot.P1.js","./huge.H1.js","./Radio.R1.js"])))=>i.map(i=>d[i]);'
        'const a=lazy(()=>H(()=>import(`./Slider.S1.js`),__vite__mapDeps([0,1,2]),import.meta.url)),'
        'b=lazy(()=>H(()=>import(`./Plot.P1.js`),__vite__mapDeps([3,4,1]),import.meta.url)),'
        'c=lazy(()=>H(()=>import(`./Radio.R1.js`).then(e=>({default:e.Radio})),__vite__mapDeps([5,1]),import.meta.url));')
MARKDOWN = ('const __vite__mapDeps=(i,m=__vite__mapDeps,d=(m.f||(m.f=["./rehype-raw.X1.js","./hast.X2.js",'
            '"./react.BBB.js"])))=>i.map(i=>d[i]);const am=()=>be(()=>import(`./rehype-raw.X1.js`),'
            '__vite__mapDeps([0,2,1]),import.meta.url);')


def fake_static(tmp_path: Path) -> Path:
    js = tmp_path / "static" / "js"
    js.mkdir(parents=True)
    (tmp_path / "index.html").write_text(INDEX)
    (js / "index.AAA.js").write_text(MAIN)
    (js / "Markdown.Z.js").write_text(MARKDOWN)
    for name in ("Slider.S1.js", "react.BBB.js", "moment.M1.js", "Plot.P1.js", "huge.H1.js", "Radio.R1.js",
                 "rehype-raw.X1.js", "hast.X2.js"):
        (js / name).write_text("export {};")
    return tmp_path


def test_the_kinds_asked_for_with_what_they_import_less_what_the_page_already_fetches(tmp_path):
    static = fake_static(tmp_path)
    names = preload.first_screen_scripts(static, ("Slider", "Radio", "rehype-raw"))
    assert names == ["Slider.S1.js", "moment.M1.js", "Radio.R1.js", "rehype-raw.X1.js", "hast.X2.js"]  # as asked
    assert preload.first_screen_scripts(static, ("rehype-raw", "Radio"))[:3] == ["rehype-raw.X1.js", "hast.X2.js",
                                                                               "Radio.R1.js"]
    assert preload.first_screen_scripts(static, ("Slider",)) == ["Slider.S1.js", "moment.M1.js"]  # no plot, no huge
    (static / "static" / "js" / "moment.M1.js").unlink()  # a name the bundle gives but the package lacks: left out
    assert preload.first_screen_scripts(static, ("Slider",)) == ["Slider.S1.js"]
    (static / "index.html").unlink()
    assert preload.first_screen_scripts(static, ("Slider",)) == []  # unreadable: nothing named, the page as before


def test_the_installed_streamlit_names_every_kind_of_the_first_screen():
    static = preload.static_dir()
    names = preload.first_screen_scripts(static)
    js = static / "static" / "js"
    assert all((js / name).is_file() for name in names)
    for kind in preload.FIRST_SCREEN:  # each kind's own chunk is there
        assert any(name.split(".")[0] == kind for name in names), kind
    assert not [n for n in names if "plotly" in n.lower()]  # the first screen draws no plotly chart
    eager = preload.EAGER.findall((static / "index.html").read_text(encoding="utf-8"))
    assert eager and not set(eager) & set(names)
    header = preload.link_header().decode()
    assert header.count("rel=modulepreload") == len(names) and "<./static/js/" + names[0] + ">" in header


def run_middleware(path: str, content_type: bytes) -> list[tuple[bytes, bytes]]:
    """The headers a response of ``content_type`` to ``GET path`` leaves the middleware with."""
    sent: list[dict] = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]})
        await send({"type": "http.response.body", "body": b"x"})

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request"}

    scope = {"type": "http", "method": "GET", "path": path, "headers": []}
    asyncio.run(preload.PreloadFirstScreen(app)(scope, receive, send))
    assert sent[1]["body"] == b"x"
    return sent[0]["headers"]


def test_only_the_page_gets_the_header():
    page = dict(run_middleware("/", b"text/html; charset=utf-8"))
    assert page[b"link"] == preload.link_header() and page[b"link"]
    assert b"link" not in dict(run_middleware("/static/js/index.AAA.js", b"text/javascript"))
    assert b"link" not in dict(run_middleware("/_stcore/health", b"text/plain"))
    assert b"link" not in dict(run_middleware("/", b"application/json"))
