"""The corpus table's cost (issue 47 §5): ``python -m bench.corpus``.

1. ``cost``: in one process, the table of the test_2016_flickr captions (``batch_rows``, what ``table_rows`` and the
   command run: translation, teacher-forced signals with ALTI+, sacreBLEU sentence scores) against translating them
   alone (``translate_batch``, the same batches and settings), batch by batch in turns. Goal: at most 3x
   (``corpus_cost_ratio``).
2. ``scaling``: the command itself, ``python -m transformer.corpus`` in one process against ``torchrun
   --nproc-per-node 2``, one thread each; sentences/s from the manifest's ``seconds`` (the slowest rank's
   batches: model loading and process start-up left out; the wall-clock times with them are reported beside).
   Goal: 2 processes at least 1.7x one (``corpus_scaling``); beside it, ``corpus_machine_scaling``, what the
   machine gives 2 processes of plain one-thread matrix products at that moment (about 2 when 2 cores are free).
   ``--model opus-mt``: the same on an OPUS-MT-sized model (Marian, 512 / 6+6 / 8 heads / 2048, 58,101 pieces,
   random weights; built as ``bench.marian`` does, so ``transformers`` is needed; random weights ramble to the
   length limit, so its sentences are long).
3. ``fingerprint``: what identifying a run costs (issue 54 §4) on the OPUS-MT-sized model: the sha256 of its
   checkpoint files, of the input files and of the run's description (``transformer.interpret.corpus_files``,
   best of 3, the files in the page cache as after the model's load), against the command's table of
   ``--sentences`` captions in one process, one thread (the manifest's ``seconds``: the batches alone), scaled to
   1,000 lines. Goal: at most 5% (``corpus_fingerprint_share``).

Ratios from one run on the same machine; on a machine shared with other work they are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from .common import DEFAULT_CHECKPOINT, DEFAULT_DATA_DIR, REPO_ROOT, machine_info, read_sentences

COST_GOAL = 3.0  # the table at most this many times the translations alone
FINGERPRINT_GOAL = 0.05  # the run's fingerprint at most this share of a 1,000-line table's time
SCALING_GOAL = 1.7  # 2 processes at least this many times one


def cost(checkpoint: str | Path, sources: list[str], references: list[str] | None, threads: int = 1,
         batch_size: int = 64) -> dict[str, Any]:
    """Seconds for the translations alone and for the whole table, in this process (``threads`` torch threads),
    batch by batch in turns (each batch translated alone, then its table rows made), so that other work on the
    machine slows both alike."""
    import transformer
    from transformer.interpret.flagging import flag_rule
    from transformer.interpret.table import batch_rows, batches, source_lengths

    torch.set_num_threads(threads)
    tr = transformer.load(checkpoint, device="cpu")
    settings, rule = tr.settings(), flag_rule(tr.path)
    groups = batches(source_lengths(tr, sources), batch_size)
    tr.translate_batch(sources[:8], settings)  # warm-up
    translate_s = table_s = 0.0
    flagged = 0
    for ids in groups:
        start = time.perf_counter()
        tr.translate_batch([sources[i] for i in ids], settings)
        translate_s += time.perf_counter() - start
        start = time.perf_counter()
        rows = batch_rows(tr, ids, sources, references, settings, rule)
        table_s += time.perf_counter() - start
        flagged += sum(r["flag"] for r in rows)
    return {"corpus_sentences": len(sources), "corpus_translate_s": round(translate_s, 3),
            "corpus_table_s": round(table_s, 3), "corpus_cost_ratio": round(table_s / translate_s, 2),
            "corpus_cost_goal": COST_GOAL, "corpus_flagged": flagged, "corpus_beam": settings.beam_size,
            "corpus_threads": threads}


def command_run(checkpoint: str | Path, source: Path, out: Path, processes: int, extra: list[str]) -> dict[str, Any]:
    """Run the command (``processes`` > 1: under ``torchrun --standalone``), one thread a process; its manifest's
    ``seconds`` and the wall-clock time."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    launcher = (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)]
                if processes > 1 else [])
    cmd = [sys.executable, *launcher, "-m", "transformer.corpus", "--checkpoint", str(checkpoint), "--source",
           str(source), "--out", str(out), "--threads", "1", "--no-progress", "--overwrite", *extra]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr[-2000:]}")
    manifest = json.loads(out.with_name(out.name[: -len(out.suffix)] + ".manifest.json").read_text(encoding="utf-8"))
    return {"seconds": manifest["seconds"], "wall_s": wall, "rows": manifest["rows"]}


