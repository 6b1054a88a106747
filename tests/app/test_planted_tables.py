"""Whole test set against planted files (issue #54): a checkpoint's tables and manifests may come from a stranger, so
a manifest never names a file outside the data folder, a table's footer is checked before its data, the join checks
the input files' hashes, and every planted file gives a notice, never a stack trace or a hang."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("streamlit")

from conftest import assert_clean, make_corpus, new_app, plain  # noqa: E402
from test_whole_test_set import VIEW, file_record, make_table, write_table  # noqa: E402

from app.analysis import table_inputs, tables  # noqa: E402
from app.views import whole_test_set as test_set  # noqa: E402


def finishes(call, seconds: float = 20.0):
    """``call()``'s result, failing the test when it has not returned within ``seconds`` (a FIFO blocks forever)."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = call()
        except Exception as err:  # raised again here, in the test's thread
            out["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked"
    if "error" in out:
        raise out["error"]
    return out["value"]


def joined(tmp_path, folder, frame=None, roots=None, **given):
    """A table written with ``given`` (``write_table``'s: ``data=`` the folder whose files its manifest records),
    joined from the data folder ``folder`` (or ``roots``)."""
    frame = make_table(20) if frame is None else frame
    path = write_table(tmp_path / "t", frame, **given)
    return tables.join_inputs(tables.read_table(path), [folder] if roots is None else roots)


def older(corpus, references: bool = True) -> dict:
    """An older manifest's ``input`` for ``corpus``'s test split: the digest of the lines it read, no file records."""
    from transformer.interpret.corpus import content_hash

    lines = (corpus / "test.en").read_text().splitlines()
    refs = (corpus / "test.de").read_text().splitlines() if references else None
    return {"sha256": content_hash(lines, refs), "references": references, "file_lines": len(lines)}


# ------------------------------------------------------------------------------------------------ §1 the join's files


@pytest.mark.parametrize("split,src,tgt", [("/proc/self/", "/environ", "de"), ("/etc/", "/../etc/passwd", "de"),
                                           ("..", "en", "de"), ("test", "en/../../x", "de"),
                                           ("test", "en", "de/../../../etc/passwd"), ("te st", "en", "de"),
                                           ("test", ["en"], "de"), ("test", "e" * 65, "de")])
def test_a_manifest_naming_a_path_reads_nothing(tmp_path, tiny_corpus, split, src, tgt):
    secret = tmp_path / "environ"
    secret.write_text("HF_TOKEN=hf_secret\n" * 20)
    table = joined(tmp_path, tiny_corpus, split=split, src_lang=src, tgt_lang=tgt, roots=[tiny_corpus, tmp_path])
    assert table.frame["source"].isna().all() and table.frame["reference"].isna().all()
    assert "not a data set's file name" in table.inputs_note
    assert "hf_secret" not in table.frame.to_string()


def test_only_a_regular_file_directly_inside_the_data_folder_is_joined(tmp_path, tiny_corpus):
    frame = make_table(20)
    outside = tmp_path / "elsewhere"
    shutil.copytree(tiny_corpus, outside)  # the same bytes: only where the file is differs
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(tiny_corpus / "test.de", data / "test.de")
    (data / "test.en").symlink_to(outside / "test.en")
    for legacy in (False, True):  # with the files' records, and an older manifest's digest of its lines
        recorded = older(tiny_corpus) if legacy else {"data": tiny_corpus}
        table = joined(tmp_path, data, frame, **recorded)
        assert table.frame["source"].isna().all() and "points outside" in table.inputs_note, table.inputs_note
    (data / "test.en").unlink()
    shutil.copy(tiny_corpus / "test.en", data / "copy.en")
    (data / "test.en").symlink_to(data / "copy.en")  # a link to a file of the folder itself: fine
    table = joined(tmp_path, data, frame, data=tiny_corpus)
    assert table.inputs_note is None and table.frame["source"].notna().all()
    (data / "test.en").unlink()
    os.mkfifo(data / "test.en")
    for recorded in ({"data": tiny_corpus}, older(tiny_corpus)):
        table = finishes(lambda given=recorded: joined(tmp_path, data, frame, **given))
        assert table.frame["source"].isna().all()
        assert "not a regular file" in table.inputs_note or "not the file" in table.inputs_note, table.inputs_note
    (data / "test.en").unlink()
    (data / "test.en").mkdir()
    table = joined(tmp_path, data, frame, **older(tiny_corpus))
    assert table.frame["source"].isna().all() and "not a regular file" in table.inputs_note


def test_a_data_file_over_the_limit_is_not_read(tmp_path, tiny_corpus, monkeypatch):
    monkeypatch.setattr(table_inputs, "MAX_INPUT_BYTES", 100)
    for recorded in ({"data": tiny_corpus}, older(tiny_corpus)):
        table = joined(tmp_path, tiny_corpus, **recorded)
        assert table.frame["source"].isna().all() and "over the" in table.inputs_note


# ------------------------------------------------------------------------------------------------ §3 the right text


def test_another_file_of_the_same_name_is_never_joined(tmp_path):
    """The issue's case: ``test.en`` holds val's lines (as many), and there is no ``test.de``."""
    real = make_corpus(tmp_path / "real", sizes={"val": 20, "test": 20}, seed=1)
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(real / "val.en", other / "test.en")
    table = joined(tmp_path, other, data=real)
    assert table.frame["source"].isna().all()
    assert "test.en in the data folder is not the file the table was made from" in table.inputs_note
    # an older manifest: its digest covers the references, so without test.de nothing can be checked
    lines = (real / "test.en").read_text().splitlines()
    refs = (real / "test.de").read_text().splitlines()
    table = joined(tmp_path, other, **older(real))
    assert table.frame["source"].isna().all() and "without test.de" in table.inputs_note
    shutil.copy(real / "test.en", other / "test.en")
    table = joined(tmp_path, other, **older(real))
    assert table.frame["source"].isna().all() and "without test.de" in table.inputs_note  # still nothing checks it
    shutil.copy(real / "test.de", other / "test.de")
    table = joined(tmp_path, other, **older(real))
    assert table.inputs_note is None and list(table.frame["source"]) == lines and list(table.frame["reference"]) == refs


def test_a_reference_that_differs_stops_the_join_and_a_missing_one_leaves_the_references_empty(tmp_path, tiny_corpus):
    data = tmp_path / "data"
    shutil.copytree(tiny_corpus, data)
    with open(data / "test.de", "a") as f:
        f.write("Noch eine Zeile.\n")
    table = joined(tmp_path, data, data=tiny_corpus)
    assert table.frame["source"].isna().all() and "test.de in the data folder is not the file" in table.inputs_note
    (data / "test.de").unlink()
    table = joined(tmp_path, data, data=tiny_corpus)
    lines = (tiny_corpus / "test.en").read_text().splitlines()
    assert list(table.frame["source"]) == lines and table.frame["reference"].isna().all()
    assert table.inputs_note == "The references stay empty: test.de is not in the data folder."
    record = file_record(tiny_corpus / "test.en")
    for broken in ({**record, "sha256": "0" * 63}, {**record, "name": "val.en"}, {**record, "bytes": "12"}, "x", None):
        path = write_table(tmp_path / "b", make_table(20), files={"source": broken, "reference": None})
        table = tables.join_inputs(tables.read_table(path), [tiny_corpus])
        assert table.frame["source"].isna().all() and "cannot be checked" in table.inputs_note, broken


def test_same_input_is_false_whenever_it_cannot_check():
    from transformer.interpret.corpus import content_hash

    sources, refs = ["a b", "c d"], ["x", "y"]
    given = {"sha256": content_hash(sources, refs), "lines": 2, "references": True}
    assert table_inputs.same_input(given, sources, refs)
    assert not table_inputs.same_input(given, sources, None)  # no reference to check: not the same
    assert not table_inputs.same_input(given, sources, ["x", "z"])
    assert not table_inputs.same_input({"lines": 2}, sources, refs)  # no digest
    alone = {"sha256": content_hash(sources, None), "lines": 2, "references": False}
    assert table_inputs.same_input(alone, sources, None) and not table_inputs.same_input(alone, ["a b", "c"], None)


# ------------------------------------------------------------------------------------------------ §2 the table file


def test_rows_over_the_limit_are_refused_from_the_footer_before_any_data(tmp_path, monkeypatch):
    """The issue's small file of a million dictionary-encoded rows (110 kB): refused before a row is decoded."""
    n = 1_000_000
    text = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array(["x" * 1000]))
    pq.write_table(pa.table({"id": pa.array(np.zeros(n, dtype=np.int64)), "translation": text}),
                   tmp_path / "big.parquet")
    assert (tmp_path / "big.parquet").stat().st_size < 1_000_000

    def never(*args, **kwargs):
        raise AssertionError("data read")

    monkeypatch.setattr(pq.ParquetFile, "read", never)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", never)
    with pytest.raises(tables.TableError, match=f"1,000,000 rows, over the {tables.MAX_ROWS:,}"):
        tables.read_table(tmp_path / "big.parquet")


