"""The app as ``bench.app_heavy`` serves it: ``app/main.py`` run as it is, each script run then written as one JSON
line to ``$BENCH_RUN_LOG`` (wall start and end, the run thread's CPU seconds, the view, the text's start), so the
bench can tell the server's part of a click (click to the end of that visitor's run) from the browser's.

A bench file: the app itself neither knows nor imports it.
"""

from __future__ import annotations

import json
import os
import runpy
import time
from pathlib import Path

import streamlit as st

MAIN = Path(__file__).resolve().parents[1] / "app" / "main.py"

start, cpu = time.time(), time.thread_time()
try:
    runpy.run_path(str(MAIN), run_name="__main__")
finally:  # also a run that a newer click stopped
    log = os.environ.get("BENCH_RUN_LOG")
    if log:
        row = {"start": start, "end": time.time(), "cpu": time.thread_time() - cpu,
               "view": st.session_state.get("view"), "text": str(st.session_state.get("source_text", ""))[:200]}
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
