"""A whole test set as one table (``python -m transformer.corpus``): finding a checkpoint's shipped tables, reading
one with its manifest, and the presets and pages of the "Whole test set" view (no Streamlit here; joining back the
sources and references a table ships without: :mod:`app.analysis.table_inputs`).

A table is a parquet file with one row per input line (the columns of ``transformer.interpret.table.COLUMNS`` are
a contract) and beside it ``X.manifest.json`` (model, settings, input, versions, columns, rows). A checkpoint's
folder may come from a stranger, so a table file is read as one that may be hostile: its footer first (rows,
columns, types, decompressed sizes), each bounded before any data is read, then the contract's columns only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transformer.checkpoint.files import read_json
from transformer.interpret.columns import COLUMNS
from transformer.interpret.corpus_files import MAX_MANIFEST_BYTES
from transformer.interpret.flagging import FlagRule

from ..limits import safe_read
from .table_inputs import data_roots, join_inputs, same_input  # noqa: F401 (the view's one import)

TABLES = "tables"  # a checkpoint's folder of shipped tables
TEXTS = ("source", "translation", "reference")
# the view's columns first; the contract's others (transformer.interpret.table.COLUMNS) after
VIEW_COLUMNS = ("id", *TEXTS, "score", "seq_logprob", "chrf", "bleu", "source_share", "source_share_min",
                "eos_attention", "repetition", "min_piece_logprob", "omission", "length_ratio", "hit_max_len", "unk",
                "flag", "flag_score")
REQUIRED = ("id", "translation")
TEXT_COLUMNS = (*TEXTS, "note")  # the contract's columns of text; of true / false; the others numbers
BOOL_COLUMNS = ("flag", "hit_max_len", "truncated")
# Bounds on a table file, each checked before any of its data is read (a Multi30k test set's table: 1,000 rows,
# 20 columns, one row group, about 110 kB, 0.3 MB decompressed; WMT's and FLORES' test sets: 1,000-3,000 lines)
MAX_TABLE_BYTES = 64 * 2**20
MAX_ROWS = 20_000  # beyond this the view's charts alone would send more than about 1 MB
MAX_DECODED_BYTES = 64 * 2**20  # the columns read, decompressed (the footer's uncompressed sizes)
MAX_COLUMNS, MAX_ROW_GROUPS = 256, 1_000
MAX_ID = 2**31 - 1
MAX_CELL_CHARS = 1_000  # a text longer than this is cut (a Multi30k caption: at most about 300 characters)
PAGE_BYTES = 1_000_000  # what one page of the table sends at most, about (every chart's bound)
PAGE_ROWS = 1_000  # and its rows at most

# The columns a histogram can show: column -> its one plain sentence (transformer.interpret.columns.COLUMNS)
SIGNAL_HELP: dict[str, str] = {name: COLUMNS[name].help for name in (
    "chrf", "bleu", "source_share", "source_share_min", "seq_logprob", "min_piece_logprob", "omission", "score",
    "eos_attention", "repetition", "length_ratio", "flag_score")}
SHARES = ("source_share", "source_share_min", "eos_attention")  # shares in [0, 1], drawn as bars


@dataclass(frozen=True)
class Preset:
    """A way to look at the table: its label, the rows it keeps and their order."""

    label: str
    sort: str | None  # column; None: by id
    only_flagged: bool = False
    descending: bool = False  # the largest first (a signal whose high end is suspicious)
    help: str = ""  # what the preset finds, in plain words
    then: str | None = None  # a signal that orders the lines ``sort`` ties (its suspicious end first), before the id


PRESETS: dict[str, Preset] = {
    "all": Preset("All lines", None, help="every line, in the input's order"),
    "suspicious": Preset("Most suspicious", "flag_score", descending=True,
                         help="the lines whose most unusual signal is furthest out first (the flag's score; a "
                              "tie: the least likely output first)", then="seq_logprob"),
    "worst-chrf": Preset("Worst chrF", "chrf", help="the lines furthest from their reference first"),
    "lowest-share": Preset("Lowest source share", "source_share",
                           help="the lines that take least from the source first (detached output)"),
    "omissions": Preset("Possible omissions", "omission", descending=True,
                        help="the lines whose ending surprises the model most first (part of the source may be "
                             "left untranslated)"),
    "wrong-word": Preset("One unlikely word", "min_piece_logprob",
                         help="the lines with the least likely single output piece first (one word may be wrong)"),
    "repeats": Preset("Repeats", "repetition", descending=True, help="the lines that repeat themselves most first"),
    "flagged": Preset("Flagged", "flag_score", only_flagged=True, descending=True,
                      help="only the lines that may be hallucinations", then="seq_logprob"),
}


class TableError(Exception):
    """A table that cannot be shown; the message says why in plain words."""


@dataclass(frozen=True)
class Table:
    """One table as the view shows it: its rows, its manifest ({} without one), a note on its inputs (why the
    sources are missing, or None) and notes on what reading it left out or cut."""

    frame: pd.DataFrame
    manifest: dict
    inputs_note: str | None = None
    notes: tuple[str, ...] = ()


def shipped_tables(checkpoint_dir: str | Path | None) -> dict[str, Path]:
    """The tables beside a checkpoint: ``<dir>/tables/<name>.parquet``, by name (the split), sorted."""
    if checkpoint_dir is None:
        return {}
    folder = Path(checkpoint_dir) / TABLES
    try:
        return {p.stem: p for p in sorted(folder.glob("*.parquet")) if p.is_file()}
    except OSError:
        return {}


def manifest_path(table: Path) -> Path:
    """``X.manifest.json`` beside ``X.parquet``."""
    return table.with_name(table.name.removesuffix(".parquet") + ".manifest.json")


def read_manifest(table: Path) -> dict:
    """The table's manifest, or {} when it is absent or unusable (a regular file only, read_json's; size bounded as
    the corpus command bounds what it writes, ``MAX_MANIFEST_BYTES``)."""
    path = manifest_path(table)
    try:
        data = read_json(path, MAX_MANIFEST_BYTES)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def contract() -> list[str]:
    """The columns of ``python -m transformer.corpus``'s tables, in its order (the keys of
    ``transformer.interpret.table.COLUMNS``): the only ones read."""
    from transformer.interpret.table import COLUMNS as WRITTEN  # pyarrow and sacrebleu: only once a table is read

    return list(WRITTEN)


def read_table(path: str | Path) -> Table:
    """A table file and its manifest, with every contract column present (a missing signal: empty; a missing
    ``id`` or ``translation``: :class:`TableError`). Only a regular file of at most ``MAX_TABLE_BYTES``; its rows,
    columns and types are read from the parquet footer before any data and the table refused over ``MAX_ROWS`` or
    ``MAX_DECODED_BYTES``; only the contract's columns are read, one of the wrong type left out and a text cut to
    ``MAX_CELL_CHARS``, each with a note."""
    path = Path(path)
    what = f"the table {path.name}"
    try:
        with safe_read.open_regular(path, MAX_TABLE_BYTES, what) as f:
            frame, notes = _read_parquet(f, path.name)
    except FileNotFoundError:
        raise TableError(f"{what} cannot be read: there is no such file") from None
    except safe_read.FileRefused as err:
        raise TableError(str(err)) from None
    return Table(normalise(frame, path.name), read_manifest(path), notes=tuple(notes))


def _kind(kind: pa.DataType) -> str:
    """How a column's type reads: ``text``, ``bool``, ``number``, ``empty`` (all null), or ``other``."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_null(kind):
        return "empty"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "text"
    if pa.types.is_boolean(kind):
        return "bool"
    return "number" if pa.types.is_integer(kind) or pa.types.is_floating(kind) else "other"


