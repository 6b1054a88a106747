"""The server's entry point: ``streamlit run app/serve.py`` serves the page of ``app/main.py`` and, before it
answers its first request (its health check included), loads the default model and analyses the first screen's
sentence (``app.page.warm``), so the first visitor waits no longer than the next; its page names the first screen's
scripts for the browser to fetch at once (``app.page.preload``). ``streamlit run app/main.py`` still works, warming
on the first visit instead."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from app.page.preload import PreloadFirstScreen


@asynccontextmanager
async def _warm(_app):
    from app import views as _views  # noqa: F401  (every view module and what it imports: plotly, pandas...)
    from app.page import frame, languages, selector, sidebar  # noqa: F401  (the page's own: not on a first visit)
    from app.page.warm import warm_up  # here, not at the top: the page's modules load in the server's process

    await asyncio.to_thread(warm_up)
    yield


app = st.App(Path(__file__).with_name("main.py"), lifespan=_warm, middleware=[Middleware(PreloadFirstScreen)])
