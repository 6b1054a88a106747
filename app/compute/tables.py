"""A whole test set as one table (``python -m transformer.corpus``): finding a checkpoint's shipped tables, reading
one with its manifest, joining back the sources and references a table ships without, and the presets of the
"Whole test set" view (no Streamlit here).

A table is a parquet file with one row per input line (the columns ``COLUMNS`` are a contract) and beside it
``X.manifest.json`` (model, settings, input, versions, columns, rows). A shipped table
(``checkpoints/<name>/tables/<split>.parquet``) holds line ids, translations and signals only: the project never
commits Multi30k's lines, so :func:`join_inputs` reads them back by ``id`` from a copy of the data set
(``$ATTN_DATA_DIR``, else ``data/multi30k``) when one is there.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from transformer import cli
from transformer.checkpoint.files import MAX_METADATA_BYTES, read_json

from . import catalog

DATA_DIR = cli.DEFAULT_DATA_DIR
TABLES = "tables"  # a checkpoint's folder of shipped tables
TEXTS = ("source", "translation", "reference")
COLUMNS = ("id", *TEXTS, "score", "seq_logprob", "chrf", "bleu", "source_share", "source_share_min", "eos_attention",
           "repetition", "length_ratio", "hit_max_len", "unk", "flag")
MAX_TABLE_BYTES = 256 * 2**20  # a table file larger than this is not read (a test set's is well under 1 MB)
MAX_ROWS = 1_000_000

# The signals a histogram can show: column -> how the page names it (plain words, the column's name after it)
SIGNALS: dict[str, str] = {
    "chrf": "chrF against the reference (0-100)",
    "bleu": "sentence BLEU against the reference (0-100)",
    "source_share": "share of the output from the source (ALTI+, mean over the output)",
    "source_share_min": "share from the source at the output's weakest step (ALTI+)",
    "seq_logprob": "mean log-probability per output piece",
    "score": "the search's own score",
    "eos_attention": "cross-attention's mean share on </s>",
    "repetition": "the longest run of one repeated unit in the output",
    "length_ratio": "output length / source length",
}
SHARES = ("source_share", "source_share_min", "eos_attention")  # shares in [0, 1], drawn as bars


@dataclass(frozen=True)
class Preset:
    """A way to look at the table: its label, the rows it keeps and their order."""

    label: str
    sort: str | None  # column, ascending; None: by id
    only_flagged: bool = False


PRESETS: dict[str, Preset] = {
    "all": Preset("All lines", None),
    "worst-chrf": Preset("Worst chrF", "chrf"),
    "lowest-share": Preset("Lowest source share", "source_share"),
    "flagged": Preset("Flagged", "source_share", only_flagged=True),
}


class TableError(Exception):
    """A table that cannot be shown; the message says why in plain words."""


@dataclass(frozen=True)
class Table:
    """One table as the view shows it: its rows, its manifest ({} without one) and a note on its inputs
    (why the sources are missing, or None)."""

    frame: pd.DataFrame
    manifest: dict
    inputs_note: str | None = None


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
    """The table's manifest, or {} when it is absent or unusable (size and nesting bounded as metadata.json's)."""
    try:
        data = read_json(manifest_path(table), MAX_METADATA_BYTES)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_table(path: str | Path) -> Table:
    """A table file and its manifest, with every contract column present (a missing signal: empty; a missing
    ``id`` or ``translation``: :class:`TableError`)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as err:
        raise TableError(f"the table {path.name} cannot be read: {err.strerror or err}") from None
    if size > MAX_TABLE_BYTES:
        raise TableError(f"the table {path.name} is {size / 2**20:,.0f} MB, over the {MAX_TABLE_BYTES / 2**20:.0f} "
                         "MB this page reads")
    try:
        frame = pd.read_parquet(path)
    except Exception as err:  # pyarrow's errors are many kinds: one message
        raise TableError(f"{path.name} is not a readable parquet table ({type(err).__name__})") from None
    return Table(normalise(frame, path.name), read_manifest(path))


def normalise(frame: pd.DataFrame, name: str = "the table") -> pd.DataFrame:
    """The contract's columns first (a missing signal column added empty), then any others; ids as integers."""
    missing = [c for c in ("id", "translation") if c not in frame.columns]
    if missing:
        raise TableError(f"{name} is not a table of transformer.corpus: it has no {' or '.join(missing)} column")
    if len(frame) > MAX_ROWS:
        raise TableError(f"{name} has {len(frame):,} rows, over the {MAX_ROWS:,} this page shows")
    frame = frame.copy()
    for column in COLUMNS:
        if column not in frame.columns:
            frame[column] = None if column in TEXTS else (False if column == "flag" else np.nan)
    ids = pd.to_numeric(frame["id"], errors="coerce")
    if ids.isna().any():
        raise TableError(f"{name} has line ids that are not numbers")
    frame["id"] = ids.astype("int64")
    frame["flag"] = frame["flag"].fillna(False).astype(bool)
    for column in TEXTS:
        frame[column] = frame[column].astype("object").where(frame[column].notna(), None)
    return frame[list(COLUMNS) + [c for c in frame.columns if c not in COLUMNS]].reset_index(drop=True)


def data_roots() -> list[Path]:
    """Where a copy of the data set may be, in order: ``$ATTN_DATA_DIR``, ``data/multi30k`` in the working directory,
    and in the repository."""
    roots = [os.environ.get("ATTN_DATA_DIR", "").strip(), DATA_DIR, str(catalog.REPO_ROOT / DATA_DIR)]
    return [Path(r) for r in dict.fromkeys(roots) if r]


