"""Joining back the sources and references a shipped table holds without (no Streamlit here).

The project never commits Multi30k's lines, so a shipped table (``checkpoints/<name>/tables/<split>.parquet``, made
with ``python -m transformer.corpus --no-inputs``) holds line ids, translations and signals only; :func:`join_inputs`
reads the lines back by ``id`` from a copy of the data set (``$ATTN_DATA_DIR``, else ``data/multi30k``) when one is
there, and only when it is the very file the table was made from. The manifest that names the file may come from a
stranger, so:

- the file is ``<split>.<lang>`` with the split and the language of a fixed pattern (letters, digits, ``_``, ``-``),
  a regular file directly inside the data folder once resolved, of at most ``MAX_INPUT_BYTES`` (never a FIFO or a
  device: :mod:`app.limits.safe_read`);
- its bytes' sha256 must equal the manifest's record of the whole file (``input.files.source`` and, when the table
  had references and the folder has the file, ``input.files.reference``: ``{"name", "sha256", "bytes"}``). A
  manifest written before those records is checked with its digest of the lines it read (``input.sha256``), which
  needs the reference file too when the table had references.

Anything else: no join, and a note that says why (naming the file that differs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformer import cli

from ..limits import safe_read
from ..models import catalog

# where the README's `python -m transformer.data --download data/multi30k` puts it
MAX_INPUT_BYTES = 16 * 2**20  # a data file larger than this is not read (Multi30k's largest, train.de: 2.2 MB)
MAX_INPUT_LINES = 1_000_000
NAME_PART = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a split or a language, as a file name holds it
SHA256 = re.compile(r"[0-9a-f]{64}")
ONLY_IDS = "Only line ids, translations and signals are shown."


def data_roots() -> list[Path]:
    """Where a copy of the data set may be, in order: ``$ATTN_DATA_DIR``, ``data/multi30k`` in the working directory,
    and in the repository."""
    roots = [os.environ.get("ATTN_DATA_DIR", "").strip(), cli.DEFAULT_DATA_DIR,
             str(catalog.REPO_ROOT / cli.DEFAULT_DATA_DIR)]
    return [Path(r) for r in dict.fromkeys(roots) if r]


def _shown(value: object) -> str:
    """A manifest's value as a note names it: short, on one line (the view shows notes as text, never Markdown)."""
    text = " ".join(str(value).split())
    return text if len(text) <= 40 else text[:39] + "…"


def file_record(value: object) -> dict | None:
    """A manifest's record of an input file (``{"name", "sha256", "bytes"}``) when well formed, else None."""
    if not isinstance(value, dict):
        return None
    name, digest, size = value.get("name"), value.get("sha256"), value.get("bytes")
    if (isinstance(name, str) and isinstance(digest, str) and SHA256.fullmatch(digest) and isinstance(size, int)
            and not isinstance(size, bool) and size >= 0):
        return {"name": name, "sha256": digest, "bytes": size}
    return None


class Refused(Exception):
    """A data file that must not be joined; the message is the note (it names the file)."""


def find(roots: Sequence[Path], name: str) -> tuple[Path, Path] | None:
    """The first root that has something called ``name`` directly inside it: (the root, resolved; the path), or
    None."""
    for root in roots:
        try:
            folder = root.resolve(strict=True)
            os.lstat(folder / name)
        except (OSError, RuntimeError):  # no such folder or file; a symlink loop
            continue
        return folder, folder / name
    return None


def read_lines(folder: Path, name: str, record: dict | None) -> tuple[list[str], str]:
    """The lines of ``folder/name`` (as ``transformer.data`` reads a corpus) and the sha256 of its bytes, when it
    is a regular file directly inside ``folder`` once resolved, of the size ``record`` says (when given); else
    :class:`Refused` naming it."""
    path = folder / name
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise Refused(f"{name} in the data folder cannot be read") from None
    if resolved.parent != folder:
        raise Refused(f"{name} in the data folder points outside it, so it is not read")
    if record is not None:
        try:
            size = os.stat(resolved).st_size
        except OSError:
            size = -1
        if size != record["bytes"]:
            raise Refused(f"{name} in the data folder is not the file the table was made from ({size:,} bytes, "
                          f"not {record['bytes']:,})")
    try:
        raw = safe_read.read_regular(resolved, MAX_INPUT_BYTES, f"{name} in the data folder")
    except (safe_read.FileRefused, FileNotFoundError) as err:
        raise Refused(str(err) if isinstance(err, safe_read.FileRefused) else f"{name} vanished") from None
    digest = hashlib.sha256(raw).hexdigest()
    if record is not None and digest != record["sha256"]:
        raise Refused(f"{name} in the data folder is not the file the table was made from (its sha256 differs)")
    if raw.count(b"\n") > MAX_INPUT_LINES:
        raise Refused(f"{name} in the data folder has over {MAX_INPUT_LINES:,} lines")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(f"{name} in the data folder is not UTF-8 text") from None
    lines = text.split("\n")  # as transformer.data reads a corpus: not splitlines() (U+2028 is no line break)
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines], digest


