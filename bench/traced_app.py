"""The app as ``bench.app_heavy`` serves it: ``app/main.py`` run as it is, each script run then written as one JSON
line to ``$BENCH_RUN_LOG`` (wall start and end, the run thread's CPU seconds, the view, the text's start, and the
heavy slot: seconds waited for it and when it was taken), so the bench can tell the server's part of a click (click
to the end of that visitor's run) from the browser's, and a heavy link's wait from its work.

A bench file: the app itself neither knows nor imports it (the slot is observed by wrapping ``HeavyJobs.slot`` in
this server process only).
"""

from __future__ import annotations

import json
import os
import runpy
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import streamlit as st

from app.limits import ledger

MAIN = Path(__file__).resolve().parents[1] / "app" / "main.py"
_seen = getattr(ledger.HeavyJobs, "_bench_seen", None) or threading.local()  # one for every run

if not getattr(ledger.HeavyJobs, "_traced", False):  # once per server process
    _slot = ledger.HeavyJobs.slot

    @contextmanager
    def _traced_slot(self, waiting=None, poll=0.5, **options):  # noqa: ANN001, ANN003, ANN202
        asked = time.time()
        with _slot(self, waiting, poll, **options):
            if not hasattr(_seen, "taken"):
                _seen.asked, _seen.taken = asked, time.time()
            yield

    ledger.HeavyJobs.slot, ledger.HeavyJobs._traced, ledger.HeavyJobs._bench_seen = _traced_slot, True, _seen

for name in ("asked", "taken"):
    if hasattr(_seen, name):
        delattr(_seen, name)
start, cpu = time.time(), time.thread_time()
try:
    runpy.run_path(str(MAIN), run_name="__main__")
finally:  # also a run that a newer click stopped
    log = os.environ.get("BENCH_RUN_LOG")
    if log:
        row = {"start": start, "end": time.time(), "cpu": time.thread_time() - cpu,
               "view": st.session_state.get("view"), "text": str(st.session_state.get("source_text", ""))[:200],
               "slot_asked": getattr(_seen, "asked", None), "slot_taken": getattr(_seen, "taken", None)}
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
