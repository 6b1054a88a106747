"""One table row of signals per sentence of a whole test set, on one process or many (``torchrun``, one or several
machines), resumable: the input and the run's description (:func:`read_input`, :func:`describe_run`), the
processes, each rank's batches computed into its part file and rank 0's merge (:func:`run`). The command,
``python -m transformer.corpus``, is ``transformer/corpus.py``; its help says what goes where.
"""

from __future__ import annotations

import contextlib
import hashlib
import platform
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from importlib import metadata as package_metadata
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from tqdm import tqdm

from ..checkpoint.files import CheckpointError, join_processes, resolve_device
from ..decoding.settings import DecodeSettings
from ..translator import Translator, load
from .corpus_files import (
    CorpusError,
    append_rows,
    bytes_digest,
    check_out,
    decide,
    file_digest,
    fingerprint,
    model_files,
    part_path,
    parts_dir,
    repair_part,
    scan_parts,
    write_manifest,
)
from .corpus_files import manifest_path as manifest_path  # re-exported: where the manifest of a table goes
from .flagging import flag_rule
from .table import COLUMNS, batch_rows, batches, source_lengths, without_inputs, write_table

SUFFIXES = (".parquet", ".jsonl")
MAX_LINE_CHARS = 1_000_000  # a longer line is not a sentence: refused before the model sees it
PROCESS_GROUP_TIMEOUT = timedelta(hours=12)  # ranks wait for the slowest at the merge
VERSIONED = ("torch", "sacrebleu", "pyarrow", "sentencepiece", "numpy")




def silent(message: str) -> None:
    """What a run says when nobody listens (``tell``'s default)."""


# ------------------------------------------------------------------------------------------------ input


def read_text_lines(path: str | Path, what: str) -> tuple[list[str], dict[str, Any]]:
    """The lines of a UTF-8 text file (one sentence a line; a final newline does not make an extra line) and the
    :func:`file_digest` of the bytes read; a clear ``CorpusError`` when it is missing, a directory, not a regular
    file, unreadable or not UTF-8."""
    path = Path(path)
    if path.exists() and not path.is_dir() and not path.is_file():
        raise CorpusError(f"{what} {path} is not a regular file (a FIFO, device or socket); give a text file")
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
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
    return lines, bytes_digest(path.name, data)


def read_input(args: Any, translator_pair: tuple[str, str]) -> tuple[list[str], list[str] | None,
                                                                                        dict[str, Any]]:
    """Sources, references (or None) and the manifest's ``input`` from ``--source``/``--reference`` or
    ``--data-dir``/``--split``; ``--limit`` applied. ``translator_pair``: the file languages when none are given.
    ``input["files"]``: the :func:`file_digest` of each whole file (before ``--limit``), ``reference`` null
    without one. An input with no line is a ``CorpusError``."""
    src, tgt = args.src or translator_pair[0], args.tgt or translator_pair[1]
    if args.source:
        source_path, reference_path = Path(args.source), Path(args.reference) if args.reference else None
        info: dict[str, Any] = {"source_file": source_path.name,
                                "reference_file": reference_path.name if reference_path else None}
        what = (f"the source file {args.source}", f"the reference file {args.reference}")
    else:
        data_dir = Path(args.data_dir)
        if not data_dir.is_dir():
            raise CorpusError(f"data directory not found: {data_dir} (expected {args.split}.{src} and "
                              f"{args.split}.{tgt}; download Multi30k with: python -m transformer.data --download "
                              f"{data_dir})")
        source_path, reference_path = data_dir / f"{args.split}.{src}", data_dir / f"{args.split}.{tgt}"
        reference_path = reference_path if reference_path.exists() else None
        info = {"split": args.split}
        what = (f"{args.split}.{src}", f"{args.split}.{tgt}")
    sources, source_file = read_text_lines(source_path, "source")
    references, reference_file = read_text_lines(reference_path, "reference") if reference_path else (None, None)
    if not sources:
        raise CorpusError(f"{what[0]} is empty: no line to translate (one sentence a line)")
    if references is not None and len(references) != len(sources):
        raise CorpusError(f"{what[1]} has {len(references)} lines but {what[0]} has {len(sources)}: one reference "
                          "per source line (nothing was translated)")
    info.update(file_lines=len(sources))
    if args.limit is not None:
        sources = sources[:args.limit]
        references = references[:args.limit] if references is not None else None
    info.update(lines=len(sources), limit=args.limit, src_lang=src, tgt_lang=tgt,
                references=references is not None, files={"source": source_file, "reference": reference_file})
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