def expected_kind(column: str) -> str:
    return "text" if column in TEXT_COLUMNS else "bool" if column in BOOL_COLUMNS else "number"


KIND_WORDS = {"text": "text", "bool": "true / false", "number": "numbers", "other": "something else"}


def plan_columns(schema: pa.Schema, name: str) -> tuple[list[str], list[str]]:
    """The contract's columns of a table file to read (present once, of their kind, or all empty), and a note for
    each one left out; :class:`TableError` when ``id`` or ``translation`` cannot be read."""
    wanted, notes = [], []
    for column in contract():
        found = schema.get_all_field_indices(column)
        if not found:
            continue
        kind, expected = _kind(schema.field(found[0]).type), expected_kind(column)
        why = (f"appears {len(found)} times" if len(found) > 1 else
               None if kind in (expected, "empty") else f"holds {KIND_WORDS[kind]}, not {KIND_WORDS[expected]}")
        if why is None:
            wanted.append(column)
        elif column in REQUIRED:
            raise TableError(f"{name} cannot be shown: its {column} column {why}")
        else:
            notes.append(f"its {column} column {why}: left out")
    return wanted, notes


def decoded_bytes(metadata: pq.FileMetaData, columns: Sequence[str]) -> int:
    """What ``columns`` take once decompressed, from the footer: each row group's column chunks'
    ``total_uncompressed_size`` (dictionary pages included; the text a dictionary repeats is bounded apart)."""
    index = {metadata.schema.column(j).path: j for j in range(metadata.num_columns)}
    chosen = [index[c] for c in columns if c in index]
    return sum(metadata.row_group(g).column(j).total_uncompressed_size
               for g in range(metadata.num_row_groups) for j in chosen)


