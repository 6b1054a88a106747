"""``python -m transformer.corpus``: one table row of signals per sentence of a whole test set, on one process or
many (``torchrun``, one or several machines), resumable.

    python -m transformer.corpus --checkpoint checkpoints/multi30k-en-de --data-dir data/multi30k \\
        --split test_2016_flickr --out test.parquet
    torchrun --nproc-per-node 4 -m transformer.corpus ... (same flags)
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m transformer.corpus ...

The columns are ``transformer.interpret.table.COLUMNS``. Beside ``--out X.parquet`` (or ``X.jsonl``) goes
``X.manifest.json`` (model, settings, input, package versions, columns, rows). While it runs, each process appends
the rows of each batch it finishes to its own part file, ``X.parquet.parts/rank<R>.jsonl``; started again with the
same ``--out`` (and the same model, input and settings) a run keeps every batch already written and computes the
rest. Under ``torchrun`` the batches are shared out by rank (each rank on ``cuda:LOCAL_RANK`` when there is a GPU,
else on the CPU, gloo); after a barrier rank 0 gathers every rank's rows (through the process group: the machines
need no shared disk), merges them by line and writes the table, which equals the one-process table row for row.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from importlib import metadata as package_metadata
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from ..checkpoint.files import CheckpointError, resolve_device
from ..decoding.settings import DecodeSettings
from ..translator import Translator, load
from .signals import flag_rule
from .table import COLUMNS, DEFAULT_BATCH_SIZE, batch_rows, batches, source_lengths, without_inputs, write_table
from .table import table_rows as table_rows  # re-exported: transformer.corpus.table_rows, for the app

SUFFIXES = (".parquet", ".jsonl")
DEFAULT_DATA_DIR = "data/multi30k"  # as every command (python -m transformer.data --download data/multi30k)
MAX_LINE_CHARS = 1_000_000  # a longer line is not a sentence: refused before the model sees it
PROCESS_GROUP_TIMEOUT = timedelta(hours=12)  # ranks wait for the slowest at the merge
VERSIONED = ("torch", "sacrebleu", "pyarrow", "sentencepiece", "numpy")


class CorpusError(Exception):
    """Input or output the command cannot use; the message says what to do."""


# ------------------------------------------------------------------------------------------------ input


def read_text_lines(path: str | Path, what: str) -> list[str]:
    """The lines of a UTF-8 text file (one sentence a line; a final newline does not make an extra line); a clear
    ``CorpusError`` when it is missing, a directory, unreadable or not UTF-8."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(f"{what} file not found: {path}") from None
    except IsADirectoryError:
        raise CorpusError(f"{what} {path} is a directory; give a text file, one sentence a line") from None
    except UnicodeDecodeError as err:
        raise CorpusError(f"{what} file {path} is not UTF-8 text (byte {err.start}: {err.reason})") from None
    except OSError as err:
        raise CorpusError(f"cannot read the {what} file {path}: {err.strerror or err}") from None
    lines = text.split("\n")  # not splitlines(): U+2028 and friends must not split a sentence
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line.rstrip("\r") for line in lines]
    long = next((i for i, line in enumerate(lines) if len(line) > MAX_LINE_CHARS), None)
    if long is not None:
        raise CorpusError(f"{what} file {path}, line {long + 1}: {len(lines[long]):,} characters (at most "
                          f"{MAX_LINE_CHARS:,}); is it one sentence a line?")
    return lines


def read_input(args: argparse.Namespace, translator_pair: tuple[str, str]) -> tuple[list[str], list[str] | None,
                                                                                        dict[str, Any]]:
    """Sources, references (or None) and the manifest's ``input`` from ``--source``/``--reference`` or
    ``--data-dir``/``--split``; ``--limit`` applied. ``translator_pair``: the file languages when none are given."""
    src, tgt = args.src or translator_pair[0], args.tgt or translator_pair[1]
    if args.source:
        sources = read_text_lines(args.source, "source")
        references = read_text_lines(args.reference, "reference") if args.reference else None
        info: dict[str, Any] = {"source_file": Path(args.source).name,
                                "reference_file": Path(args.reference).name if args.reference else None}
        what = (f"the source file {args.source}", f"the reference file {args.reference}")
    else:
        data_dir = Path(args.data_dir)
        if not data_dir.is_dir():
            raise CorpusError(f"data directory not found: {data_dir} (expected {args.split}.{src} and "
                              f"{args.split}.{tgt}; download Multi30k with: python -m transformer.data --download "
                              f"{data_dir})")
        sources = read_text_lines(data_dir / f"{args.split}.{src}", "source")
        reference_path = data_dir / f"{args.split}.{tgt}"
        references = read_text_lines(reference_path, "reference") if reference_path.exists() else None
        info = {"split": args.split}
        what = (f"{args.split}.{src}", f"{args.split}.{tgt}")
    if references is not None and len(references) != len(sources):
        raise CorpusError(f"{what[1]} has {len(references)} lines but {what[0]} has {len(sources)}: one reference "
                          "per source line (nothing was translated)")
    info.update(file_lines=len(sources))
    if args.limit is not None:
        sources = sources[:args.limit]
        references = references[:args.limit] if references is not None else None
    info.update(lines=len(sources), limit=args.limit, src_lang=src, tgt_lang=tgt,
                references=references is not None)
    return sources, references, info