def describe_run(args: Any, translator: Translator, settings: DecodeSettings,
                 info: dict[str, Any], sources: Sequence[str], references: Sequence[str] | None) -> dict[str, Any]:
    """The manifest's ``model``, ``settings`` and ``input``, with the run's ``fingerprint`` (what decides its rows:
    :func:`transformer.interpret.corpus_files.fingerprint`)."""
    cfg = translator.config
    model = {"name": model_name(args.checkpoint), "parameters": sum(p.numel() for p in translator.model.parameters()),
             "d_model": cfg.d_model, "n_heads": cfg.n_heads, "n_encoder_layers": cfg.n_encoder_layers,
             "n_decoder_layers": cfg.n_decoder_layers, "norm_first": cfg.norm_first,
             "flag_rule": {key: value for key, value in flag_rule(translator.path).to_json().items()
                           if key in ("rule", "any", "score")},  # its calibration report stays in flag.json
             "files": model_files(translator.path) if translator.path is not None else []}
    chosen = {"beam": settings.beam_size, "alpha": settings.alpha, "max_len_a": settings.max_len_a,
              "max_len_b": settings.max_len_b, "scoring": settings.scoring, "src_lang": settings.src_lang,
              "tgt_lang": settings.tgt_lang, "batch_size": args.batch_size,
              "dtype": getattr(args, "dtype", "float32")}  # the weights' dtype decides the rows too
    described = {"model": model, "settings": chosen, "input": {**info, "sha256": content_hash(sources, references)}}
    return {"fingerprint": fingerprint(described), **described}


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in VERSIONED:
        with contextlib.suppress(package_metadata.PackageNotFoundError):
            found[name] = package_metadata.version(name)
    return found


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
    """Rank, world size and device (:func:`~transformer.checkpoint.files.join_processes`, as ``transformer.train``);
    the ranks wait up to ``PROCESS_GROUP_TIMEOUT`` for the slowest at the merge."""
    return join_processes(resolve_device(device_arg), PROCESS_GROUP_TIMEOUT)


def barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


def stop_processes() -> None:
    """Leave the process group :func:`start_processes` joined, if any."""
    if dist.is_initialized():
        dist.destroy_process_group()


T = TypeVar("T")


def everyone(world: int, value: Any) -> list[Any]:
    """``value`` of every rank, by rank (one process: ``[value]``)."""
    if world == 1:
        return [value]
    found: list[Any] = [None] * world
    dist.all_gather_object(found, value)
    return found


def together(world: int, step: Callable[[], T]) -> T:
    """``step()`` on every rank; when it fails on any (``CorpusError``, ``CheckpointError``, ``OSError``), every rank
    raises the first failing rank's message, so that none waits for the others at the next collective."""
    try:
        value, error = step(), None
    except (CorpusError, CheckpointError) as err:
        value, error = None, str(err)
    except OSError as err:
        value, error = None, f"{err.strerror or err}: {err.filename}" if err.filename else str(err)
    error = next((e for e in everyone(world, error) if e is not None), None)
    if error is not None:
        raise CorpusError(error)
    return value


def prepare(args: Any, device: torch.device) -> tuple[Translator, list[str], list[str] | None,
                                                                      DecodeSettings, dict[str, Any]]:
    """The translator, the input, the settings and the run's description (:func:`describe_run`)."""
    translator = load(args.checkpoint, device=device, dtype=args.dtype)
    refused = flag_rule(translator.path).refused
    if refused:  # never a table flagged by the default rule in its place
        raise CorpusError(f"the checkpoint's flag.json is refused: {refused}; fix or remove it (python -m "
                          "transformer.detect writes one)")
    sources, references, info = read_input(args, language_pair(translator))
    try:
        settings = translator.settings(beam_size=args.beam, alpha=args.alpha, src_lang=args.src_lang,
                                       tgt_lang=args.tgt_lang)
    except ValueError as err:
        raise CorpusError(str(err)) from None
    return translator, sources, references, settings, describe_run(args, translator, settings, info, sources,
                                                                    references)


def compute(translator: Translator, groups: Sequence[Sequence[int]], done: dict[int, dict[str, Any]],
            sources: Sequence[str], references: Sequence[str] | None, settings: DecodeSettings,
            part: Path, described: dict[str, Any], progress: bool, tell: Callable[[str], None] = silent,
            ) -> tuple[list[dict[str, Any]], float, int]:
    """This rank's rows (its batches ``groups``, in order): those in ``done``, and every batch not wholly there
    computed and appended to ``part`` as it finishes (a new part starts with its header line: the fingerprint and
    the run). Also the seconds it took and how many it computed. ``tell``: how many were already written."""
    todo = [g for g in groups if not all(i in done for i in g)]
    total = sum(len(g) for g in groups)
    kept = total - sum(len(g) for g in todo)
    rank = part.stem.removeprefix("rank")
    if kept:
        tell(f"rank {rank}: {kept} of {total} sentences already written, {total - kept} to compute")
    rule = flag_rule(translator.path)
    start = time.perf_counter()
    new = not part.exists() or part.stat().st_size == 0
    header = {"fingerprint": described["fingerprint"],
              "run": {key: value for key, value in described.items() if key != "fingerprint"}}
    with open(part, "a", encoding="utf-8") as f, tqdm(total=total, initial=kept, unit="sent", file=sys.stderr,
                                                      disable=not progress) as bar:
        if new:
            append_rows(f, [header])
        for ids in todo:
            rows = batch_rows(translator, ids, sources, references, settings, rule)
            append_rows(f, rows)
            done.update((row["id"], row) for row in rows)
            bar.update(len(ids))
    return [done[i] for g in groups for i in g], time.perf_counter() - start, total - kept