def _read_parquet(f: BinaryIO, name: str) -> tuple[pd.DataFrame, list[str]]:
    """The contract's columns of an open parquet file, planned from its footer (:func:`read_table`)."""
    try:
        footer = pq.ParquetFile(f)  # the footer only: no data read yet
        metadata = footer.metadata
        if metadata.num_columns > MAX_COLUMNS or metadata.num_row_groups > MAX_ROW_GROUPS:
            raise TableError(f"{name} has {metadata.num_columns:,} columns in {metadata.num_row_groups:,} row "
                             f"groups, more than a table of transformer.corpus (at most {MAX_COLUMNS} and "
                             f"{MAX_ROW_GROUPS:,})")
        rows = max(metadata.num_rows, sum(metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)))
        if rows > MAX_ROWS:
            raise TableError(f"{name} has {rows:,} rows, over the {MAX_ROWS:,} this page shows")
        schema = footer.schema_arrow
        wanted, notes = plan_columns(schema, name)
        size = decoded_bytes(metadata, wanted)
        if size > MAX_DECODED_BYTES:
            raise TableError(f"{name} holds {safe_read.megabytes(size)} of data once decompressed, over the "
                             f"{safe_read.megabytes(MAX_DECODED_BYTES)} this page reads")
        texts = [c for c in wanted if _kind(schema.field(c).type) == "text"]
        # texts stay dictionaries (each distinct text once) until cut: a repeated long text costs its length once
        data = pq.ParquetFile(f, metadata=metadata, read_dictionary=texts).read(columns=wanted, use_threads=False)
        if data.num_rows > MAX_ROWS:
            raise TableError(f"{name} has {data.num_rows:,} rows, over the {MAX_ROWS:,} this page shows")
        cut = 0
        for column in texts:
            shortened, n = cut_texts(data.column(column))
            data, cut = data.set_column(data.schema.get_field_index(column), column, shortened), cut + n
        frame = data.to_pandas()
    except TableError:
        raise
    except Exception as err:  # pyarrow's errors are many kinds (and a planted file finds them all): one message
        raise TableError(f"{name} is not a readable parquet table ({type(err).__name__})") from None
    if cut:
        notes.append(f"{cut:,} texts longer than {MAX_CELL_CHARS:,} characters are cut to that")
    return frame, notes


def cut_texts(column: pa.ChunkedArray) -> tuple[pa.ChunkedArray, int]:
    """A column of texts (dictionary chunks) with every text cut to ``MAX_CELL_CHARS`` characters and "…", and how
    many of its rows were cut."""
    chunks, cut = [], 0
    for chunk in column.chunks:
        if not pa.types.is_dictionary(chunk.type):
            chunk = chunk.cast(pa.string()).dictionary_encode()
        values = chunk.dictionary
        long = pc.greater(pc.utf8_length(values), MAX_CELL_CHARS)
        if pc.any(long).as_py():
            cut += int(pc.sum(pc.take(long, chunk.indices)).as_py() or 0)
            short = pc.binary_join_element_wise(pc.utf8_slice_codeunits(values, 0, MAX_CELL_CHARS), "…", "")
            values = pc.if_else(long, short, values)
        chunks.append(pa.DictionaryArray.from_arrays(chunk.indices, values.cast(pa.string())))
    if not chunks:
        return column, 0
    return pa.chunked_array(chunks, chunks[0].type), cut


