"""``python -m bench.report``: how long the offline page (``python -m app.report``) takes to build, apart from the
translation it shows.

One sentence of ``--words`` words (the first test caption that long, else one built of caption words), translated
as ``python -m app.report`` does (beam 4, the model card's α, no attentions kept), then the page built from it
(``app.report.build_page``: the teacher-forced pass for the candidates, every default view described, its figures
as JSON, deflated, plotly.js inlined). Timed in CPU time (``time.process_time``, ``--threads`` torch threads,
default 1: time spent waiting for a core on a shared machine is not counted), ``--repeat`` translations and builds
in each of ``--rounds`` processes, after a warm-up each. Reported: the medians, the page over the translation, and
this tree's build split into its steps (each view's description, the figures' JSON and the HTML, the deflated
data). ``--profile N`` prints the top ``N`` of one build under cProfile (by cumulative and by own time).

``--base DIR``: another checkout (e.g. ``git worktree add --detach ../base <commit>``) timed the same way, its
processes in turns with this tree's (``PYTHONPATH`` its tree), so a change in the machine's load hits both alike:
the ratio of the two builds is the figure to compare (a shared machine's milliseconds are not).

    python -m bench.report --base ../base --profile 25
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import DEFAULT_CHECKPOINT, DEFAULT_DATA_DIR, REPO_ROOT, machine_info, read_sentences, sentence_of_words


def tree_times(checkpoint: str, text: str, repeat: int, threads: int = 1) -> dict[str, list[float]]:
    """CPU seconds of ``repeat`` translations and page builds of ``text`` after one untimed of each, in the tree
    this process imports, on ``threads`` threads. Self-contained (its imports inside, nothing of ``bench``): it
    also runs in another checkout, an older one included (``--base``)."""
    import time

    import torch

    from app import report
    from transformer import DecodeSettings, load

    torch.set_num_threads(threads)
    tr = load(checkpoint, device="cpu")
    settings = DecodeSettings(beam_size=4, alpha=tr.default_alpha)
    out: dict[str, list[float]] = {"translate_s": [], "page_s": []}
    for i in range(repeat + 1):
        start = time.process_time()
        result = tr.translate(text, beam_size=4, alpha=settings.alpha, return_attention=False)
        mid = time.process_time()
        report.build_page(result, tr, report.DEFAULT_VIEWS, text=text, settings=settings)
        end = time.process_time()
        if i:  # the first of each: warm-up
            out["translate_s"].append(mid - start)
            out["page_s"].append(end - mid)
    return out


def in_tree(tree: Path, checkpoint: str, text: str, repeat: int, threads: int) -> dict[str, list[float]]:
    """:func:`tree_times` in a new process that imports ``tree``'s ``transformer`` and ``app``."""
    code = f"{inspect.getsource(tree_times)}\nimport json\nprint(json.dumps(tree_times(*json.loads(input()))))"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps([checkpoint, text, repeat, threads]), cwd=tree,
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the build in {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def steps(checkpoint: str, text: str, threads: int = 1) -> dict[str, float]:
    """This tree's build split into its steps (CPU seconds, one build after a warm-up): the analysis
    (teacher-forced candidates), each default view's description, the figures' JSON with the HTML, the deflated
    data."""
    import torch

    from app import parts, registry, report
    from transformer import DecodeSettings, load

    torch.set_num_threads(threads)
    tr = load(checkpoint, device="cpu")
    settings = DecodeSettings(beam_size=4, alpha=tr.default_alpha)
    result = tr.translate(text, beam_size=4, alpha=settings.alpha, return_attention=False)
    out: dict[str, float] = {}
    for _ in range(2):  # the second is kept
        start = time.process_time()
        analysis = report.analysis_for(result, tr, text, settings)
        out["analysis"] = time.process_time() - start
        src = parts.Source(analysis, tr, {})
        drawn = []
        for key in report.DEFAULT_VIEWS:
            start = time.process_time()
            drawn.append(registry.DESCRIBED[key].describe(src))
            out[f"describe {key}"] = time.process_time() - start
        start = time.process_time()
        page = report._Html()
        for items in drawn:
            page.parts(items)
        out["figures' JSON and HTML"] = time.process_time() - start
        start = time.process_time()
        report.deflated(page.figures)
        out["deflated data"] = time.process_time() - start
        out["figures"] = len(page.figures)
    return out


def profile(checkpoint: str, text: str, top: int) -> str:
    """The top ``top`` functions of one page build (after a warm-up) by cumulative and by own time."""
    from app import report
    from transformer import DecodeSettings, load

    tr = load(checkpoint, device="cpu")
    settings = DecodeSettings(beam_size=4, alpha=tr.default_alpha)
    result = tr.translate(text, beam_size=4, alpha=settings.alpha, return_attention=False)
    build = lambda: report.build_page(result, tr, report.DEFAULT_VIEWS, text=text, settings=settings)  # noqa: E731
    build()
    prof = cProfile.Profile()
    prof.runcall(build)
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def median_ms(values: list[float]) -> float:
    return round(1000 * statistics.median(values), 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help="Multi30k: the sentence is a test caption")
    p.add_argument("--words", type=int, default=20, help="words in the sentence (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, a process for each tree (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=2, help="timed builds a round (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    p.add_argument("--base", help="another checkout, timed in turns with this one")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="print the top N of one build under cProfile")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = p.parse_args(argv)
    checkpoint = str(Path(args.checkpoint).resolve())
    text = sentence_of_words(args.words, read_sentences(args.data_dir))
    trees = {"this": REPO_ROOT} | ({"base": Path(args.base).resolve()} if args.base else {})
    times: dict[str, dict[str, list[float]]] = {name: {"translate_s": [], "page_s": []} for name in trees}
    if args.base:  # one process a round for each tree, in turns, which goes first alternating
        for i in range(args.rounds):
            for name in list(trees)[:: 1 if i % 2 == 0 else -1]:
                for key, values in in_tree(trees[name], checkpoint, text, args.repeat, args.threads).items():
                    times[name][key] += values
    else:
        times["this"] = tree_times(checkpoint, text, args.rounds * args.repeat, args.threads)
    result: dict[str, Any] = {"sentence": text, "rounds": args.rounds, "repeat": args.repeat, "threads": args.threads}
    print(f"sentence ({args.words} words): {text}")
    print("| tree | translation CPU ms (p50) | page build CPU ms (p50) | page / translation |\n|---|---:|---:|---:|")
    for name, t in times.items():
        translate, page = median_ms(t["translate_s"]), median_ms(t["page_s"])
        result[name] = {"translate_ms": translate, "page_ms": page, "page_over_translation": round(page / translate, 1),
                        "page_s": t["page_s"]}
        print(f"| {name} | {translate} | {page} | {page / translate:.1f} |")
    if args.base:
        pairs = [a / b for a, b in zip(times["this"]["page_s"], times["base"]["page_s"])]
        result["page_ratio"] = round(statistics.median(pairs), 3)
        print(f"page build, this / base: {result['page_ratio']} (median of the ratios of builds taken in turns)")
    result["steps_ms"] = {k: (v if k == "figures" else round(1000 * v, 1))
                          for k, v in steps(checkpoint, text, args.threads).items()}
    print("this tree's build, one build (ms): " + ", ".join(f"{k} {v}" for k, v in result["steps_ms"].items()))
    if args.profile:
        print(profile(checkpoint, text, args.profile))
    result["machine"] = machine_info()
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