def merge(out: Path, gathered: Sequence[tuple[list[dict[str, Any]], float, int]], lines: int,
          described: dict[str, Any], no_inputs: bool) -> dict[str, Any]:
    """Rank 0: every rank's rows by line, written as the table, then its manifest (with the table's own hash and
    row count), each atomically; the manifest."""
    rows = sorted((row for part, _, _ in gathered for row in part), key=lambda row: row["id"])
    if [row["id"] for row in rows] != list(range(lines)):
        raise CorpusError(f"the merged parts do not hold every line once ({len(rows)} rows for {lines} lines); the "
                          f"parts stay in {parts_dir(out)}")
    write_table(out, without_inputs(rows) if no_inputs else rows)
    record = {**described, "versions": versions(), "columns": list(COLUMNS), "rows": len(rows),
              "no_inputs": no_inputs, "processes": len(gathered),
              "seconds": round(max(t for _, t, _ in gathered), 2),  # the slowest rank's batches, this start
              "seconds_by_rank": [round(t, 2) for _, t, _ in gathered],
              "computed": [n for _, _, n in gathered],  # sentences each rank computed (not resumed)
              "flagged": sum(bool(row["flag"]) for row in rows), "table": file_digest(out)}
    write_manifest(out, record)  # last: a manifest always describes the table beside it
    return record


def remove(paths: Sequence[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def tidy(out: Path) -> None:
    """The parts folder removed when nothing is left in it."""
    with contextlib.suppress(OSError):
        parts_dir(out).rmdir()


def run(args: Any, tell: Callable[[str], None] = silent) -> None:
    """The table ``args`` (``python -m transformer.corpus``'s parsed flags, one attribute each) ask for, on this
    process's rank: its batches into its part file, then rank 0's merge and manifest. ``tell``: what an operator
    reads on the way (rank 0's word when there is nothing to do, a resumed rank's count, the table written).
    ``CorpusError`` or ``CheckpointError`` (every rank alike) when it cannot go on."""
    rank, world, device = start_processes(args.device)
    out = Path(args.out)
    together(world, lambda: check_out(out))  # before the model is loaded
    translator, sources, references, settings, described = together(world, lambda: prepare(args, device))
    run_id = described["fingerprint"]
    ids = everyone(world, run_id)
    other = next((r for r, found in enumerate(ids) if found != ids[0]), None)
    if other is not None:
        raise CorpusError(f"rank {other} found another checkpoint, input or settings than rank 0 (another "
                          "fingerprint): every machine needs the same files")
    parts = together(world, lambda: scan_parts(out, run_id, len(sources)))
    seen = everyone(world, {"ours": sum(p.kind == "ours" for p in parts),
                            "foreign": [p.what for p in parts if p.kind == "foreign"]})
    said = together(world, lambda: decide(out, run_id, len(sources), args.no_inputs, args.overwrite, seen)
                    if rank == 0 else None)
    said = everyone(world, said)[0]  # rank 0's word
    stale = [p.path for p in parts if p.kind != "foreign"]  # this run's and empty parts: rows in the table
    if said:
        if rank == 0:
            tell(said)
        barrier(world)
        remove(stale)
        barrier(world)
        tidy(out)
        return
    if args.overwrite:
        together(world, lambda: remove([p.path for p in parts if p.kind == "foreign"]))
    mine = part_path(out, rank)
    together(world, lambda: (parts_dir(out).mkdir(parents=True, exist_ok=True), repair_part(mine)))
    done = {i: row for p in parts if p.kind == "ours" for i, row in p.rows.items()}
    groups = shard(batches(source_lengths(translator, sources, settings.src_lang), args.batch_size), rank, world)
    result = compute(translator, groups, done, sources, references, settings, mine, described,
                     progress=not args.no_progress and rank == 0, tell=tell)
    gathered: list[Any] = [result]
    if world > 1:
        gathered = [None] * world
        dist.gather_object(result, gathered if rank == 0 else None, dst=0)
    record = together(world, lambda: merge(out, gathered, len(sources), described, args.no_inputs) if rank == 0
                      else None)
    if rank == 0:
        tell(f"{out}: {len(sources)} rows ({record['flagged']} flagged), {world} process(es), "
             f"{record['seconds']:.1f} s")
    barrier(world)
    remove([mine, *stale])  # every part this run read or wrote: its rows are in the table
    barrier(world)
    tidy(out)
