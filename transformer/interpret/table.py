"""One row of signals per sentence: the table ``python -m transformer.corpus`` writes, and the function the app calls
for a short pasted list (:func:`table_rows`).

A row holds the sentence's translation (``Translator.translate_batch``, the same settings), the search's own
``score``, sacreBLEU's sentence-level ``chrf`` and ``bleu`` against a reference, the teacher-forced signals of
``transformer.interpret.signals`` (``seq_logprob``, ``min_piece_logprob``, ALTI+ ``source_share`` /
``source_share_min``, ``eos_attention``, ``omission``; ``repetition``; ``flag``, ``flag_score``) and a few plain counts.
:data:`COLUMNS` (``transformer.interpret.columns``) maps each name to its :class:`Column`: type, header, one plain
sentence, whether it is a signal and which end is suspicious; the names are a contract (the app, users' notebooks
and scripts read them).

Sentences go through the model in length-sorted batches that depend only on the input, the batch size and the
tokenizer (:func:`batches`), so a batch is computed the same way whether one process runs them all, several share
them out, or a resumed run does the ones left: the numbers come out equal, not merely close.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sacrebleu

from ..decoding.settings import DecodeSettings
from ..translator import Translator
from .columns import COLUMNS, Column
from .flagging import flag, flag_rule, flag_score
from .signals import pair_signals, repetition

__all__ = ["COLUMNS", "Column", "DEFAULT_BATCH_SIZE", "INPUT_COLUMNS", "arrow_schema", "batch_rows", "batches",
           "read_table", "source_lengths", "table_rows", "without_inputs", "write_table"]

DEFAULT_BATCH_SIZE = 64  # sentences per batch: decoding and the teacher-forced pass

INPUT_COLUMNS = ("source", "reference")  # left null by --no-inputs

Progress = Callable[[int, int], None]  # (sentences done, sentences in all)


def source_lengths(translator: Translator, sources: Sequence[str], src_lang: str | None = None) -> list[int]:
    """Each source's length in ids, as the model reads it (cut to the model's length)."""
    return [len(translator.encode_source(text, src_lang)[0]) for text in sources]


def batches(lengths: Sequence[int], batch_size: int = DEFAULT_BATCH_SIZE) -> list[list[int]]:
    """Line ids grouped into batches of similar length (sorted by length, ties by id): a function of the lengths
    and the batch size only, so every process that shares the work out finds the same batches."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def note_of(text: str, truncated: bool, source_pieces: int) -> str | None:
    """What was unusual about an input line, in a few words (None: nothing)."""
    if not text.strip():
        return "empty line"
    if truncated:
        return f"source cut to {source_pieces} pieces ({len(text):,} characters)"
    return None


def number(x: float) -> float | None:
    """A float, or None for NaN (a signal with no output step to average over): null in the table."""
    return None if math.isnan(x) else float(x)


def batch_rows(translator: Translator, ids: Sequence[int], sources: Sequence[str],
               references: Sequence[str] | None, settings: DecodeSettings, rule: Any) -> list[dict[str, Any]]:
    """The rows of one batch: ``sources[i]`` (and ``references[i]``) for each ``i`` in ``ids``, in that order.
    ``settings`` complete (``Translator.settings``)."""
    texts = [sources[i] for i in ids]
    results = translator.translate_batch(texts, settings)
    signals = pair_signals(translator, [r.source_ids for r in results], [r.target_ids for r in results],
                           tgt_lang=settings.tgt_lang)
    before, after = translator.tokenizer.source_frame(settings.src_lang)
    prefix = len(translator.tokenizer.target_prefix(settings.tgt_lang))
    unk_id = translator.tokenizer.unk_id
    bleu, chrf = sacrebleu.BLEU(effective_order=True), sacrebleu.CHRF()
    rows = []
    for i, text, r, sig in zip(ids, texts, results, signals):
        reference = references[i] if references is not None else None
        source_pieces = len(r.source_ids) - len(before) - len(after)
        output_pieces = len(r.target_ids) - prefix - (0 if r.hit_max_len else 1)
        row = {
            "id": int(i), "source": text, "translation": r.text, "reference": reference, "score": float(r.score),
            "seq_logprob": number(sig["seq_logprob"]), "min_piece_logprob": number(sig["min_piece_logprob"]),
            "omission": number(sig["omission"]),
            "chrf": None if reference is None else float(chrf.sentence_score(r.text, [reference]).score),
            "bleu": None if reference is None else float(bleu.sentence_score(r.text, [reference]).score),
            "source_share": number(sig["source_share"]), "source_share_min": number(sig["source_share_min"]),
            "eos_attention": number(sig["eos_attention"]), "repetition": int(repetition(r.text)),
            "length_ratio": output_pieces / max(source_pieces, 1), "hit_max_len": bool(r.hit_max_len),
            "unk": sum(1 for t in r.source_ids if t == unk_id), "flag": False, "flag_score": None,
            "source_pieces": source_pieces, "output_pieces": output_pieces, "truncated": bool(r.truncated),
            "note": note_of(text, r.truncated, source_pieces),
        }
        row["flag"] = bool(flag(row, rule))
        row["flag_score"] = flag_score(row, rule)
        rows.append(row)
    return rows