def normalise(frame: pd.DataFrame, name: str = "the table") -> pd.DataFrame:
    """The contract's columns, in the view's order (``VIEW_COLUMNS`` first; a missing one added empty), nothing else;
    ids whole numbers from 0 (else :class:`TableError`), ``flag`` true / false, texts str or None."""
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise TableError(f"{name} is not a table of transformer.corpus: it has no {' or '.join(missing)} column")
    if len(frame) > MAX_ROWS:
        raise TableError(f"{name} has {len(frame):,} rows, over the {MAX_ROWS:,} this page shows")
    frame = frame.copy()
    for column in VIEW_COLUMNS:
        if column not in frame.columns:
            frame[column] = None if column in TEXTS else (False if column == "flag" else np.nan)
    ids = pd.to_numeric(frame["id"], errors="coerce").astype("float64").to_numpy()
    bad = ~(np.isfinite(ids) & (ids >= 0) & (ids <= MAX_ID))
    bad[~bad] = ids[~bad] != np.floor(ids[~bad])
    if bad.any():
        raise TableError(f"{name} has line ids that are not whole numbers from 0 ({int(bad.sum()):,} of "
                         f"{len(ids):,} rows, the first at row {int(np.argmax(bad)):,})")
    frame["id"] = ids.astype("int64")
    flags = frame["flag"]
    frame["flag"] = flags.to_numpy(dtype=bool) if flags.dtype == bool else np.array(
        [isinstance(v, (bool, np.bool_)) and bool(v) for v in flags], dtype=bool)
    for column in (*TEXTS, "note"):
        if column in frame.columns:
            frame[column] = frame[column].astype("object").where(frame[column].notna(), None)
    order = [*VIEW_COLUMNS, *(c for c in contract() if c not in VIEW_COLUMNS)]
    return frame[[c for c in order if c in frame.columns]].reset_index(drop=True)


def matches(text: object, needle: str, whole_words: bool = False) -> bool:
    """Whether ``text`` contains ``needle`` (case-insensitive, plain text); with ``whole_words``, only where it is not
    part of a longer word ("dog" is not found in "hotdog")."""
    if text is None:
        return False
    hay, needle = str(text).casefold(), needle.casefold()
    if not whole_words:
        return needle in hay
    return re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", hay) is not None


def apply_preset(frame: pd.DataFrame, preset: str, find: str = "", whole_words: bool = False) -> pd.DataFrame:
    """The rows a preset keeps, in its order (missing values last; ties by its ``then`` signal, suspicious end
    first, then by id), those whose texts contain ``find`` (:func:`matches`) when given."""
    chosen = PRESETS.get(preset, PRESETS["all"])
    rows = frame[frame["flag"]] if chosen.only_flagged else frame
    if find.strip():
        hit = np.zeros(len(rows), dtype=bool)
        for column in TEXTS:
            hit |= np.array([matches(v, find.strip(), whole_words) for v in rows[column]], dtype=bool)
        rows = rows[hit]
    if chosen.sort is None:
        return rows.sort_values(["id"], kind="stable").reset_index(drop=True)
    keys = [chosen.sort, *([chosen.then] if chosen.then else []), "id"]
    ascending = [not chosen.descending, *([COLUMNS[chosen.then].direction == "low"] if chosen.then else []), True]
    return rows.sort_values(keys, ascending=ascending, na_position="last", kind="stable").reset_index(drop=True)