def test_the_decompressed_size_of_the_columns_read_is_bounded(tmp_path, monkeypatch):
    n = 5_000
    frame = make_table(n)
    frame["extra"] = ["z" * 2_000] * n  # not a contract column: neither read nor counted
    frame.to_parquet(tmp_path / "t.parquet")
    footer = pq.ParquetFile(tmp_path / "t.parquet").metadata
    extra = [footer.row_group(g).column(j).total_uncompressed_size for g in range(footer.num_row_groups)
             for j in range(footer.num_columns) if footer.schema.column(j).name == "extra"]
    size = tables.decoded_bytes(footer, tables.contract())
    everything = tables.decoded_bytes(footer, [footer.schema.column(j).name for j in range(footer.num_columns)])
    assert everything == size + sum(extra)
    monkeypatch.setattr(tables, "MAX_DECODED_BYTES", size)
    table = tables.read_table(tmp_path / "t.parquet")
    assert "extra" not in table.frame.columns and len(table.frame) == n
    monkeypatch.setattr(tables, "MAX_DECODED_BYTES", size - 1)
    with pytest.raises(tables.TableError, match="once decompressed"):
        tables.read_table(tmp_path / "t.parquet")


def test_long_texts_are_cut_and_a_repeated_one_costs_its_length_once(tmp_path):
    n, long = 3_000, "w" * 200_000
    texts = pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32) % 2), pa.array([long, "short"]))
    pq.write_table(pa.table({"id": pa.array(np.arange(n)), "translation": texts,
                             "reference": pa.array(["é" * 1_500 if i == 7 else None for i in range(n)])}),
                   tmp_path / "t.parquet")
    table = tables.read_table(tmp_path / "t.parquet")
    translations = table.frame["translation"]
    assert (translations[1::2] == "short").all()
    assert (translations[::2] == "w" * tables.MAX_CELL_CHARS + "…").all()
    assert table.frame["reference"][7] == "é" * tables.MAX_CELL_CHARS + "…"
    assert table.notes == (f"{n // 2 + 1:,} texts longer than {tables.MAX_CELL_CHARS:,} characters are cut to that",)