def scaling(checkpoint: str | Path, sources: list[str], prefix: str, extra: list[str] | None = None,
            repeat: int = 1) -> dict[str, Any]:
    """Sentences/s per process of the command in 1 and in 2 processes (runs in turns, ``repeat`` times each; the
    best of each kept), and the ratio."""
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as tmp:
        source = Path(tmp) / "source.txt"
        source.write_text("\n".join(sources) + "\n", encoding="utf-8")
        runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
        for _ in range(repeat):
            for n in (1, 2):
                runs[n].append(command_run(checkpoint, source, Path(tmp) / f"p{n}.parquet", n, extra or []))
        for n, done in runs.items():
            r = min(done, key=lambda run: run["seconds"])
            result[f"{prefix}_sent_s_{n}proc"] = round(r["rows"] / r["seconds"], 2)
            result[f"{prefix}_sent_s_per_process_{n}proc"] = round(r["rows"] / r["seconds"] / n, 2)
            result[f"{prefix}_wall_s_{n}proc"] = round(r["wall_s"], 1)
    result[f"{prefix}_scaling"] = round(result[f"{prefix}_sent_s_2proc"] / result[f"{prefix}_sent_s_1proc"], 2)
    result[f"{prefix}_machine_scaling"] = machine_ceiling()  # the same machine's 2-process ceiling, just after
    result[f"{prefix}_sentences"] = len(sources)
    return result


CEILING_WORK = ("import time, torch\ntorch.set_num_threads(1)\na = torch.randn(256, 256)\nt = time.perf_counter()\n"
                "for _ in range(3000):\n    a @ a\nprint(time.perf_counter() - t)")


def machine_ceiling() -> float:
    """What this machine gives 2 processes now: the same fixed work (a one-thread matrix-product loop) alone, then
    twice at once; 2 x (alone) / (the slower of the two). About 2 on 2 free cores; lower when others use them."""
    def together(n: int) -> float:
        procs = [subprocess.Popen([sys.executable, "-c", CEILING_WORK], stdout=subprocess.PIPE, text=True)
                 for _ in range(n)]
        return max(float(p.communicate()[0]) for p in procs)

    alone = together(1)
    return round(2 * alone / together(2), 2)


def opus_mt_dir(directory: Path, corpus: list[str], quick: bool) -> Path:
    """An OPUS-MT-sized Marian model with random weights, as ``bench.marian`` builds it."""
    from .marian import marian_dir

    return marian_dir(directory, corpus, quick)