def pages(frame: pd.DataFrame, columns: Sequence[str], most_bytes: int = PAGE_BYTES,
          most_rows: int = PAGE_ROWS) -> list[int]:
    """Where each page of ``frame``'s rows starts (the first at 0, one past the last row at the end): as many rows
    as fit ``most_bytes`` (each row's ``columns`` as sent: texts by their UTF-8 bytes, anything else 8 bytes a cell)
    and ``most_rows``, at least one."""
    size = np.full(len(frame), 8.0 * len(columns))
    for column in columns:
        if column in frame.columns and not (pd.api.types.is_numeric_dtype(frame[column])
                                            or pd.api.types.is_bool_dtype(frame[column])):
            size += np.fromiter((len(v.encode("utf-8", "replace")) if isinstance(v, str) else 0
                                 for v in frame[column]), dtype=float, count=len(frame))
    ends = np.cumsum(size)
    starts = [0]
    while starts[-1] < len(frame):
        first = starts[-1]
        fit = int(np.searchsorted(ends, (ends[first - 1] if first else 0.0) + most_bytes, side="right"))
        starts.append(max(first + 1, min(fit, first + most_rows, len(frame))))
    return starts


def rule_of(manifest: dict) -> dict:
    """The flag's rule a table was made with (``model`` -> ``flag_rule`` of its manifest: ``{"any": [{"column",
    "op", "value"}, ...], "rule": "..."}``), or {} when it has none or one ``FlagRule.from_json`` refuses
    (:func:`rule_problem`)."""
    rule = _manifest_rule(manifest)
    return rule if rule is not None and rule_problem(manifest) is None else {}


def _manifest_rule(manifest: dict) -> object | None:
    model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
    return model.get("flag_rule", manifest.get("flag_rule"))


def rule_problem(manifest: dict) -> str | None:
    """Why the manifest's flag rule is refused (one short line; over ``MAX_CONDITIONS`` conditions, a column the
    table lacks, a number no float holds, ...), or None: it reads, or there is none."""
    rule = _manifest_rule(manifest)
    if rule is None:
        return None
    try:
        FlagRule.from_json(rule)
    except ValueError as err:
        return str(err)[:200]
    return None


def thresholds(rule: dict) -> dict[str, float]:
    """The threshold of each column the flag's ``rule`` tests (its first condition on the column), and of
    ``flag_score`` when the rule has a score."""
    found: dict[str, float] = {}
    score = rule.get("score")
    if isinstance(score, dict) and isinstance(score.get("threshold"), (int, float)) \
            and not isinstance(score.get("threshold"), bool) and math.isfinite(score["threshold"]):
        found["flag_score"] = float(score["threshold"])
    for condition in rule.get("any", []) if isinstance(rule.get("any"), list) else []:
        if not isinstance(condition, dict):
            continue
        column, value = condition.get("column"), condition.get("value")
        if (isinstance(column, str) and isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value)):
            found.setdefault(column, float(value))
    return found


def pasted_lines(text: str, most: int) -> tuple[list[str], int]:
    """The non-empty lines of a pasted list (stripped), the first ``most`` of them, and how many there were."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    return lines[:most], len(lines)


def short(value: object, most: int = 80) -> str:
    """A manifest's value as one short line of text (a planted manifest may hold a megabyte in a name)."""
    text = " ".join(str(value).split())
    return text if len(text) <= most else text[:most - 1] + "…"


def table_caption(manifest: dict, rows: int) -> str:
    """One line on where a table comes from: its rows, input, model and decoding settings, as the manifest says
    (each value cut to 80 characters)."""
    given = manifest.get("input") if isinstance(manifest.get("input"), dict) else {}
    parts = [f"{rows:,} lines"]
    if given.get("split"):
        pair = "-".join(short(given[k]) for k in ("src_lang", "tgt_lang") if given.get(k))
        parts.append(f"of {short(given['split'])}" + (f" ({pair})" if pair else ""))
    model = manifest.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    if isinstance(name, str) and name:
        parts.append(f"model {short(name)}")
    settings = manifest.get("settings") if isinstance(manifest.get("settings"), dict) else {}
    decoding = ", ".join(f"{k} {short(settings[k])}" for k in ("beam", "beam_size", "alpha") if k in settings)
    if decoding:
        parts.append(decoding)
    return " · ".join(parts)