def join_inputs(table: Any, roots: Sequence[Path] | None = None) -> Any:
    """The table (``app.analysis.tables.Table``) with the sources and references it lacks read back by ``id`` from
    ``{split}.{src_lang}`` and ``{split}.{tgt_lang}`` in the first of ``roots`` (default :func:`data_roots`) that
    has the source file, when it is the file the manifest records; else the table as it is with a note that says
    in plain words why the sources stay missing."""
    frame, manifest = table.frame, table.manifest
    if frame.empty or frame["source"].notna().all():
        return table
    note = lambda text: dataclasses.replace(table, inputs_note=text)  # noqa: E731
    given = manifest.get("input") if isinstance(manifest.get("input"), dict) else {}
    split, src, tgt = (given.get(k) for k in ("split", "src_lang", "tgt_lang"))
    if not split or not src:
        return note("This table ships without its source sentences, and its manifest does not say which data set "
                    f"they come from, so they cannot be joined back. {ONLY_IDS}")
    odd = [str(v) for v in (split, src, tgt) if v is not None and not (isinstance(v, str) and NAME_PART.fullmatch(v))]
    if odd:
        return note(f"The sources are missing: the manifest names its input {_shown(odd[0])!r}, not a data set's "
                    f"file name (letters, digits, _ and - only), so nothing is read. {ONLY_IDS}")
    files = given.get("files") if isinstance(given.get("files"), dict) else None
    source_name = f"{split}.{src}"
    reference_name = f"{split}.{tgt}" if tgt else None
    roots = data_roots() if roots is None else list(roots)
    found = find(roots, source_name)
    if found is None:
        return note(f"The source sentences are not on this server. The project does not redistribute Multi30k, so "
                    f"this table holds only line ids, translations and signals, and no copy of {source_name} was "
                    "found in the data folder (ATTN_DATA_DIR, else data/multi30k). Get it with: python -m "
                    "transformer.data --download data/multi30k")
    folder = found[0]
    try:
        if files is not None:
            sources, references, missing = _checked_files(folder, files, source_name, reference_name)
        else:
            sources, references, missing = _checked_digest(folder, given, source_name, reference_name)
    except Refused as err:
        return note(f"The sources are not joined: {err}. {ONLY_IDS}")
    ids = frame["id"].to_numpy()
    frame = frame.copy()
    inside = (ids >= 0) & (ids < len(sources))
    frame["source"] = [sources[i] if ok else s for i, ok, s in zip(ids, inside, frame["source"])]
    if references is not None:
        inside = (ids >= 0) & (ids < len(references))
        frame["reference"] = [references[i] if ok else r for i, ok, r in zip(ids, inside, frame["reference"])]
    outside = int((~((ids >= 0) & (ids < len(sources)))).sum())
    said = [f"{outside:,} lines have no source: their ids are past the end of {source_name}."] if outside else []
    said += [f"The references stay empty: {reference_name} is not in the data folder."] if missing else []
    return dataclasses.replace(table, frame=frame, inputs_note=" ".join(said) or None)


def _checked_files(folder: Path, files: dict, source_name: str,
                   reference_name: str | None) -> tuple[list[str], list[str] | None, bool]:
    """Sources and references (None: none recorded, or the reference file absent: then the last value is True)
    checked against the manifest's ``input.files`` records."""
    source = file_record(files.get("source"))
    if source is None or source["name"] != source_name:
        raise Refused(f"the manifest's record of {source_name} (its name, sha256 and size) is missing or not "
                      "well formed, so the file cannot be checked")
    sources, _ = read_lines(folder, source_name, source)
    if files.get("reference") is None or reference_name is None:
        return sources, None, False
    reference = file_record(files.get("reference"))
    if reference is None or reference["name"] != reference_name:
        raise Refused(f"the manifest's record of {reference_name} is not well formed, so it cannot be checked")
    if find([folder], reference_name) is None:
        return sources, None, True
    references, _ = read_lines(folder, reference_name, reference)
    if len(references) != len(sources):
        raise Refused(f"{reference_name} has {len(references):,} lines, not one per line of {source_name}")
    return sources, references, False


def _checked_digest(folder: Path, given: dict, source_name: str,
                    reference_name: str | None) -> tuple[list[str], list[str] | None, bool]:
    """Sources and references checked against an older manifest's digest of the lines it read (``input.sha256``
    over the first ``input.lines``, the references too when it had them: then their file must be here)."""
    if not isinstance(given.get("sha256"), str) or not isinstance(given.get("lines"), int):
        raise Refused(f"the manifest records no hash of {source_name}, so the file cannot be checked (make the table "
                      "again with python -m transformer.corpus)")
    sources, _ = read_lines(folder, source_name, None)
    references = None
    if given.get("references") and reference_name is not None:
        if find([folder], reference_name) is None:
            raise Refused(f"{source_name} cannot be checked without {reference_name}, which the manifest's digest "
                          "covers and the data folder lacks")
        references, _ = read_lines(folder, reference_name, None)
    if isinstance(given.get("file_lines"), int) and len(sources) != given["file_lines"]:
        raise Refused(f"{source_name} in the data folder has {len(sources):,} lines, not the "
                      f"{given['file_lines']:,} of the file the table was made from")
    if not same_input(given, sources, references):
        both = f"{source_name} or {reference_name}" if references is not None else source_name
        raise Refused(f"{both} in the data folder is not the file the table was made from (its lines differ)")
    return sources, references, False


def same_input(given: dict, sources: list[str], references: list[str] | None) -> bool:
    """Whether ``sources`` (and ``references``) are the lines an older manifest's ``input`` recorded: its ``sha256``
    (``transformer.interpret.corpus.content_hash`` over the first ``lines`` sources, then the references when it
    had them). False whenever that cannot be checked: no digest, or references recorded and none given."""
    from transformer.interpret.corpus import content_hash  # torch.distributed and tqdm: only for a shipped table

    digest, lines = given.get("sha256"), given.get("lines")
    if not isinstance(digest, str) or not isinstance(lines, int) or isinstance(lines, bool) or lines > len(sources):
        return False
    if given.get("references") and (references is None or len(references) < lines):
        return False
    used = references[:lines] if given.get("references") else None
    return content_hash(sources[:lines], used) == digest

