"""The files of ``python -m transformer.corpus`` and what a start finds in them.

A run is identified by its **fingerprint** (:func:`fingerprint`): the sha256 of everything that decides its rows,
namely the bytes of the checkpoint's weight, config, tokenizer, metadata and flag-rule files (:func:`model_files`),
the flag rule, the decoding settings with the batch size, and the input: the sha256 of each whole input file
(:func:`file_digest`), ``--limit`` and the hash of the lines read. The manifest carries it (``"fingerprint"``) and so
does the first line of every part file (``{"fingerprint": ..., "run": {model, settings, input}}``); a resume keeps
only the rows of parts with the same fingerprint.

A table is finished when its manifest has this run's fingerprint and the table's own sha256, size and row count
(``"table"``, ``"rows"``): the table is written first, then the manifest, each to a temporary file in the same
folder, synced and renamed over the old one (:func:`transformer.interpret.table.atomic_write`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..checkpoint.families import FAMILIES
from ..checkpoint.files import CONFIG_FILE, METADATA_FILE, TOKENIZER_FILE, WEIGHTS_FILE, read_json
from .flagging import FLAG_FILE
from .table import arrow_schema, atomic_write

# Every file of a checkpoint directory a load or the flag rule reads (those present are hashed): never the
# README, the tables folder or other frameworks' copies of the weights.
MODEL_FILES = tuple(sorted({CONFIG_FILE, WEIGHTS_FILE, "pytorch_model.bin", METADATA_FILE, TOKENIZER_FILE, FLAG_FILE,
                            *(name for family in FAMILIES for name in (*family.tokenizer_files,
                                                                       *family.copied_files))}))
HASH_READ_BYTES = 1 << 20
MAX_MANIFEST_BYTES = 1 << 20  # a manifest, written and read (the app's bound too): the shipped ones are 8-10 kB, and
# the flag rule it carries is bounded by flagging.MAX_CONDITIONS and MAX_KNOTS (the largest: about 32 kB)
PART_GLOB = "rank*.jsonl"


class CorpusError(Exception):
    """Input or output the command cannot use; the message says what to do."""


# ------------------------------------------------------------------------------------------------ hashes


def bytes_digest(name: str, data: bytes) -> dict[str, Any]:
    """``{"name", "sha256", "bytes"}`` of a file's bytes already read (:func:`file_digest`'s shape)."""
    return {"name": name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def file_digest(path: str | Path) -> dict[str, Any]:
    """``{"name": file name only, "sha256": 64 hex of the whole file's bytes, "bytes": its size}``: how the
    manifest records an input file, a checkpoint file and the table itself. ``OSError`` for what is not a regular
    file (a FIFO or a device is never read)."""
    path = Path(path)
    if not path.is_file():  # checked before opening: opening a FIFO waits for a writer
        raise OSError(f"{path} is not a regular file")
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(HASH_READ_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return {"name": path.name, "sha256": digest.hexdigest(), "bytes": size}


def model_files(directory: str | Path) -> list[dict[str, Any]]:
    """:func:`file_digest` of each of :data:`MODEL_FILES` in a checkpoint directory (those present, by name)."""
    directory = Path(directory)
    return [file_digest(directory / name) for name in MODEL_FILES if (directory / name).is_file()]


def fingerprint(described: dict[str, Any]) -> str:
    """The run's fingerprint (64 hex): sha256 of what decides its rows, read from the manifest's ``model.files``,
    ``model.flag_rule``, ``settings`` and ``input`` (``files``, ``limit``, ``sha256``); a model's name, the input's
    file names and the run's timings are left out."""
    model, data = described["model"], described["input"]
    deciding = {"model_files": model["files"], "flag_rule": model["flag_rule"], "settings": described["settings"],
                "input": {key: data.get(key) for key in ("files", "limit", "sha256")}}
    return hashlib.sha256(json.dumps(deciding, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------ paths


def manifest_path(out: Path) -> Path:
    """``X.parquet`` -> ``X.manifest.json``."""
    return out.with_name(out.name[: -len(out.suffix)] + ".manifest.json")


def parts_dir(out: Path) -> Path:
    return out.with_name(out.name + ".parts")


def part_path(out: Path, rank: int) -> Path:
    return parts_dir(out) / f"rank{rank}.jsonl"


def check_out(out: Path) -> None:
    """Before any work (nothing made): ``--out``, its manifest and its parts folder can be written; a
    ``CorpusError`` saying why not (under a file, on a read-only or pseudo file system such as ``/proc``, a folder
    without permission, a directory or a device in the table's place, with or without ``--overwrite``)."""
    for path, what in ((out, "--out"), (manifest_path(out), "the manifest")):
        if path.is_dir():
            raise CorpusError(f"{what} {path} is a directory; give a file name ending in .parquet or .jsonl")
        if path.exists() and not path.is_file():
            raise CorpusError(f"{what} {path} is not a regular file (a device, FIFO or socket); choose another --out")
    if parts_dir(out).exists() and not parts_dir(out).is_dir():
        raise CorpusError(f"{parts_dir(out)} is not a directory; the run keeps its part files there: move it away or "
                          "choose another --out")
    above = next(p for p in parts_dir(out).absolute().parents if p.exists())  # where the folders would be made
    if not above.is_dir():
        raise CorpusError(f"cannot write {out}: {above} is a file, not a directory")
    for folder in dict.fromkeys((above, parts_dir(out))):
        if folder.is_dir():
            try:  # a file made and removed at once: a read-only mount, /proc or a folder without permission fails
                probe = folder / f".corpus-probe-{os.getpid()}"
                os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                os.unlink(probe)
            except OSError as err:
                raise CorpusError(f"cannot write {out}: {err.strerror or err} in {folder}") from None


def write_manifest(out: Path, record: dict[str, Any]) -> None:
    """The manifest beside ``out``, written atomically; ``CorpusError`` when it would be over ``MAX_MANIFEST_BYTES``
    (the app would refuse it)."""
    text = json.dumps(record, indent=1, ensure_ascii=False) + "\n"
    if len(text.encode("utf-8")) > MAX_MANIFEST_BYTES:
        raise CorpusError(f"the manifest would be {len(text.encode('utf-8')):,} bytes, over the "
                          f"{MAX_MANIFEST_BYTES:,} the app reads")
    atomic_write(manifest_path(out), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The manifest beside ``out`` as a dict; None when absent, unreadable or not a JSON object."""
    try:
        data = read_json(manifest_path(out), MAX_MANIFEST_BYTES)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def table_problem(out: Path, run: str, rows: int, no_inputs: bool) -> str | None:
    """None when ``out`` is this run's finished table: its manifest has the fingerprint ``run``, ``rows`` rows,
    the same ``no_inputs`` and the table's own sha256 and size (the table was written whole before it); else why
    not, in a few words (``"absent"`` when there is no table)."""
    if not out.exists():
        return "absent"
    manifest = read_manifest(out)
    if manifest is None:
        return f"{out} exists without a readable manifest ({manifest_path(out).name})"
    if manifest.get("fingerprint") != run:
        return f"{out} was written by another run (another model, input or settings)"
    if manifest.get("rows") != rows or manifest.get("table") != file_digest(out):
        return f"{out} does not match its manifest (another hash or number of rows: changed, or left by a stop)"
    if manifest.get("no_inputs") != no_inputs:
        return f"{out} holds this run's rows written {'with' if manifest.get('no_inputs') else 'without'} " \
               "--no-inputs"
    return None


def decide(out: Path, run_id: str, lines: int, no_inputs: bool, overwrite: bool,
           seen: Sequence[dict[str, Any]]) -> str:
    """Rank 0: what this start does, from the table, its manifest and what every rank's parts hold (``seen``):
    a message when the table is already complete; ``""`` to compute (resuming this run's parts). A table of another
    run, a table that does not match its manifest or parts of another run, without ``--overwrite``: a
    ``CorpusError`` saying what was found."""
    problem = table_problem(out, run_id, lines, no_inputs)
    foreign = [what for ranks in seen for what in ranks["foreign"]]
    found = ", ".join(foreign[:2]) + (f", and {len(foreign) - 2} more" if len(foreign) > 2 else "")
    if problem is None and not overwrite:
        left = f"; {parts_dir(out)} holds parts of another run, left as they are ({found})" if foreign else ""
        return f"{out} is already complete ({lines} rows; its manifest names this run and the table's sha256): " \
               f"nothing to do{left}"
    if foreign and not overwrite:
        raise CorpusError(f"{parts_dir(out)} holds rows of another run ({found}): finish that run with its own "
                          "command, or pass --overwrite to delete them and start this one")
    if problem not in (None, "absent") and not overwrite and not any(ranks["ours"] for ranks in seen):
        raise CorpusError(f"{problem}: choose another --out, or pass --overwrite")
    return ""


# ------------------------------------------------------------------------------------------------ parts


def not_a_row(row: object, lines: int, schema: pa.Schema) -> bool:
    """Whether a part's line is not a whole row: not an object, a column missing, an ``id`` outside the input, a
    ``flag`` that is no bool, a value of another type than its column's."""
    if not isinstance(row, dict) or not set(schema.names) <= set(row):
        return True
    if not (type(row["id"]) is int and 0 <= row["id"] < lines) or type(row["flag"]) is not bool:
        return True
    for name, kind in zip(schema.names, schema.types):
        value = row[name]
        if value is None:
            continue
        if pa.types.is_boolean(kind):
            ok = type(value) is bool
        elif pa.types.is_integer(kind):
            ok = type(value) is int and -(1 << 63) <= value < 1 << 63
        elif pa.types.is_floating(kind):
            ok = type(value) in (int, float)
        elif pa.types.is_string(kind):
            ok = type(value) is str
        else:
            ok = True
        if not ok:
            return True
    return False


@dataclass
class Part:
    """What one part file holds: ``kind`` ``"ours"`` (this run's fingerprint), ``"foreign"`` (another run's, or
    a first line that names no run) or ``"empty"`` (no whole line: no rows); its rows (ours) and what it is."""

    path: Path
    kind: str
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    what: str = ""


def short(value: object, chars: int = 60) -> str:
    """A value read from a file, for a one-line message: its repr, cut."""
    text = repr(value)
    return text if len(text) <= chars else text[:chars - 3] + "..."


def read_part(path: Path, run: str, lines: int) -> Part:
    """A part file's header and rows (by id; a later line wins). Lines that are not whole rows (torn by a kill,
    cut inside a UTF-8 character, ``[1,2]``, ``null``, ``{}``, a row without ``flag``) are dropped: their batches
    are computed again."""
    with open(path, "rb") as f:
        data = f.read()
    if b"\n" not in data:
        return Part(path, "empty")
    first, *rest = data.split(b"\n")
    try:
        header = json.loads(first.decode("utf-8"))
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("fingerprint") != run:
        described = header.get("run") if isinstance(header, dict) else None
        what = "a first line that names no run"
        if isinstance(described, dict):
            model = described.get("model") if isinstance(described.get("model"), dict) else {}
            data_in = described.get("input") if isinstance(described.get("input"), dict) else {}
            what = (f"model {short(model.get('name'))}, {short(data_in.get('lines'))} input lines, fingerprint "
                    f"{short(header.get('fingerprint'), 14)}")
        rows = len(rest) - 1 if data.endswith(b"\n") else len(rest)  # lines after the first
        return Part(path, "foreign", what=f"{path.name}: {rows} rows, {what}")
    schema = arrow_schema()
    rows: dict[int, dict[str, Any]] = {}
    for line in rest:
        try:
            row = json.loads(line.decode("utf-8"))
        except ValueError:  # a torn line, bytes that are not UTF-8, the final empty string
            continue
        if not not_a_row(row, lines, schema):
            rows[row["id"]] = row
    return Part(path, "ours", rows)


def scan_parts(out: Path, run: str, lines: int) -> list[Part]:
    """Every part file in ``out``'s parts folder that this machine sees, read (nothing changed)."""
    folder = parts_dir(out)
    return [read_part(path, run, lines) for path in sorted(folder.glob(PART_GLOB))] if folder.is_dir() else []


def repair_part(path: Path) -> None:
    """Cut a part file after its last whole line (a run killed mid-write leaves half a line; a part with no whole
    line is emptied), so that appending goes on from a line's start."""
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with open(path, "r+b") as f:
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())


def append_rows(f: Any, rows: Sequence[dict[str, Any]]) -> None:
    """One batch's rows, written at once and flushed to the disk (a kill loses at most this batch)."""
    f.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    f.flush()
    os.fsync(f.fileno())