def test_columns_of_the_wrong_type_are_left_out_with_a_note(tmp_path):
    frame = make_table(50)
    frame["flag"] = ["False"] * 50  # text: "False" is a true value in Python, so all 50 were shown flagged
    frame["chrf"] = ["12.5"] * 50
    frame["hit_max_len"] = [1] * 50
    frame.to_parquet(tmp_path / "t.parquet")
    table = tables.read_table(tmp_path / "t.parquet")
    assert not table.frame["flag"].any() and table.frame["chrf"].isna().all()
    assert "its flag column holds text, not true / false: left out" in table.notes
    assert "its chrf column holds text, not numbers: left out" in table.notes
    assert "its hit_max_len column holds numbers, not true / false: left out" in table.notes
    np.testing.assert_allclose(table.frame["source_share"], frame["source_share"])  # the others read as they are
    pd.DataFrame({"id": ["0", "1"], "translation": ["a", "b"]}).to_parquet(tmp_path / "ids.parquet")
    with pytest.raises(tables.TableError, match="id column holds text"):
        tables.read_table(tmp_path / "ids.parquet")
    twice = pa.Table.from_arrays([pa.array([0]), pa.array(["a"]), pa.array(["b"])],
                                 ["id", "translation", "translation"])
    pq.write_table(twice, tmp_path / "twice.parquet")
    with pytest.raises(tables.TableError, match="translation column appears 2 times"):
        tables.read_table(tmp_path / "twice.parquet")


