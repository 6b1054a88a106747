"""Every view of the app and the corpus table at NLLB-200's sizes: ``python -m bench.large_app --size 3.3B
[--dir DIR] [--dtype bfloat16|float32] [--lines 100]``.

The random NLLB-sized model of :mod:`bench.large` (built there once; ``--dir`` as there) is opened by the app itself
(``app/main.py`` through ``streamlit.testing.v1.AppTest``: the page's own code, every view of ``app.registry.VIEWS``,
no browser), in a process of its own with ``ATTN_DTYPE`` the weights' dtype, ``ATTN_MAX_MODEL_MB`` raised to the
model's size and ``ATTN_TORCH_THREADS`` the threads. One link translates one sentence (English to German, the app's
default decoding: beam 4); then each view is opened in turn, the registry's order, as a visitor clicks it. Reported
per view: seconds (the runs of the click: its group, then the view), the process's peak resident memory during it
(``VmHWM``, reset before each view through ``/proc/self/clear_refs``: the weights and what the view adds) and
whether the page did less than asked (the request's work notice, ``app.page.controls.work_notice``) or said
something else (a warning, an error, another notice: the first words of each).

Then ``python -m transformer.corpus`` in a process of its own on the first ``--lines`` lines of test_2016_flickr
(English to German, copied into a temporary folder; beam ``--beam``, default 4 as the command's; batches of
``--batch-size``, default 16), its
seconds and peak memory (``wait4``'s ``ru_maxrss``). ``--skip-app`` / ``--skip-corpus`` leave one out.

Run it alone on the machine: a 3.3B model in float32 needs 13.4 GB beside the page cache's copy of the file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import REPO_ROOT, cpu_name
from .large import SENTENCE, SIZES, build

WORK_ICON = ":material/speed:"  # the icon of the request's work notice (app.page.controls.work_notice)


def _vm(field: str) -> float:
    """A ``/proc/self/status`` field in MiB (``VmHWM``, ``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    """Start ``VmHWM`` afresh at the current resident size (Linux 4.0+; nothing where refused)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _said(at: Any) -> tuple[list[str], list[str]]:
    """What the page said beyond its drawing: (the work notices, the other warnings / errors / notices)."""
    work, other = [], []
    for kind in ("info", "warning", "error", "exception"):
        for element in getattr(at, kind):
            text = " ".join(str(getattr(element, "value", element)).split())
            if kind == "info" and getattr(element, "icon", None) == WORK_ICON:
                work.append(text)
            elif kind != "info" or "Starting the explorer" not in text:
                other.append(f"{kind}: {text[:160]}")
    return work, other


def app_worker(model: Path, dtype: str, threads: int, sentence: str, timeout: float, pieces: int) -> dict[str, Any]:
    """Every view of the page on ``sentence``, in this process (the environment set by :func:`run`)."""
    import torch
    from streamlit.testing.v1 import AppTest

    from app.limits import ledger
    from app.registry import VIEWS, group_of

    torch.set_num_threads(threads)
    requests: list[Any] = []  # every request (script run) of the page, to read the work units it counted

    class Recorded(ledger.Request):  # the bench's own observer: the app neither knows nor imports it
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            requests.append(self)

    ledger.Request = Recorded
    _reset_peak()
    start, cpu = time.perf_counter(), time.process_time()
    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=timeout)
    at.query_params.update({"text": sentence, "view": "heatmap", "src": "eng_Latn", "tgt": "deu_Latn",
                            **({"a": "0", "b": str(pieces)} if pieces else {})})
    at.run()
    first = {"seconds": time.perf_counter() - start, "cpu_s": time.process_time() - cpu, "peak_mb": _vm("VmHWM"),
             "rss_mb": _vm("VmRSS"),
             "units": requests[-1].spent if requests else None}
    first["work_notice"], first["said"] = _said(at)
    print(json.dumps({"row": "first", **first}), file=sys.stderr, flush=True)  # each row as it comes: a long run
    rows = []
    for key, view in VIEWS.items():
        _reset_peak()
        t0, cpu = time.perf_counter(), time.process_time()
        try:
            if at.segmented_control(key="view_group").value != group_of(key):
                at.segmented_control(key="view_group").set_value(group_of(key))
                at.run()
            at.segmented_control(key="view").set_value(key)
            at.run()
            work, said = _said(at)
        except Exception as err:  # noqa: BLE001 - a bench reports, it does not stop
            work, said = [], [f"bench: {type(err).__name__}: {str(err)[:160]}"]
        rows.append({"view": key, "title": view.title, "seconds": time.perf_counter() - t0,
                     "cpu_s": time.process_time() - cpu,
                     "peak_mb": _vm("VmHWM"), "rss_mb": _vm("VmRSS"), "work_notice": work, "said": said,
                     "units": requests[-1].spent if requests else None})
        print(json.dumps({"row": key, **rows[-1]}), file=sys.stderr, flush=True)
    return {"first": first, "views": rows}


def _child(argv: list[str], env: dict[str, str], log: str | None = None) -> tuple[int, float, float, str, str]:
    """Run ``argv``: (exit status, seconds, its peak resident MiB, stdout, stderr's tail); its stderr also in the
    file ``log`` when given (a long run's rows as they come)."""
    with tempfile.TemporaryFile("w+") as out, (open(log, "w+") if log else tempfile.TemporaryFile("w+")) as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=REPO_ROOT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return proc.returncode, seconds, usage.ru_maxrss / 1024, out.read(), err.read()[-2000:]


def run(size: str, directory: Path, dtype: str, threads: int, lines: int, data_dir: Path, app: bool = True,
        corpus: bool = True, timeout: float = 1800.0, beam: int = 4, pieces: int = 0,
        log: str | None = None, batch_size: int = 16) -> dict[str, Any]:
    """The app's views, then the corpus table, each in a process of its own."""
    path = build(directory, size)
    weights_mb = (path / "model.safetensors").stat().st_size / 2**20
    limit = str(int(weights_mb * 1.1 + 100))  # MB of 10^6 bytes: above the model in either dtype
    # the results' cache counts each loaded model's weights and one analysis' working memory at the model's longest
    # input (app.limits.budget.analysis_working_bytes: 12.8 GB at NLLB's 1,024 positions and 24 + 24 layers of 16
    # heads) against ATTN_CACHE_MB: under the default 1,024 MB nothing stays cached, and every view translates the
    # sentence again. A budget, not an allocation: raised here above both.
    cache = str(int(weights_mb + 20_000 + 4_000))
    env = {**os.environ, "ATTN_CHECKPOINT": str(path), "ATTN_DTYPE": dtype, "ATTN_MAX_MODEL_MB": limit,
           "ATTN_CACHE_MB": os.environ.get("ATTN_CACHE_MB", cache),
           "ATTN_TORCH_THREADS": str(threads), "TRANSFORMERS_VERBOSITY": "error",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))}
    result: dict[str, Any] = {"size": size, "dtype": dtype, "threads": threads, "weights_mb": weights_mb,
                              "cpu": cpu_name(), "sentence": SENTENCE, "pieces": pieces}
    if app:
        rc, seconds, peak, out, err = _child([sys.executable, "-m", "bench.large_app", "--worker", str(path),
                                              "--dtype", dtype, "--threads", str(threads),
                                              "--timeout", str(timeout), "--pieces", str(pieces)], env, log)
        found = [line for line in out.splitlines() if line.startswith("{")]
        result["app"] = json.loads(found[-1]) if rc == 0 and found else {"error": err.strip().splitlines()[-3:]}
        result["app_seconds"], result["app_peak_mb"] = seconds, peak
    if corpus:
        if not (data_dir / "test_2016_flickr.en").is_file():
            raise SystemExit(f"no test_2016_flickr.en / .de under {data_dir} (--data-dir)")
        with tempfile.TemporaryDirectory() as tmp:
            for lang in ("en", "de"):
                text = (data_dir / f"test_2016_flickr.{lang}").read_text(encoding="utf-8").splitlines()[:lines]
                (Path(tmp) / f"test_2016_flickr.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")
            rc, seconds, peak, _, err = _child(
                [sys.executable, "-m", "transformer.corpus", "--checkpoint", str(path), "--data-dir", tmp,
                 "--src", "en", "--tgt", "de", "--src-lang", "eng_Latn", "--tgt-lang", "deu_Latn",
                 "--dtype", dtype, "--threads", str(threads), "--no-progress", "--beam", str(beam),
                 "--batch-size", str(batch_size),
                 "--out", str(Path(tmp) / "table.parquet")], env)
            rows = None
            if rc == 0:
                import pyarrow.parquet as pq

                rows = pq.read_metadata(Path(tmp) / "table.parquet").num_rows
            result["corpus"] = {"lines": lines, "beam": beam, "batch_size": batch_size, "rc": rc, "seconds": seconds,
                                "peak_mb": peak, "rows": rows,
                                "error": None if rc == 0 else err.strip().splitlines()[-1:]}
    return result


def table(result: dict[str, Any]) -> str:
    """The run as Markdown: one row a view, then the corpus table's."""
    w = result["weights_mb"]
    out = [f"NLLB-200-{result['size']} sizes, random weights ({w / 1024:.1f} GiB float32 file), weights in "
           f"{result['dtype']}, {result['threads']} threads, {result['cpu']}; sentence: \"{result['sentence']}\""
           + (f", output {result['pieces']} pieces (a=0, b={result['pieces']})" if result.get("pieces") else ""), ""]
    app = result.get("app")
    if app and "error" in app:
        out.append(f"The app failed: {' / '.join(app['error'])}")
    elif app:
        out += ["| view | seconds | CPU seconds | peak memory | work units counted (the view's own) | CPU ms a unit | "
                "the page did less (work notice) | other notices |", "|---|---:|---:|---:|---:|---:|---|---|"]
        first = app["first"]
        rows = [{**first, "title": "(open the link: load + translate, Heatmap)"}, *app["views"]]
        base = next((r.get("units") or 0.0 for r in app["views"] if r["view"] == "heatmap"), 0.0)
        for i, r in enumerate(rows):  # a view's rows name only what the first page did not say
            notice = "; ".join(r["work_notice"]) or "no"
            said = [s[:100] for s in r["said"] if not i or s not in first["said"]]
            own = (r.get("units") or 0.0) - (base if i else 0.0)  # the first run's: its translation
            per = f"{1000 * r['cpu_s'] / own:.2f}" if own > 0.5 and "cpu_s" in r else ""
            out.append(f"| {r['title']} | {r['seconds']:.1f} | {r.get('cpu_s', float('nan')):.1f} | "
                       f"{r['peak_mb'] / 1024:.1f} GiB | "
                       f"{r.get('units') or 0:,.0f} ({own:,.0f}) | {per} | {notice} | "
                       f"{'; '.join(said).replace('|', '/')} |")
        out.append(f"\nThe app's process: {result['app_seconds']:.0f} s in all, peak "
                   f"{result['app_peak_mb'] / 1024:.1f} GiB ({result['app_peak_mb'] / w:.2f}x the float32 file).")
    c = result.get("corpus")
    if c:
        state = f"{c['rows']} rows" if c["rc"] == 0 else f"failed: {c['error']}"
        out.append(f"\n`python -m transformer.corpus` on {c['lines']} lines of test_2016_flickr (beam "
                   f"{c.get('beam', 4)}, batches of {c.get('batch_size', 64)}): {state}, "
                   f"{c['seconds']:.0f} s, peak {c['peak_mb'] / 1024:.1f} GiB ({c['peak_mb'] / w:.2f}x).")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.large_app", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=list(SIZES), default="3.3B")
    parser.add_argument("--dir", default="bigmodels", help="where bench.large built the models (default ./bigmodels)")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--lines", type=int, default=100, help="lines of test_2016_flickr for the corpus table")
    parser.add_argument("--data-dir", default="../shared/data/multi30k", help="with test_2016_flickr.en / .de")
    parser.add_argument("--beam", type=int, default=4, help="the corpus table's beam (default 4, the command's)")
    parser.add_argument("--batch-size", type=int, default=16, help="the corpus table's sentences per batch (default "
                        "16: at 3.3B a batch of 64 holds about 4x the memory beyond the weights)")
    parser.add_argument("--pieces", type=int, default=0,
                        help="the page's output length: a=0, b=PIECES in its link (default 0: the page's own rule)")
    parser.add_argument("--log", help="write the app's rows to this file as they come")
    parser.add_argument("--skip-app", action="store_true")
    parser.add_argument("--skip-corpus", action="store_true")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one page run may take")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON too")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(app_worker(Path(args.worker), args.dtype, args.threads, SENTENCE, args.timeout,
                                    args.pieces)))
        return 0
    result = run(args.size, Path(args.dir), args.dtype, args.threads, args.lines, Path(args.data_dir),
                 app=not args.skip_app, corpus=not args.skip_corpus, timeout=args.timeout, beam=args.beam,
                 pieces=args.pieces, log=args.log, batch_size=args.batch_size)
    print(table(result))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
