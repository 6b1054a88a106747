"""``python -m bench.planted_tables``: the attacks of issues #54 and #66 on the Whole test set view, the flow graph,
the flag's rule and the model list, again.

Each attack runs in a fresh process (so its time and peak memory are its own) against a public server's page
(``ATTN_PUBLIC=1``, AppTest) serving a copy of the shipped checkpoint with planted tables, and prints one line: the
attack, what the page showed (its first error or notice), seconds and peak resident memory. Nothing here is a
test: it repeats what an attacker did and says what happens now.

    python -m bench.planted_tables --data-dir ../shared/data/multi30k          # every attack
    python -m bench.planted_tables --data-dir ../shared/data/multi30k environ  # one
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "checkpoints" / "multi30k-en-de"
VIEW = "Whole test set"


def record(path: Path) -> dict:
    data = path.read_bytes()
    return {"name": path.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def plant(ckpt: Path, given: dict | None = None, table=None, rule: str | None = None) -> None:
    """The shipped table of ``ckpt`` (or ``table``: a pyarrow table) with its manifest's ``input`` updated by
    ``given`` (and its ``flag_rule`` the JSON text ``rule``)."""
    import pyarrow.parquet as pq

    folder = ckpt / "tables"
    manifest = json.loads((folder / "test_2016_flickr.manifest.json").read_text())
    manifest["input"].update(given or {})
    text = json.dumps({**manifest, "model": {**manifest["model"], "flag_rule": "RULE"}})
    (folder / "test_2016_flickr.manifest.json").write_text(text.replace('"RULE"', rule) if rule else
                                                           json.dumps(manifest))
    if table is not None:
        pq.write_table(table, folder / "test_2016_flickr.parquet")


def said(at) -> str:
    """The page's first error, else its first notice about the table or the graph, on one line."""
    if at.exception:
        return "EXCEPTION " + at.exception[0].value.splitlines()[0]
    for kind in ("error", "warning", "info", "caption"):
        for element in getattr(at, kind):
            text = " ".join(str(element.value).split())
            if kind == "caption" and not any(w in text for w in ("names no row", "Rows ", "threshold")):
                continue
            if "Loaded from" not in text and "At most a" not in text:
                return f"{kind}: {text[:220]}"
    return "no notice"


