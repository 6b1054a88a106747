"""``python -m bench.batch_cpu [--base DIR]``: the batch section's workload (``python -m bench --sections batch``:
beam 4, batches of 64, test_2016_flickr) in each process's CPU time, to tell the code from the host.

Ours (this tree, and with ``--base`` another checkout's ``transformer/`` on the same weights) and CTranslate2 each
run :func:`bench.batch.worker` in a process of their own, in turns, ``--rounds`` times. On a shared machine the wall
time of two threads is mostly waiting for the other thread's core (one parallel region after another), and swings
many times over; one thread's CPU time is what the others disturb least. Printed: each round's CPU seconds, the
medians, ours against CTranslate2 (its CPU seconds / ours: above 1 ours is faster) and this tree against the base
(the base's CPU seconds / this tree's, per round).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from transformer import DEFAULT_ALPHA, load

from .batch import ct2_plan, ctranslate2_available, export_for_bench
from .common import DEFAULT_CHECKPOINT, DEFAULT_DATA_DIR, in_own_process, machine_info, read_sentences


def run(checkpoint: str, sentences: list[str], threads: int, rounds: int, base: Path | None = None,
        batch_size: int = 64) -> dict[str, Any]:
    """Each side's CPU seconds per round (``{"ours": [...], "base": [...], "ctranslate2": [...]}``), their medians and
    ratios."""
    checkpoint = str(Path(checkpoint).resolve())  # the base's process runs in another folder
    translator = load(checkpoint, device="cpu")
    job = dict(device="cpu", threads=threads, batch_size=batch_size, sentences=sentences, repeat=1)
    with tempfile.TemporaryDirectory(prefix="bench-batch-cpu-") as tmp:
        sides: dict[str, tuple[dict[str, Any], Path | None]] = {"ours": (dict(job, side="ours",
                                                                             checkpoint=checkpoint), None)}
        if base is not None:
            (Path(tmp) / "base").mkdir()
            (Path(tmp) / "base" / "transformer").symlink_to(base.resolve() / "transformer")  # before this tree's
            sides["base"] = (sides["ours"][0], Path(tmp) / "base")
        if ctranslate2_available():
            sp_model = Path(tmp) / "sp.model"
            sp_model.write_bytes(translator.tokenizer.sp.serialized_model_proto())
            sides["ctranslate2"] = (dict(job, side="ctranslate2", ct2_dir=str(export_for_bench(translator, tmp)),
                                         sp_model=str(sp_model), beam_size=4, length_penalty=DEFAULT_ALPHA,
                                         **ct2_plan(translator, sentences)), None)
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        packages: dict[str, str] = {}
        for _ in range(rounds):  # the sides in turns: a change of load hits each alike
            for name, (side_job, path) in sides.items():
                got = in_own_process("bench.batch", side_job, first_on_path=path)
                cpu[name] += got["cpu_seconds"]
                if "package" in got:
                    packages[name] = str(Path(got["package"]).resolve())
    result: dict[str, Any] = {"sentences": len(sentences), "threads": threads, "cpu_seconds": cpu,
                              "median": {name: statistics.median(s) for name, s in cpu.items()},
                              "packages": packages}
    if "ctranslate2" in cpu:
        result["ours_vs_ctranslate2"] = result["median"]["ctranslate2"] / result["median"]["ours"]
    if "base" in cpu:
        result["ours_vs_base"] = statistics.median(b / o for b, o in zip(cpu["base"], cpu["ours"]))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.batch_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, default=None, help="another checkout, its transformer/ timed too")
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.base is not None and not (args.base / "transformer").is_dir():
        print(f"error: no transformer/ in {args.base}")
        return 2
    sentences = read_sentences(args.data_dir, args.split)
    if sentences is None:
        print(f"error: no {args.split}.en in {args.data_dir}")
        return 2
    result = run(args.checkpoint, sentences[: args.sentences], args.threads, args.rounds, args.base)
    info = machine_info()
    print(f"{info['cpu']}, {info['cores']} cores, torch {info['torch']}, ctranslate2 {info['ctranslate2']}; "
          f"{result['sentences']} sentences, beam 4, {args.threads} thread(s), process CPU seconds")
    for name, seconds in result["cpu_seconds"].items():
        print(f"  {name:<12} " + "  ".join(f"{s:.2f}" for s in seconds) + f"   median {result['median'][name]:.2f}"
              + (f"   ({result['packages'][name]})" if name in result["packages"] else ""))
    if "ours_vs_ctranslate2" in result:
        print(f"ours / CTranslate2 (speed, medians): {result['ours_vs_ctranslate2']:.2f}x")
    if "ours_vs_base" in result:
        print(f"this tree / base (speed, median of the rounds' ratios): {result['ours_vs_base']:.3f}x")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