def iter_batches(translator: Translator, sources: Sequence[str], references: Sequence[str] | None,
                 settings: DecodeSettings, groups: Sequence[Sequence[int]], rule: Any) -> Iterator[list[dict]]:
    """:func:`batch_rows` of each group of line ids in turn."""
    for ids in groups:
        yield batch_rows(translator, ids, sources, references, settings, rule)


def check_references(sources: Sequence[str], references: Sequence[str] | None) -> None:
    if references is not None and len(references) != len(sources):
        raise ValueError(f"{len(sources)} sources but {len(references)} references: one reference per source line")


def table_rows(translator: Translator, sources: Sequence[str], references: Sequence[str] | None = None,
               settings: DecodeSettings | None = None, progress: Progress | None = None, *,
               batch_size: int = DEFAULT_BATCH_SIZE, rule: Any = None) -> list[dict[str, Any]]:
    """Every row of the table for ``sources`` (and ``references``, one per source, or None), in input order
    (``row["id"]`` is the index). ``settings``: how to decode (None: the translator's defaults; the checkpoint's
    length penalty and scoring where they name none). ``progress(done, total)`` is called after each batch.
    ``rule``: the flag's rule (None: ``flag_rule`` of the checkpoint's directory). Prints nothing."""
    check_references(sources, references)
    chosen = translator.settings(settings)
    rule = flag_rule(translator.path) if rule is None else rule
    groups = batches(source_lengths(translator, sources, chosen.src_lang), batch_size)
    rows: list[dict[str, Any]] = []
    for batch in iter_batches(translator, sources, references, chosen, groups, rule):
        rows += batch
        if progress is not None:
            progress(len(rows), len(sources))
    return sorted(rows, key=lambda row: row["id"])


def arrow_schema() -> pa.Schema:
    """The table's pyarrow schema (:data:`COLUMNS`)."""
    return pa.schema([(name, pa.type_for_alias(column.type)) for name, column in COLUMNS.items()])


def without_inputs(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with ``source`` and ``reference`` null (a table committed without the corpus' lines)."""
    return [{**row, **dict.fromkeys(INPUT_COLUMNS)} for row in rows]


def write_table(path: str | Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` to ``path``: Parquet (``.parquet``, the :func:`arrow_schema` types) or JSON Lines
    (``.jsonl``, one object a line, columns in table order); written beside, synced and renamed, so a reader (or
    a run stopped at any moment) never sees half a table."""
    path = Path(path)
    tmp = temporary_beside(path)
    if path.suffix == ".jsonl":
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps({name: row.get(name) for name in COLUMNS}, ensure_ascii=False) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist([{name: row.get(name) for name in COLUMNS} for row in rows],
                                            schema=arrow_schema()), tmp)
    replace_synced(tmp, path)


def temporary_beside(path: Path) -> Path:
    """A new empty file in ``path``'s folder, named for it and this process (the umask's permissions)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    return tmp


def replace_synced(tmp: Path, path: Path) -> None:
    """``tmp`` synced to the disk and renamed over ``path``, the folder synced too: a reader, or a run stopped at
    any moment, finds the old file or the new one, whole."""
    try:
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` to a :func:`temporary_beside` file, then :func:`replace_synced` over ``path``."""
    path = Path(path)
    tmp = temporary_beside(path)
    try:
        write(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    replace_synced(tmp, path)


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """A table written by :func:`write_table` (``.parquet`` or ``.jsonl``), as rows."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return pq.read_table(path).to_pylist()