@pytest.mark.parametrize("ids", [[0.0, np.inf], [0.0, np.nan], [0.0, 1.5], [0, -1], [0, 2**40]])
def test_line_ids_must_be_whole_numbers_from_0(tmp_path, ids):
    pd.DataFrame({"id": ids, "translation": ["a", "b"]}).to_parquet(tmp_path / "t.parquet")
    with pytest.raises(tables.TableError, match="line ids that are not whole numbers from 0"):
        tables.read_table(tmp_path / "t.parquet")


def test_a_fifo_table_or_manifest_never_blocks(tmp_path):
    os.mkfifo(tmp_path / "f.parquet")
    with pytest.raises(tables.TableError, match="not a regular file"):
        finishes(lambda: tables.read_table(tmp_path / "f.parquet"))
    make_table(3).to_parquet(tmp_path / "t.parquet")
    os.mkfifo(tmp_path / "t.manifest.json")
    assert finishes(lambda: tables.read_table(tmp_path / "t.parquet")).manifest == {}


def test_pages_hold_at_most_a_megabyte_each_and_cover_every_row_in_order():
    rng = np.random.default_rng(0)
    frame = tables.normalise(make_table(3_000))
    frame["translation"] = ["ü" * int(k) for k in rng.integers(0, 1_000, len(frame))]
    columns = list(frame.columns)
    starts = tables.pages(frame, columns)
    assert starts[0] == 0 and starts[-1] == len(frame) and all(np.diff(starts) > 0)

    def size(first: int, end: int) -> int:  # the page as sent: its texts' UTF-8 bytes, 8 bytes every other cell
        rows = frame.iloc[first:end]
        texts = sum(len(v.encode()) for c in columns for v in rows[c] if isinstance(v, str))
        return texts + 8 * len(columns) * len(rows)

    for first, end in zip(starts, starts[1:]):
        assert size(first, end) <= tables.PAGE_BYTES and end - first <= tables.PAGE_ROWS
        assert end == len(frame) or size(first, end + 1) > tables.PAGE_BYTES or end - first == tables.PAGE_ROWS
    assert tables.pages(frame.iloc[:0], columns) == [0]


# ------------------------------------------------------------------------------------------------ the view


@pytest.fixture()
def planted(tiny_checkpoint, tiny_corpus, tmp_path, monkeypatch):
    """A copy of the tiny checkpoint served as a public server's model, its tables folder to plant in; the data
    folder a copy of the tiny corpus."""
    ckpt = tmp_path / "tiny"
    shutil.copytree(tiny_checkpoint, ckpt)
    data = tmp_path / "data"
    shutil.copytree(tiny_corpus, data)
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    monkeypatch.setenv("ATTN_PUBLIC", "1")
    monkeypatch.setenv("ATTN_MODELS", str(ckpt))
    monkeypatch.setenv("ATTN_DATA_DIR", str(data))
    return ckpt, data, tiny_corpus


def notices(at) -> str:
    return " ".join(plain(e.value) for e in [*at.info, *at.warning, *at.caption])