def fingerprint_cost(checkpoint: Path, sources: list[str], references: list[str] | None,
                     batch_size: int) -> dict[str, Any]:
    """Seconds to fingerprint a run of ``checkpoint`` over these lines (the model's files, the input files, the
    description; best of 3) against the command's table of them, per line and scaled to 1,000 lines."""
    from transformer.interpret.corpus_files import bytes_digest, fingerprint, model_files

    with tempfile.TemporaryDirectory(prefix="bench-fingerprint-") as tmp:
        source = Path(tmp) / "source.txt"
        source.write_text("\n".join(sources) + "\n", encoding="utf-8")
        extra = ["--batch-size", str(batch_size)]
        if references is not None:
            (Path(tmp) / "reference.txt").write_text("\n".join(references) + "\n", encoding="utf-8")
            extra += ["--reference", str(Path(tmp) / "reference.txt")]
        table = command_run(checkpoint, source, Path(tmp) / "t.parquet", 1, extra)
        manifest = json.loads((Path(tmp) / "t.manifest.json").read_text(encoding="utf-8"))
        times = []
        for _ in range(3):
            start = time.perf_counter()
            files = model_files(checkpoint)
            given = {"source": bytes_digest(source.name, source.read_bytes()), "reference": None}
            if references is not None:
                given["reference"] = bytes_digest("reference.txt", (Path(tmp) / "reference.txt").read_bytes())
            run_id = fingerprint({**manifest, "model": {**manifest["model"], "files": files},
                                  "input": {**manifest["input"], "files": given}})
            times.append(time.perf_counter() - start)
        assert run_id == manifest["fingerprint"], "the bench's fingerprint is not the command's"
    per_line = table["seconds"] / table["rows"]
    hashed = sum(f["bytes"] for f in files)
    return {"corpus_fingerprint_s": round(min(times), 3), "corpus_fingerprint_mb": round(hashed / 1e6, 1),
            "corpus_fingerprint_mb_s": round(hashed / 1e6 / min(times)), "corpus_fingerprint_table_rows": table["rows"],
            "corpus_fingerprint_table_s": table["seconds"],
            "corpus_fingerprint_table_1000_s": round(per_line * 1000, 1),
            "corpus_fingerprint_share": round(min(times) / (per_line * 1000), 5),
            "corpus_fingerprint_goal": FINGERPRINT_GOAL, "corpus_fingerprint_batch_size": batch_size}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.corpus", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help="test_2016_flickr.en/.de are the workload")
    p.add_argument("--sentences", type=int, default=1000, help="captions (default: all 1,000)")
    p.add_argument("--sections", default="cost,scaling",
                   help="comma-separated subset of cost,scaling,fingerprint (fingerprint: the OPUS-MT-sized model)")
    p.add_argument("--model", choices=("shipped", "opus-mt"), default="shipped",
                   help="scaling on the shipped checkpoint, or on an OPUS-MT-sized random model")
    p.add_argument("--threads", type=int, default=1, help="torch threads for the cost section")
    p.add_argument("--batch-size", type=int, default=None,
                   help="sentences per batch (default 64; opus-mt 16, so that its fewer sentences make batches for "
                        "both processes)")
    p.add_argument("--repeat", type=int, default=1, help="scaling: runs of each, in turns (the best kept)")
    p.add_argument("--quick", action="store_true", help="a seconds-long smoke run (16 sentences, a tiny Marian)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sources = read_sentences(args.data_dir) or [f"A man in a red shirt walks {i} dogs past the old church."
                                                 for i in range(1000)]
    references = read_sentences(args.data_dir, lang="de")
    n = 16 if args.quick else args.sentences
    sources = sources[:n]
    references = references[:n] if references and len(references) >= n else None
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    result: dict[str, Any] = {"machine": machine_info()}
    batch = args.batch_size or (16 if args.model == "opus-mt" else 64)
    if "cost" in sections:
        result.update(cost(args.checkpoint, sources, references, args.threads, batch))
    if "scaling" in sections:
        if args.model == "opus-mt":
            with tempfile.TemporaryDirectory(prefix="bench-corpus-opus-") as tmp:
                path = opus_mt_dir(Path(tmp), read_sentences(args.data_dir) or sources, args.quick)
                result.update(scaling(path, sources, "corpus_opus_mt", ["--batch-size", str(batch)], args.repeat))
        else:
            result.update(scaling(args.checkpoint, sources, "corpus", ["--batch-size", str(batch)], args.repeat))
    if "fingerprint" in sections:
        with tempfile.TemporaryDirectory(prefix="bench-corpus-opus-") as tmp:
            path = opus_mt_dir(Path(tmp), read_sentences(args.data_dir) or sources, args.quick)
            result.update(fingerprint_cost(path, sources, references, args.batch_size or 16))
    result["corpus_batch_size"] = batch
    for key, value in result.items():
        if key != "machine":
            print(f"{key}: {value}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
