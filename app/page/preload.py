"""Fetch the first screen's scripts while the browser still parses Streamlit's main bundle.

Streamlit's frontend fetches the code of each kind of element (a select box, a slider...) only when the first
element of that kind arrives, after the page has loaded, connected and the script has run: dozens of small files
at once, each served by this server while it runs the page's script, on the path to the first screen. The page's
HTML already names the main bundle's own files for the browser to fetch early (``<link rel="modulepreload">``);
:class:`PreloadFirstScreen` names the first screen's lazily loaded ones the same way, in an HTTP ``Link`` header of
the page (low priority: after the main bundle, while the network is idle). The names come from the installed
Streamlit's own bundle (its files are named by content hash); if they cannot be read, no header is sent and the
page works as before. No Streamlit elements here.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from functools import cache
from pathlib import Path
from typing import Any

# the kinds of element drawn with the first screen's picture, by the name of their chunk: the page's style and each
# picture's (``st.html``), so that the picture keeps its least width in the frame it first shows in. Not the input
# row's, the view selector's, the sidebar's nor the view's controls: they are drawn after the picture, and fetching
# their scripts with the page makes the websocket open later and the picture come later (measured in turns against
# a bare page: ``Html`` alone the nearest to it; docs/benchmarks.md#figures-behind-the-codes-comments).
FIRST_SCREEN = ("Html",)
IMPORT = re.compile(r"import\(`\./([\w.\-]+\.js)`\)(?:\.then\([^()]*(?:\([^()]*\))?[^()]*\))?,"
                    r"__vite__mapDeps\(\[([\d,]*)\]\)")  # a lazy import and the files it needs
DEPS = re.compile(r"m\.f=\[(.*?)\]")  # a bundle's table of file names that those imports index
EAGER = re.compile(r'<(?:link rel="modulepreload"|script type="module")[^>]*(?:href|src)="\./static/js/([^"]+)"')

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


def static_dir() -> Path:
    """The installed Streamlit's frontend: ``index.html`` and ``static/js``."""
    import streamlit

    return Path(streamlit.__file__).parent / "static"


def first_screen_scripts(static: Path, kinds: tuple[str, ...] = FIRST_SCREEN) -> list[str]:
    """The file names (in ``static/js``) the frontend would fetch lazily to draw elements of ``kinds``, with
    everything they import, less what ``index.html`` already has the browser fetch; [] if unreadable."""
    js = static / "static" / "js"
    try:
        eager = set(EAGER.findall((static / "index.html").read_text(encoding="utf-8")))
        needs: dict[str, list[str]] = {}
        for path in sorted(js.glob("*.js")):
            text = path.read_text(encoding="utf-8", errors="replace")
            table = DEPS.search(text)
            if table is None:
                continue
            files = [name.strip().strip("\"'`").removeprefix("./") for name in table.group(1).split(",")]
            for target, indices in IMPORT.findall(text):
                needs.setdefault(target, [target]).extend(files[int(i)] for i in indices.split(",") if i)
    except (OSError, ValueError, IndexError):
        return []
    chosen = sorted((target for target in needs if target.split(".")[0] in kinds),
                    key=lambda target: kinds.index(target.split(".")[0]))
    names = dict.fromkeys(name for target in chosen for name in needs[target])  # ordered, once each
    return [name for name in names if name not in eager and (js / name).is_file()]


@cache
def link_header() -> bytes:
    """The ``Link`` header naming the first screen's scripts (b"" when there are none)."""
    names = first_screen_scripts(static_dir())
    return ", ".join(f"<./static/js/{name}>; rel=modulepreload; fetchpriority=low" for name in names).encode()


class PreloadFirstScreen:
    """ASGI middleware: the page's HTML (``GET /``) gets the ``Link`` header of :func:`link_header`."""

    def __init__(self, app: Callable[[Scope, Callable, Callable], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable, send: Callable[[Message], Awaitable[None]]) -> None:
        header = link_header() if scope["type"] == "http" and scope.get("path") == "/" else b""
        if not header:
            await self.app(scope, receive, send)
            return

        async def with_link(message: Message) -> None:
            if message["type"] == "http.response.start" and any(
                    k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in message.get("headers", [])):
                message = {**message, "headers": [*message.get("headers", []), (b"link", header)]}
            await send(message)

        await self.app(scope, receive, with_link)