def language_pair(translator: Translator) -> tuple[str, str]:
    """The file languages of the checkpoint's ``language_pair`` (``"en-de"``), else en and de."""
    pair = str(translator.metadata.get("language_pair", "")).split("-")
    return (pair[0], pair[1]) if len(pair) == 2 and all(pair) else ("en", "de")


def model_name(checkpoint: str) -> str:
    """How the manifest names a model: a Hub id as given, a directory by its own name (never a server's path)."""
    path = Path(checkpoint).expanduser()
    return path.resolve().name if path.exists() else str(checkpoint)


def content_hash(sources: Sequence[str], references: Sequence[str] | None) -> str:
    digest = hashlib.sha256()
    for line in [*sources, "\0", *(references or [])]:
        digest.update(line.encode("utf-8") + b"\n")
    return digest.hexdigest()[:16]


def describe_run(args: argparse.Namespace, translator: Translator, settings: DecodeSettings,
                 info: dict[str, Any], sources: Sequence[str], references: Sequence[str] | None) -> dict[str, Any]:
    """What makes two runs the same table (a resumed run must match it): model, settings, input and its hash."""
    cfg = translator.config
    model = {"name": model_name(args.checkpoint), "parameters": sum(p.numel() for p in translator.model.parameters()),
             "d_model": cfg.d_model, "n_heads": cfg.n_heads, "n_encoder_layers": cfg.n_encoder_layers,
             "n_decoder_layers": cfg.n_decoder_layers, "norm_first": cfg.norm_first,
             "flag_rule": {key: value for key, value in flag_rule(translator.path).to_json().items()
                           if key in ("rule", "any")}}  # its calibration report stays in flag.json
    chosen = {"beam": settings.beam_size, "alpha": settings.alpha, "max_len_a": settings.max_len_a,
              "max_len_b": settings.max_len_b, "scoring": settings.scoring, "src_lang": settings.src_lang,
              "tgt_lang": settings.tgt_lang, "batch_size": args.batch_size}
    return {"model": model, "settings": chosen, "input": {**info, "sha256": content_hash(sources, references)}}


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in VERSIONED:
        with contextlib.suppress(package_metadata.PackageNotFoundError):
            found[name] = package_metadata.version(name)
    return found


# ------------------------------------------------------------------------------------------------ files


def manifest_path(out: Path) -> Path:
    """``X.parquet`` -> ``X.manifest.json``."""
    return out.with_name(out.name[: -len(out.suffix)] + ".manifest.json")


def parts_dir(out: Path) -> Path:
    return out.with_name(out.name + ".parts")


def part_path(out: Path, rank: int) -> Path:
    return parts_dir(out) / f"rank{rank}.jsonl"


def read_part(path: Path, run: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The rows a part file holds (by id; a later line wins), after its header line; a torn last line (a run
    killed while writing it) is ignored. A part of another run is a ``CorpusError``."""
    rows: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if not lines or not lines[0].strip():
        return rows
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("run") != run:
        raise CorpusError(f"{path} holds rows of another run (another model, input or settings): delete "
                          f"{path.parent} to start again, or choose another --out")
    for line in lines[1:]:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # the torn end of a killed run, or the final empty string
        rows[int(row["id"])] = row
    return rows


def repair_part(path: Path) -> None:
    """Cut a part file after its last whole line (a run killed mid-write leaves half a line), so that appending
    goes on from a line's start."""
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with open(path, "r+b") as f:
            f.truncate(end)


def append_rows(f, rows: Sequence[dict[str, Any]]) -> None:
    """One batch's rows, written at once and flushed to the disk (a kill loses at most this batch)."""
    f.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    f.flush()
    os.fsync(f.fileno())


# ------------------------------------------------------------------------------------------------ processes


def shard(groups: Sequence[Sequence[int]], rank: int, world: int) -> list[Sequence[int]]:
    """This rank's batches: dealt out in a snake order (0, 1, ..., W-1, W-1, ..., 0, ...) over the length-sorted
    batches, so every rank gets short and long ones alike."""
    mine = []
    for k, group in enumerate(groups):
        turn, pos = divmod(k, world)
        if (pos if turn % 2 == 0 else world - 1 - pos) == rank:
            mine.append(group)
    return mine


def start_processes(device_arg: str) -> tuple[int, int, torch.device]:
    """Rank, world size and device: one process, or the process group ``torchrun`` describes in the environment
    (``WORLD_SIZE`` > 1): nccl and ``cuda:LOCAL_RANK`` on GPUs, gloo on CPUs (as ``transformer.train``)."""
    device = resolve_device(device_arg)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=PROCESS_GROUP_TIMEOUT)
    return dist.get_rank(), dist.get_world_size(), device


def barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


# ------------------------------------------------------------------------------------------------ the command


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m transformer.corpus", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="checkpoints/multi30k-en-de", help="checkpoint directory or Hub repo id")
    p.add_argument("--source", help="source file, one sentence a line")
    p.add_argument("--reference", help="reference file, one translation a line (optional, with --source)")
    p.add_argument("--data-dir", help="directory with {split}.{lang} files (default, without --source: "
                                      f"{DEFAULT_DATA_DIR})")
    p.add_argument("--split", default="test_2016_flickr", help="with --data-dir (default: test_2016_flickr)")
    p.add_argument("--src", help="with --data-dir: the source files' language suffix (default: the checkpoint's "
                                 "language pair, else en)")
    p.add_argument("--tgt", help="with --data-dir: the reference files' suffix (default: the pair's, else de)")
    p.add_argument("--src-lang", help="a multilingual model's source language code (e.g. eng_Latn)")
    p.add_argument("--tgt-lang", help="a multilingual model's target language code (e.g. deu_Latn)")
    p.add_argument("--limit", type=int, help="only the first N lines")
    p.add_argument("--beam", type=int, help="beam size (1: greedy; default: the translator's)")
    p.add_argument("--alpha", type=float, help="length penalty (default: the checkpoint's, else 0.6)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences per batch (default 64)")
    p.add_argument("--out", required=True, help="the table: FILE.parquet or FILE.jsonl")
    p.add_argument("--no-inputs", action="store_true",
                   help="leave source and reference null in the written table (for a table committed without the "
                        "corpus' lines; they join back by id)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing table of another run")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="the weights' dtype (bfloat16: half the memory; attention weights still float32)")
    p.add_argument("--device", default="auto", help="auto (cuda:LOCAL_RANK when there is a GPU), cpu or cuda")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads per process (0: leave as is)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.source and args.data_dir:
        p.error("give either --source FILE (with an optional --reference FILE) or --data-dir DIR --split NAME")
    if not args.source:
        args.data_dir = args.data_dir or DEFAULT_DATA_DIR
    if args.reference and not args.source:
        p.error("--reference goes with --source")
    for name in ("limit", "beam", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "limit" else 1):
            p.error(f"--{name.replace('_', '-')} must be at least {0 if name == 'limit' else 1}, not {value}")
    if Path(args.out).suffix not in SUFFIXES:
        p.error(f"--out must end in {' or '.join(SUFFIXES)}, not {args.out!r}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return run(args)
    except (CorpusError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def finished(out: Path, described: dict[str, Any], no_inputs: bool) -> bool:
    """Whether ``out`` is this run's table, already complete (its manifest names the same model, settings and
    input); a table of another run is a ``CorpusError``."""
    if not out.exists():
        return False
    try:
        written = json.loads(manifest_path(out).read_text(encoding="utf-8"))
        same = (all(written.get(key) == value for key, value in described.items())
                and written.get("no_inputs") == no_inputs)
    except (OSError, ValueError, AttributeError):
        same = False
    if not same:
        raise CorpusError(f"{out} exists and was not written by this run (another model, input or settings): "
                          "choose another --out, or pass --overwrite")
    return True


def written_rows(out: Path, rank: int, world: int, described: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The rows every part this machine sees already holds (a resumed run may have had another number of
    processes), once this rank's own part is cut after its last whole line."""
    parts_dir(out).mkdir(parents=True, exist_ok=True)
    repair_part(part_path(out, rank))
    barrier(world)
    done: dict[int, dict[str, Any]] = {}
    for path in sorted(parts_dir(out).glob("rank*.jsonl")):
        done.update(read_part(path, described))
    barrier(world)
    return done


def compute(translator: Translator, groups: Sequence[Sequence[int]], done: dict[int, dict[str, Any]],
            sources: Sequence[str], references: Sequence[str] | None, settings: DecodeSettings,
            part: Path, described: dict[str, Any], progress: bool) -> tuple[list[dict[str, Any]], float, int]:
    """This rank's rows (its batches ``groups``, in order): those in ``done``, and every batch not wholly there
    computed and appended to ``part`` as it finishes. Also the seconds it took and how many it computed."""
    todo = [g for g in groups if not all(i in done for i in g)]
    total = sum(len(g) for g in groups)
    kept = total - sum(len(g) for g in todo)
    rank = part.stem.removeprefix("rank")
    if kept:
        print(f"rank {rank}: {kept} of {total} sentences already written, {total - kept} to compute",
              file=sys.stderr)
    rule = flag_rule(translator.path)
    start = time.perf_counter()
    new = not part.exists() or part.stat().st_size == 0
    with open(part, "a", encoding="utf-8") as f, tqdm(total=total, initial=kept, unit="sent", file=sys.stderr,
                                                      disable=not progress) as bar:
        if new:
            append_rows(f, [{"run": described}])
        for ids in todo:
            rows = batch_rows(translator, ids, sources, references, settings, rule)
            append_rows(f, rows)
            done.update((row["id"], row) for row in rows)
            bar.update(len(ids))
    return [done[i] for g in groups for i in g], time.perf_counter() - start, total - kept


def merge(out: Path, gathered: Sequence[tuple[list[dict[str, Any]], float, int]], lines: int,
          described: dict[str, Any], no_inputs: bool) -> dict[str, Any]:
    """Rank 0: every rank's rows by line, written as the table beside its manifest (written first); the manifest."""
    rows = sorted((row for part, _, _ in gathered for row in part), key=lambda row: row["id"])
    if [row["id"] for row in rows] != list(range(lines)):
        raise CorpusError(f"the merged parts do not hold every line once ({len(rows)} rows for {lines} lines); the "
                          f"parts stay in {parts_dir(out)}")
    record = {**described, "versions": versions(), "columns": list(COLUMNS), "rows": len(rows),
              "no_inputs": no_inputs, "processes": len(gathered),
              "seconds": round(max(t for _, t, _ in gathered), 2),  # the slowest rank's batches, this start
              "seconds_by_rank": [round(t, 2) for _, t, _ in gathered],
              "computed": [n for _, _, n in gathered],  # sentences each rank computed (not resumed)
              "flagged": sum(bool(row["flag"]) for row in rows)}
    manifest_path(out).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    write_table(out, without_inputs(rows) if no_inputs else rows)  # last: a table always has its manifest
    return record


def run(args: argparse.Namespace) -> int:
    rank, world, device = start_processes(args.device)
    out = Path(args.out)
    translator = load(args.checkpoint, device=device, dtype=getattr(args, "dtype", "float32"))
    sources, references, info = read_input(args, language_pair(translator))
    settings = translator.settings(beam_size=args.beam, alpha=args.alpha, src_lang=args.src_lang,
                                   tgt_lang=args.tgt_lang)
    described = describe_run(args, translator, settings, info, sources, references)
    if not args.overwrite and finished(out, described, args.no_inputs):
        if rank == 0:
            print(f"{out} is already complete ({len(sources)} rows): nothing to do", file=sys.stderr)
            shutil.rmtree(parts_dir(out), ignore_errors=True)  # left by a run stopped after its merge
        return 0
    done = written_rows(out, rank, world, described)
    groups = shard(batches(source_lengths(translator, sources, settings.src_lang), args.batch_size), rank, world)
    mine = compute(translator, groups, done, sources, references, settings, part_path(out, rank), described,
                   progress=not args.no_progress and rank == 0)
    gathered: list[Any] = [mine]
    if world > 1:
        gathered = [None] * world
        dist.gather_object(mine, gathered if rank == 0 else None, dst=0)
    if rank == 0:
        record = merge(out, gathered, len(sources), described, args.no_inputs)
        print(f"{out}: {len(sources)} rows ({record['flagged']} flagged), {world} process(es), "
              f"{record['seconds']:.1f} s", file=sys.stderr)
    barrier(world)
    part_path(out, rank).unlink(missing_ok=True)
    barrier(world)
    if rank == 0:
        for path in parts_dir(out).glob("rank*.jsonl"):  # parts of an earlier run with more processes
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            parts_dir(out).rmdir()
    return 0
