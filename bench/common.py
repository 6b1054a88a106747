"""Timing, data and model helpers shared by the benchmark sections."""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from transformer import cli
from transformer.environment import cores

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CHECKPOINT = REPO_ROOT / cli.DEFAULT_CHECKPOINT
DEFAULT_DATA_DIR = REPO_ROOT / cli.DEFAULT_DATA_DIR

WORDS = ["a", "man", "woman", "dog", "child", "boy", "girl", "two", "people", "group", "young", "old", "red", "blue",
         "green", "white", "black", "ball", "street", "park", "beach", "water", "bike", "shirt", "hat", "rides", "runs",
         "walks", "plays", "sits", "stands", "jumps", "looks", "holds", "wearing", "with", "in", "on", "at", "the",
         "of", "and", "near", "front", "next", "while", "under", "over", "small", "large", "little", "crowd", "city",
         "building"]


def in_own_process(module: str, job: dict[str, Any], timeout: float = 3600.0,
                   first_on_path: Path | None = None) -> dict[str, Any]:
    """``python -m {module} --worker`` in a fresh process, given ``job`` as JSON on its standard input: the JSON
    object it prints last (:func:`worker_main`). Engines timed against each other each run in a process of their own:
    two OpenMP thread pools in one process (PyTorch's and CTranslate2's, each with its own ``libgomp``) slow the one
    that runs while the other's pool is alive (measured in docs/benchmarks.md), which no user of either sees.
    ``first_on_path``: a folder whose packages come before this tree's (another checkout's ``transformer``): the
    process runs there (``-m`` puts its working directory first on the path), this tree next on ``PYTHONPATH``."""
    env = None
    if first_on_path is not None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run([sys.executable, "-m", module, "--worker"], input=json.dumps(job), capture_output=True,
                          text=True, timeout=timeout, cwd=first_on_path or REPO_ROOT, check=False, env=env)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{module} worker ({job.get('side', '?')}) failed with exit code {proc.returncode}: {last}")
    return json.loads(lines[-1])


def worker_main(worker: Callable[[dict[str, Any]], dict[str, Any]], argv: list[str] | None = None) -> bool:
    """The worker side of :func:`in_own_process`: with ``--worker`` among ``argv``, run ``worker`` on the job read
    from standard input and print its result as one JSON line (True); otherwise False (the module's own command
    line runs)."""
    if "--worker" not in (sys.argv[1:] if argv is None else argv):
        return False
    print(json.dumps(worker(json.loads(sys.stdin.read()))))
    return True


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    info = {"cpu": cpu_name(), "cores": cores(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform()}
    try:
        import ctranslate2

        info["ctranslate2"] = ctranslate2.__version__
    except ImportError:
        info["ctranslate2"] = None
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name(0)
    return info


def sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100]."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    if xs[lo] == xs[hi] or pos == lo:  # no interpolation (inf * 0 would give nan: a visitor never served)
        return xs[lo]
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def time_calls(fn: Callable[[], Any], repeat: int, warmup: int = 1, device: torch.device | str = "cpu") -> list[float]:
    """Seconds per call of ``fn``, ``repeat`` times after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return times


def time_interleaved(fns: dict[str, Callable[[], Any]], repeat: int, warmup: int = 1,
                     device: torch.device | str = "cpu") -> dict[str, list[float]]:
    """Like ``time_calls`` for several functions, taking turns (A B A B ...), so that a change in
    the machine's load hits all of them alike and their ratios hold."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return times


def batch_throughput_vs_hf(prefix: str, sentences: list[str], batch: int, ours: Callable[[list[str]], Any],
                           hf: Callable[[list[str]], Any], digits: int = 2) -> dict[str, float]:
    """Sentences per second translating ``sentences`` sorted by length in batches of ``batch``, ours then
    transformers: ``{prefix}_batch_sent_s`` and ``{prefix}_batch_sent_s_hf``."""
    order = sorted(sentences, key=len)
    out = {}
    for name, translate in (("", ours), ("_hf", hf)):
        start = time.perf_counter()
        for i in range(0, len(order), batch):
            translate(order[i:i + batch])
        out[f"{prefix}_batch_sent_s{name}"] = round(len(sentences) / (time.perf_counter() - start), digits)
    return out