def test_planted_tables_give_a_notice_not_an_error(planted):
    ckpt, data, corpus = planted
    frame = make_table(20)
    frame["id"] = frame["id"].astype(float)
    frame.loc[3, "id"] = np.inf
    write_table(ckpt / "tables", frame, data=corpus)
    at = new_app({"view": VIEW})
    assert not at.exception
    assert [plain(e.value) for e in at.error] == ["This table cannot be shown: test.parquet has line ids that are not "
                                                  "whole numbers from 0 (1 of 20 rows, the first at row 3)"]
    frame = make_table(20)
    frame["flag"] = ["False"] * 20
    write_table(ckpt / "tables", frame, data=corpus)
    at = new_app({"view": VIEW})
    assert_clean(at)
    assert "flag column holds text" in notices(at) and "0 flagged" in notices(at)
    write_table(ckpt / "tables", make_table(20), data=corpus)
    for planted_file in ("fifo", "binary"):
        (data / "test.en").unlink()
        if planted_file == "fifo":
            os.mkfifo(data / "test.en")
        else:
            (data / "test.en").write_bytes(bytes(range(256)) * 40)
        at = finishes(lambda: new_app({"view": VIEW}), 60)
        assert_clean(at)
        assert at.dataframe[0].value["source"].isna().all()
        assert "The sources are not joined: test.en in the data folder" in notices(at)


@pytest.mark.parametrize("rows", [["x"], 1.5, True, None, [True], [-1], [10**9]])
def test_a_row_selection_that_names_no_row_is_ignored(planted, rows):
    ckpt, data, corpus = planted
    write_table(ckpt / "tables", make_table(20), data=corpus)
    at = new_app({"view": VIEW})
    at.session_state[test_set.rows_key("test", "all", "")] = {"selection": {"rows": rows, "columns": [], "cells": []}}
    at.run()
    assert_clean(at)
    assert "source_text" not in at.query_params or at.query_params.get("text") != ""
    if rows is not None:
        assert "names no row of this page" in notices(at)


def test_the_view_sends_a_large_table_a_page_at_a_time(planted):
    ckpt, data, corpus = planted
    n = 3_000
    frame = make_table(n)
    frame["translation"] = [f"{i} " + "Übersetzung " * 70 for i in range(n)]  # about 850 bytes a line
    write_table(ckpt / "tables", frame, data=None, split="other")
    at = new_app({"view": VIEW})
    assert_clean(at)
    sent = at.dataframe[0].value
    assert 0 < len(sent) < n and list(sent["id"]) == list(range(len(sent)))
    assert len(at.dataframe[0].proto.arrow_data.data) < 1.1e6
    picker = at.selectbox(key=test_set.PAGE)
    assert len(picker.options) == len(tables.pages(tables.normalise(frame), test_set.shown_columns(
        tables.normalise(frame)))) - 1
    picker.set_value(picker.options[1])
    at.run()
    assert_clean(at)
    assert list(at.dataframe[0].value["id"]) == list(range(len(sent), len(sent) + len(at.dataframe[0].value)))
    assert "a page holds at most about 1 MB" in notices(at)


def test_the_pasted_list_is_capped_like_a_links(planted):
    at = new_app({"view": VIEW, "table": "paste"})
    big = "A dog runs on the beach.\n" * 40_000  # 1 MB
    at.text_area(key=test_set.PASTED).set_value(big)
    at.run()
    assert_clean(at)
    kept = at.session_state[test_set.PASTED]
    assert kept == big[:test_set.MAX_LINK_LIST] and len(at.query_params["lines"]) <= test_set.MAX_LINK_LIST
    assert f"A box holds at most {test_set.MAX_LINK_LIST:,} characters" in notices(at)
    at.text_area(key=test_set.PASTED).set_value(big[:1_000])
    at.run()
    assert "A box holds at most" not in notices(at)


def test_hashes_in_the_manifest_are_those_the_contract_names(tiny_corpus):
    record = file_record(tiny_corpus / "test.en")
    assert table_inputs.file_record(json.loads(json.dumps(record))) == record
    assert record["sha256"] == hashlib.sha256((tiny_corpus / "test.en").read_bytes()).hexdigest()


def test_a_manifests_long_values_are_cut_where_the_page_names_them():
    manifest = {"input": {"split": "s" * 10**6, "src_lang": "en", "tgt_lang": "d\ne"}, "model": {"name": "m" * 10**5},
                "settings": {"beam": "b" * 1000}}
    line = tables.table_caption(manifest, 3)
    assert len(line) < 300 and "\n" not in line and line.startswith("3 lines · of " + "s" * 79 + "…")