def _lines(path: Path) -> list[str] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.split("\n")  # as transformer.data reads a corpus: not splitlines() (U+2028 is no line break)
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def join_inputs(table: Table, roots: Sequence[Path] | None = None) -> Table:
    """The table with the sources and references it lacks read back by ``id`` from ``{split}.{src_lang}`` and
    ``{split}.{tgt_lang}`` in the first of ``roots`` (default :func:`data_roots`) that has them with the manifest's
    number of lines; a note says in plain words why they stay missing."""
    frame, manifest = table.frame, table.manifest
    if frame.empty or frame["source"].notna().all():
        return table
    given = manifest.get("input") if isinstance(manifest.get("input"), dict) else {}
    split, src, tgt = (str(given.get(k) or "") for k in ("split", "src_lang", "tgt_lang"))
    if not split or not src:
        return Table(frame, manifest, "This table ships without its source sentences, and its manifest does not say "
                                      "which data set they come from, so only line ids, translations and signals "
                                      "are shown.")
    lines = given.get("file_lines", given.get("lines"))
    exact = isinstance(given.get("file_lines"), int)  # the whole file's lines (``lines``: after --limit)
    roots = data_roots() if roots is None else list(roots)
    for root in roots:
        sources = _lines(root / f"{split}.{src}")
        if sources is None:
            continue
        too_few = max(int(lines) if isinstance(lines, int) else 0, int(frame["id"].max()) + 1)
        if len(sources) < too_few or (exact and len(sources) != lines):  # another file than the table's
            return Table(frame, manifest, f"The sources are missing: {split}.{src} in the data folder has "
                                          f"{len(sources):,} lines, not the {too_few:,} the table was made from, "
                                          "so its lines cannot be matched. Only ids, translations and signals "
                                          "are shown.")
        references = _lines(root / f"{split}.{tgt}") if tgt else None
        if references is not None and len(references) != len(sources):
            references = None
        if not same_input(given, sources, references):
            return Table(frame, manifest, f"The sources are missing: {split}.{src} in the data folder is not the "
                                          "file the table was made from (its lines differ), so its lines cannot be "
                                          "matched. Only ids, translations and signals are shown.")
        ids = frame["id"].to_numpy()
        inside = ids >= 0
        frame = frame.copy()
        frame["source"] = [sources[i] if ok else s for i, ok, s in zip(ids, inside, frame["source"])]
        if references is not None:
            frame["reference"] = [references[i] if ok else r for i, ok, r in zip(ids, inside, frame["reference"])]
        return Table(frame, manifest, None)
    return Table(frame, manifest, f"The source sentences are not on this server. The project does not redistribute "
                                  f"Multi30k, so this table holds only line ids, translations and signals, and no copy "
                                  f"of {split}.{src} was found in the data folder (ATTN_DATA_DIR, else data/multi30k). "
                                  "Get it with: python -m transformer.data --download data/multi30k")


def same_input(given: dict, sources: list[str], references: list[str] | None) -> bool:
    """Whether the data folder's lines are those the table was made from: the manifest's ``sha256`` of its input
    (``transformer.interpret.corpus.content_hash`` over the first ``lines`` sources, then the references when it
    had them), when the manifest has one."""
    from transformer.interpret.corpus import content_hash  # torch.distributed and tqdm: only for a shipped table

    digest, lines = given.get("sha256"), given.get("lines")
    if not isinstance(digest, str) or not isinstance(lines, int):
        return True
    used = references[:lines] if given.get("references") and references is not None else None
    if given.get("references") and used is None:
        return True  # no reference file here: the sources alone cannot be checked against the digest
    return content_hash(sources[:lines], used) == digest


def apply_preset(frame: pd.DataFrame, preset: str, find: str = "") -> pd.DataFrame:
    """The rows a preset keeps, in its order (missing values last, ties by id), those whose texts contain ``find``
    (case-insensitive, plain text) when given."""
    chosen = PRESETS.get(preset, PRESETS["all"])
    rows = frame[frame["flag"]] if chosen.only_flagged else frame
    if find.strip():
        needle = find.strip().casefold()
        hit = np.zeros(len(rows), dtype=bool)
        for column in TEXTS:
            hit |= np.array([needle in str(v).casefold() if v is not None else False for v in rows[column]],
                            dtype=bool)
        rows = rows[hit]
    order = ["id"] if chosen.sort is None else [chosen.sort, "id"]
    return rows.sort_values(order, na_position="last", kind="stable").reset_index(drop=True)


def rule_of(manifest: dict) -> dict:
    """The flag's rule a table was made with (``model`` -> ``flag_rule`` of its manifest: ``{"any": [{"column",
    "op", "value"}, ...], "rule": "..."}``), or {}."""
    model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
    rule = model.get("flag_rule", manifest.get("flag_rule"))
    return rule if isinstance(rule, dict) and isinstance(rule.get("any"), list) else {}


def thresholds(rule: dict) -> dict[str, float]:
    """The threshold of each column the flag's ``rule`` tests (its first condition on the column)."""
    found: dict[str, float] = {}
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


def describe(manifest: dict, rows: int) -> str:
    """One line on where a table comes from: its rows, input, model and decoding settings, as the manifest says."""
    given = manifest.get("input") if isinstance(manifest.get("input"), dict) else {}
    parts = [f"{rows:,} lines"]
    if given.get("split"):
        pair = "-".join(str(given[k]) for k in ("src_lang", "tgt_lang") if given.get(k))
        parts.append(f"of {given['split']}" + (f" ({pair})" if pair else ""))
    model = manifest.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    if isinstance(name, str) and name:
        parts.append(f"model {name}")
    settings = manifest.get("settings") if isinstance(manifest.get("settings"), dict) else {}
    decoding = ", ".join(f"{k} {settings[k]}" for k in ("beam", "beam_size", "alpha") if k in settings)
    if decoding:
        parts.append(decoding)
    return " · ".join(parts)