def greedy_latency_vs_hf(prefix: str, ours: Callable[[], Any], hf: Callable[[], Any], repeat: int,
                         hf_config: Any) -> dict[str, Any]:
    """One sentence, greedy with every attention, ours against transformers taking turns: ``{prefix}_greedy_ms_p50``
    (and ``_hf``), ``{prefix}_latency_hf_ratio`` (above 1: ours is faster) and ``{prefix}_model`` (the shape)."""
    times = time_interleaved({"ours": ours, "hf": hf}, repeat, warmup=0)
    ours_ms, hf_ms = (round(1000 * percentile(times[k], 50), 1) for k in ("ours", "hf"))
    c = hf_config
    return {f"{prefix}_greedy_ms_p50": ours_ms, f"{prefix}_greedy_ms_p50_hf": hf_ms,
            f"{prefix}_latency_hf_ratio": round(hf_ms / ours_ms, 2),
            f"{prefix}_model": f"{c.d_model}/{c.encoder_layers}+{c.decoder_layers}/{c.encoder_attention_heads}/"
                               f"{c.encoder_ffn_dim}, vocabulary {c.vocab_size:,}"}


def family_bench_main(prog: str, doc: str | None, run: Callable[..., dict[str, Any]], prefix: str,
                      sentences: int, quick_sentences: int, argv: list[str] | None = None) -> int:
    """The command line of a model-family bench (``bench.marian``, ``bench.m2m100``): ``run(sentences, quick,
    threads, corpus=...)`` on the test captions (or built ones), printing the ``{prefix}_*`` figures."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    p.add_argument("--sentences", type=int, default=sentences)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    lines = read_sentences(args.data_dir) or [f"A man in a red shirt walks {i} dogs past the old church."
                                             for i in range(200)]
    n = quick_sentences if args.quick else args.sentences
    result = run((lines * (n // len(lines) + 1))[:n], args.quick, args.threads, corpus=lines)
    result["machine"] = machine_info()
    for key, value in result.items():
        if key.startswith(f"{prefix}_"):
            print(f"{key}: {value}")
    if args.json:
        print(json.dumps(result))
    return 0


def median(values: list[float]) -> float:
    return statistics.median(values)


def read_sentences(data_dir: str | Path | None, split: str = "test_2016_flickr", lang: str = "en") -> list[str] | None:
    """Lines of ``{data_dir}/{split}.{lang}``, or None when the file is not there."""
    if data_dir is None:
        return None
    path = Path(data_dir) / f"{split}.{lang}"
    if not path.is_file():
        return None
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def args_and_splits(p: argparse.ArgumentParser,
                    argv: list[str] | None) -> tuple[argparse.Namespace, list[str], list[str]] | None:
    """A val/test bench's command line: ``p``'s arguments (torch's threads set from ``--threads``) with the English
    sources of val (where a setting is chosen) and test_2016_flickr (where it is measured once) from ``--data-dir``;
    None, after one line on stderr, when either file is not there."""
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    val, test = (read_sentences(args.data_dir, split) for split in ("val", "test_2016_flickr"))
    if val is None or test is None:
        print(f"no val.en or test_2016_flickr.en in {args.data_dir}", file=sys.stderr)
        return None
    return args, val, test


def synthetic_sentences(n: int, seed: int = 0, min_words: int = 6, max_words: int = 20) -> list[str]:
    """Multi30k-like caption sentences made of common words (for machines without the data)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))).capitalize() + "."
            for _ in range(n)]


def sentence_of_words(n_words: int, sentences: list[str] | None = None) -> str:
    """A sentence of exactly ``n_words`` words: the first data sentence that long, else built."""
    for s in sentences or ():
        if len(s.split()) == n_words:
            return s
    words = []
    for s in sentences or synthetic_sentences(50, seed=1):
        words.extend(s.rstrip(".").split())
        if len(words) >= n_words:
            break
    words = (words * n_words)[:n_words]
    return " ".join(words).rstrip(".") + "."


def peak_rss_mb() -> float:
    """This process's peak resident memory, MiB (memory-mapped pages included).

    Linux: ``VmHWM`` of ``/proc/self/status`` (per address space, so it starts afresh at ``exec``;
    ``ru_maxrss`` would carry over the parent's peak from ``fork``: a bench that built a model before starting
    its sides' processes would read at least that model's size in each).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1024 if sys.platform != "darwin" else peak / 2**20  # KiB on Linux, bytes on macOS
    except ImportError:  # pragma: no cover - Windows
        import psutil

        return psutil.Process().memory_info().peak_wset / 2**20


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far, its finished threads included (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