def attack(name: str, data_dir: Path, work: Path) -> str:
    import pyarrow as pa
    from streamlit.testing.v1 import AppTest

    ckpt = work / "multi30k-en-de"
    shutil.copytree(CHECKPOINT, ckpt)
    data = work / "data"
    shutil.copytree(data_dir, data)
    os.environ.update(ATTN_PUBLIC="1", ATTN_CHECKPOINT=str(ckpt), ATTN_MODELS=str(ckpt), ATTN_DATA_DIR=str(data))
    query = {"view": VIEW}
    n = 1000
    ids = pa.array(np.arange(n))
    words = pa.array([f"Satz {i}" for i in range(n)])
    if name == "environ":
        plant(ckpt, {"split": "/proc/self/", "src_lang": "/environ"})
    elif name == "passwd":
        plant(ckpt, {"split": "/etc/", "src_lang": "/../etc/passwd"})
    elif name == "million-rows":  # 110 kB, a million dictionary-encoded rows
        m = 1_000_000
        text = pa.DictionaryArray.from_arrays(pa.array(np.zeros(m, dtype=np.int32)), pa.array(["x" * 1000]))
        plant(ckpt, table=pa.table({"id": pa.array(np.arange(m)), "translation": text}))
    elif name == "30m-rows":
        m = 30_000_000
        plant(ckpt, table=pa.table({"id": pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(m, dtype=np.int32)), pa.array([0])), "translation": pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(m, dtype=np.int32)), pa.array(["x"]))}))
    elif name == "extra-column":
        plant(ckpt, table=pa.table({"id": ids, "translation": words, "extra": pa.array(["z" * 5000] * n)}))
    elif name == "val-as-test":  # test_2016_flickr.en holds val's lines, and there is no .de (the shipped manifest)
        (data / "test_2016_flickr.en").write_text("\n".join(
            (data / "val.en").read_text().splitlines()[:1000]) + "\n")
        (data / "test_2016_flickr.de").unlink()
    elif name == "val-as-test-recorded":  # the same with a manifest that records the files' hashes
        plant(ckpt, {"files": {"source": record(data / "test_2016_flickr.en"),
                               "reference": record(data / "test_2016_flickr.de")}})
        (data / "test_2016_flickr.en").write_text("\n".join(
            (data / "val.en").read_text().splitlines()[:1000]) + "\n")
        (data / "test_2016_flickr.de").unlink()
    elif name == "nonfinite-id":
        plant(ckpt, table=pa.table({"id": pa.array([0.0, float("inf")]), "translation": pa.array(["a", "b"])}))
    elif name == "string-flag":
        plant(ckpt, table=pa.table({"id": pa.array(np.arange(50)), "translation": words[:50],
                                    "flag": pa.array(["False"] * 50)}))
    elif name in ("binary-en", "fifo-en"):
        (data / "test_2016_flickr.en").unlink()
        if name == "fifo-en":
            os.mkfifo(data / "test_2016_flickr.en")
        else:
            (data / "test_2016_flickr.en").write_bytes(os.urandom(70_000))
    elif name in ("rule-60000", "rule-400-digits"):  # issue #66: a manifest's rule, over 3,000 flagged lines
        rng = np.random.default_rng(0)
        m = 3000
        conditions = [{"column": "seq_logprob", "op": "<=", "value": -5.0 - i / 1e4} for i in range(59_999)]
        rule = json.dumps({"any": [*conditions, {"column": "source_share", "op": "<=", "value": 0.4}]})
        if name == "rule-400-digits":
            rule = '{"any": [{"column": "source_share", "op": "<=", "value": ' + "9" * 400 + "}]}"
        plant(ckpt, rule=rule, table=pa.table({
            "id": pa.array(np.arange(m)), "translation": pa.array([f"Satz {i}" for i in range(m)]),
            "flag": pa.array(np.ones(m, dtype=bool)), "seq_logprob": pa.array(rng.uniform(-8, -1, m)),
            "source_share": pa.array(rng.uniform(0, 1, m))}))
        query["signal"] = "seq_logprob"
    elif name == "header-94mb":  # issue #66: the served model's weights say their header is 94 MB
        header = 94 * 2**20
        with open(ckpt / "model.safetensors", "wb") as f:
            f.write(header.to_bytes(8, "little") + b"{" + b" " * (header - 2) + b"}")
        query = {}
    elif name in ("flag-fifo", "flag-400-digits"):  # issue #66: the model's flag.json, on Source or prefix
        (ckpt / "flag.json").unlink()
        if name == "flag-fifo":
            os.mkfifo(ckpt / "flag.json")
        else:
            (ckpt / "flag.json").write_text('{"any": [{"column": "seq_logprob", "op": "<", "value": ' + "9" * 400
                                            + "}]}")
        query = {"view": "source_or_prefix", "text": "A dog runs in the park."}
    elif name in ("line-superscript", "cl-superscript"):  # issue #66: ² is a digit to str.isdigit, not to int()
        query = {"view": "whole_test_set", "line": "²"} if name == "line-superscript" else {
            "view": "source_or_prefix", "text": "A dog runs.", "cl": "²"}
    elif name.startswith("paste-"):
        query["table"] = "paste"
    elif name == "flow-0":
        source = " ".join(["a man in a red shirt rides a bike down the street while two dogs run beside him"] * 16)
        query = {"view": "How each word is built", "text": source, "ft": "0", "fs": "30"}
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=300)
    at.query_params.update(query)
    at.run()
    if name.startswith("paste-"):
        size = int(name.split("-")[1]) * 2**20
        at.text_area(key="testset_paste").set_value(("A dog runs on the beach.\n" * (size // 25 + 1))[:size])
        at.run()
        kept = len(at.session_state["testset_paste"])
        return f"{said(at)} | box holds {kept:,} characters, address lines= {len(at.query_params.get('lines', '')):,}"
    if name.startswith("selection-"):
        rows = json.loads(name.split("-", 1)[1])
        from app.views.whole_test_set import rows_key

        key = rows_key("test_2016_flickr", "all", "")
        at.session_state[key] = {"selection": {"rows": rows, "columns": [], "cells": []}}
        at.run()
    if name == "header-94mb":  # the model list's refresh: a second check of the same folder
        from app.models import catalog

        again = time.perf_counter()
        catalog.list_checkpoints()
        return f"{said(at)} | the list again: {time.perf_counter() - again:.3f} s"
    if name in ("flag-fifo", "flag-400-digits"):
        found = [" ".join(str(e.value).split()) for e in [*at.warning, *at.caption] if "flag.json" in str(e.value)]
        return ("EXCEPTION " if at.exception else "") + (found[0][-200:] if found else said(at))
    if name == "flow-0":
        found = [" ".join(str(e.value).split()) for e in [*at.info, *at.caption] if "threshold" in str(e.value)]
        again = time.perf_counter()
        at.run()  # a rerun: the graph from the cache
        again = time.perf_counter() - again
        return ("EXCEPTION" if at.exception else " / ".join(text[-120:] for text in found[:1])) + (
            f" | a rerun {again:.1f} s")
    sent = ""
    if at.dataframe:
        sent = f" | table sent: {len(at.dataframe[0].value):,} rows, {len(at.dataframe[0].proto.arrow_data.data):,} B"
    return said(at) + sent


ATTACKS = ("environ", "passwd", "million-rows", "30m-rows", "extra-column", "val-as-test", "val-as-test-recorded",
           "nonfinite-id", "string-flag", "binary-en", "fifo-en", "paste-1", "paste-20", 'selection-["x"]',
           "selection-1.5", "selection-true", "selection-null", "flow-0", "rule-60000", "rule-400-digits",
           "header-94mb", "flag-fifo", "flag-400-digits", "line-superscript", "cl-superscript")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child process: one attack
    p.add_argument("attacks", nargs="*", default=list(ATTACKS))
    args = p.parse_args(argv)
    if args.one:
        with tempfile.TemporaryDirectory() as work:
            start = time.perf_counter()
            line = attack(args.attacks[0], args.data_dir.resolve(), Path(work))
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{args.attacks[0]}: {line} | {time.perf_counter() - start:.1f} s, peak {peak:,.0f} MB", flush=True)
        return 0
    for name in args.attacks:
        subprocess.run([sys.executable, "-m", "bench.planted_tables", "--one", "--data-dir", str(args.data_dir),
                        name], cwd=ROOT, check=False, stderr=subprocess.DEVNULL, timeout=900)
    return 0


if __name__ == "__main__":
    sys.exit(main())
