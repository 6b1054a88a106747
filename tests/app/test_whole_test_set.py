"""The "Whole test set" view: its table helpers (reading, the join by id, presets), its figures, and the page
(AppTest, tiny checkpoint with a small table of its own beside it)."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit")

from conftest import assert_clean, charts, new_app, plain, set_view  # noqa: E402

from app.analysis import tables  # noqa: E402
from app.drawing import table_figures
from app.views import whole_test_set as test_set  # noqa: E402
from app.views import whole_test_set_lines as lines  # noqa: E402
from transformer.interpret.columns import COLUMNS as COLUMNS_DESCRIBED

VIEW = "whole_test_set"


def make_table(n: int = 12, seed: int = 0, inputs: list[str] | None = None) -> pd.DataFrame:
    """A table as ``transformer.corpus --no-inputs`` writes it: ids, translations and signals, no texts."""
    rng = np.random.default_rng(seed)
    share = rng.uniform(0.3, 0.9, n)
    return pd.DataFrame({
        "id": np.arange(n), "source": inputs or [None] * n,
        "translation": [f"Übersetzung {i} <b>x</b>" for i in range(n)],
        "reference": [None] * n, "score": rng.normal(-0.5, 0.2, n), "seq_logprob": rng.normal(-0.4, 0.2, n),
        "chrf": np.where(np.arange(n) == 3, np.nan, rng.uniform(10, 90, n)), "bleu": rng.uniform(0, 80, n),
        "source_share": share, "source_share_min": share - 0.2, "eos_attention": rng.uniform(0, 0.5, n),
        "repetition": rng.integers(1, 4, n), "min_piece_logprob": rng.normal(-3, 1, n),
        "omission": rng.uniform(0, 6, n), "length_ratio": rng.uniform(0.5, 2, n), "hit_max_len": [False] * n,
        "unk": [0] * n, "flag": share < 0.5})


def file_record(path) -> dict:
    """The manifest's record of an input file, as ``python -m transformer.corpus`` writes it (the contract)."""
    data = path.read_bytes()
    return {"name": path.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def write_table(folder, frame: pd.DataFrame, name: str = "test", split: str = "test", lines: int | None = None,
                data=None, **given):
    """The table and its manifest; ``data``: the data folder whose ``{split}.en`` / ``{split}.de`` it records (their
    sha256 and size); ``given``: more of the manifest's ``input``."""
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / f"{name}.parquet")
    given = {"split": split, "lines": lines if lines is not None else len(frame), "src_lang": "en", "tgt_lang": "de",
             **given}
    if data is not None:
        reference = data / f"{split}.de"
        given["files"] = {"source": file_record(data / f"{split}.en"),
                          "reference": file_record(reference) if reference.exists() else None}
    manifest = {"model": {"name": "tiny", "flag_rule": {"any": [{"column": "source_share", "op": "<", "value": 0.5}],
                                                        "rule": "source_share < 0.5"}},
                "settings": {"beam": 2}, "versions": {}, "columns": list(frame.columns),
                "rows": len(frame), "input": given}
    (folder / f"{name}.manifest.json").write_text(json.dumps(manifest))
    return folder / f"{name}.parquet"


# ------------------------------------------------------------------------------------------------ the table


def test_join_by_id_reads_sources_and_references_back_in_any_row_order(tmp_path, tiny_corpus):
    sources = (tiny_corpus / "test.en").read_text().splitlines()
    references = (tiny_corpus / "test.de").read_text().splitlines()
    frame = make_table(len(sources)).sample(frac=1.0, random_state=1).iloc[:-3]  # shuffled, some lines left out
    table = tables.read_table(write_table(tmp_path / "t", frame, data=tiny_corpus))
    joined = tables.join_inputs(table, [tmp_path / "nowhere", tiny_corpus])
    assert joined.inputs_note is None
    for _, row in joined.frame.iterrows():
        assert row["source"] == sources[row["id"]] and row["reference"] == references[row["id"]]
    # the signals are the file's, untouched by the join
    np.testing.assert_allclose(joined.frame.set_index("id")["source_share"].sort_index(),
                               frame.set_index("id")["source_share"].sort_index())


def test_a_table_of_the_real_command_joins_back_to_its_lines_and_a_changed_file_is_refused(tmp_path, tiny_checkpoint,
                                                                                           tiny_corpus):
    """``python -m transformer.corpus --no-inputs`` on the tiny model: the join restores exactly the lines it read
    (the manifest's digest of them checked), and refuses a data folder whose file differs."""
    from transformer.corpus import main

    out = tmp_path / "tables" / "test.parquet"
    assert main(["--checkpoint", str(tiny_checkpoint), "--data-dir", str(tiny_corpus), "--split", "test",
                 "--limit", "6", "--beam", "1", "--no-inputs", "--out", str(out)]) == 0
    table = tables.read_table(out)
    assert table.frame["source"].isna().all()  # the committed form: no line of the corpus
    joined = tables.join_inputs(table, [tiny_corpus])
    assert joined.inputs_note is None
    lines = (tiny_corpus / "test.en").read_text().splitlines()
    refs = (tiny_corpus / "test.de").read_text().splitlines()
    assert list(joined.frame["source"]) == lines[:6] and list(joined.frame["reference"]) == refs[:6]
    other = tmp_path / "other"
    shutil.copytree(tiny_corpus, other)
    (other / "test.en").write_text("\n".join(lines[:2] + ["A changed line."] + lines[3:]) + "\n")
    refused = tables.join_inputs(table, [other])
    assert refused.frame["source"].isna().all() and "not the file the table was made from" in refused.inputs_note


def test_join_says_why_the_sources_are_missing(tmp_path, tiny_corpus):
    frame = make_table(20)
    absent = tables.join_inputs(tables.read_table(write_table(tmp_path / "a", frame, data=tiny_corpus)),
                                [tmp_path / "nowhere"])
    assert absent.frame["source"].isna().all() and "not on this server" in absent.inputs_note
    assert "python -m transformer.data --download" in absent.inputs_note
    other = tmp_path / "other"
    shutil.copytree(tiny_corpus, other)
    with open(other / "test.en", "a") as f:
        f.write("One more line.\n")  # another file than the table's
    differs = tables.join_inputs(tables.read_table(write_table(tmp_path / "b", frame, data=tiny_corpus)), [other])
    assert differs.frame["source"].isna().all() and "test.en in the data folder is not the file" in differs.inputs_note
    (tmp_path / "c").mkdir()
    frame.to_parquet(tmp_path / "c" / "x.parquet")  # no manifest: no data set named
    bare = tables.join_inputs(tables.read_table(tmp_path / "c" / "x.parquet"), [tiny_corpus])
    assert bare.frame["source"].isna().all() and "does not say" in bare.inputs_note


def test_a_table_without_the_contract_columns_is_refused_and_missing_signals_are_empty(tmp_path):
    pd.DataFrame({"line": [0], "text": ["x"]}).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(tables.TableError, match="no id or translation"):
        tables.read_table(tmp_path / "bad.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(tables.TableError, match="not a readable parquet"):
        tables.read_table(tmp_path / "junk.parquet")
    pd.DataFrame({"id": [1, 0], "translation": ["b", "a"], "extra": [1.0, 2.0]}).to_parquet(tmp_path / "few.parquet")
    frame = tables.read_table(tmp_path / "few.parquet").frame
    assert list(frame.columns) == list(tables.VIEW_COLUMNS)  # the contract's columns only: "extra" is not read
    assert frame["chrf"].isna().all() and not frame["flag"].any()


def test_presets_sort_filter_and_find():
    frame = tables.normalise(make_table(12))
    worst = tables.apply_preset(frame, "worst-chrf")
    chrf = worst["chrf"].to_numpy()
    assert len(worst) == 12 and np.isnan(chrf[-1]) and worst["id"].iloc[-1] == 3  # no chrF: last
    assert (np.diff(chrf[:-1]) >= 0).all() and chrf[0] == np.nanmin(frame["chrf"])
    low = tables.apply_preset(frame, "lowest-share")
    assert (np.diff(low["source_share"]) >= 0).all()
    flagged = tables.apply_preset(frame, "flagged")
    assert set(flagged["id"]) == set(frame["id"][frame["source_share"] < 0.5]) and flagged["flag"].all()
    assert list(tables.apply_preset(frame, "all")["id"]) == list(range(12))
    found = tables.apply_preset(frame, "all", "übersetzung 1")  # case-insensitive, plain text
    assert list(found["id"]) == [1, 10, 11]
    assert tables.apply_preset(frame, "all", "<B>X").shape[0] == 12


def test_the_presets_of_the_new_signals_put_the_suspicious_end_first():
    frame = tables.normalise(make_table(12))
    omissions = tables.apply_preset(frame, "omissions")["omission"].to_numpy()
    assert (np.diff(omissions) <= 0).all() and omissions[0] == frame["omission"].max()  # the largest first
    wrong = tables.apply_preset(frame, "wrong-word")["min_piece_logprob"].to_numpy()
    assert (np.diff(wrong) >= 0).all()
    for key, preset in tables.PRESETS.items():  # each preset's column is described, its end the suspicious one
        assert preset.label and preset.help
        column = COLUMNS_DESCRIBED.get(preset.sort)
        if column is not None and column.signal:
            assert preset.descending == (column.direction == "high"), key


def test_most_suspicious_first_sorts_by_the_flags_score():
    frame = tables.normalise(make_table(6)).assign(flag_score=[0.4, np.nan, 3.1, 2.2, 0.0, 2.9])
    assert list(tables.apply_preset(frame, "suspicious")["id"]) == [2, 5, 3, 0, 4, 1]  # no score: last
    older = tables.normalise(make_table(6))  # a table written before the score: the least likely output first
    assert older["flag_score"].isna().all()
    assert list(tables.apply_preset(older, "suspicious")["id"]) == list(older.sort_values("seq_logprob")["id"])
    rule = {"any": [{"column": "omission", "op": ">=", "value": 7.2}], "score": {"threshold": 2.183, "signals": {}}}
    assert tables.thresholds(rule) == {"flag_score": 2.183, "omission": 7.2}
    assert tables.thresholds({"any": [], "score": {"threshold": float("nan")}}) == {}
    assert tables.thresholds({"any": [], "score": {"threshold": True}}) == {}


def test_a_tie_in_the_flags_score_is_ordered_by_the_least_likely_output_not_by_the_line():
    """Issue 66: 14 lines of test_2016 shared the top score; the first page's order among them means something."""
    frame = tables.normalise(make_table(6)).assign(flag_score=[3.3, 1.0, 3.3, 3.3, np.nan, 3.3],
                                                   seq_logprob=[-0.5, -3.0, -2.5, np.nan, -9.0, -1.0],
                                                   flag=[True, False, True, True, False, True])
    assert list(tables.apply_preset(frame, "suspicious")["id"]) == [2, 5, 0, 3, 1, 4]  # a missing value: last
    assert list(tables.apply_preset(frame, "flagged")["id"]) == [2, 5, 0, 3]
    for preset in ("suspicious", "flagged"):
        assert tables.PRESETS[preset].then == "seq_logprob" and "least likely" in tables.PRESETS["suspicious"].help


def test_find_can_take_whole_words_only():
    frame = tables.normalise(make_table(3)).assign(translation=["Ein Hotdog.", "Ein Hund, kein dog!", "DOG"])
    assert list(tables.apply_preset(frame, "all", "dog")["id"]) == [0, 1, 2]
    assert list(tables.apply_preset(frame, "all", "dog", whole_words=True)["id"]) == [1, 2]
    assert tables.matches("a.b dog", "a.b", True) and not tables.matches("axb", "a.b", True)  # plain text


def test_every_column_has_one_description_with_a_label_and_help():
    import pyarrow as pa

    from transformer.interpret.table import COLUMNS, Column

    assert COLUMNS is COLUMNS_DESCRIBED and {"omission", "min_piece_logprob"} <= set(COLUMNS)
    for name, column in COLUMNS.items():
        assert isinstance(column, Column) and column.label and column.help.endswith("."), name
        assert pa.type_for_alias(column.type) is not None and column.direction in ("low", "high")
        if column.signal:
            assert column.phrase and column.suggests, name
    config = test_set.column_config(tables.normalise(make_table(4)))
    for name, shown in config.items():
        assert shown["label"] == COLUMNS[name].label and shown["help"] == COLUMNS[name].help, name
    shown = tables.SIGNAL_HELP
    assert set(shown) <= set(COLUMNS) and all(shown[s] == COLUMNS[s].help for s in shown)


def test_thresholds_come_from_the_tables_flag_rule():
    rule = {"any": [{"column": "repetition", "op": ">=", "value": 6}, {"column": "source_share", "op": "<",
                                                                        "value": 0.55}], "rule": "..."}
    manifest = {"model": {"name": "tiny", "flag_rule": rule}}
    assert tables.rule_of(manifest) == rule
    assert tables.thresholds(rule) == {"repetition": 6.0, "source_share": 0.55}
    assert tables.thresholds({"any": [{"column": "x", "value": "y"}, 3]}) == {}
    assert tables.rule_of({"model": "tiny"}) == {}


# ------------------------------------------------------------------------------------------------ figures


def test_histogram_counts_every_value_once_flagged_stacked_and_missing_counted():
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 1, 200)
    values[:7] = np.nan
    flagged = values < 0.3
    fig = table_figures.signal_histogram(values, "source share", flagged, threshold=0.3)
    by_name = {t.name: np.asarray(t.x) for t in fig.data}
    assert set(by_name) == {"flagged", "not flagged"}
    assert len(by_name["flagged"]) + len(by_name["not flagged"]) == 193
    np.testing.assert_allclose(np.sort(by_name["flagged"]), np.sort(values[flagged]))
    assert fig.data[0].xbins.size == fig.data[1].xbins.size  # the same bins, stacked
    assert fig.layout.barmode == "stack"
    assert "7 without a value" in fig.layout.title.text
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert len(lines) == 1 and lines[0].x0 == lines[0].x1 == 0.3
    assert table_figures.signal_histogram(values, "x").layout.shapes == ()  # no threshold: no line
    assert table_figures.signal_histogram(values, "on </s>").layout.xaxis.title.text == "on &lt;/s&gt;"  # as typed


def test_scatter_places_each_line_at_its_share_and_chrf():
    share = np.array([0.2, 0.5, np.nan, 0.8, 0.9])
    chrf = np.array([10.0, 40.0, 50.0, np.nan, 70.0])
    ids = np.array([4, 7, 9, 11, 13])
    fig = table_figures.share_chrf_scatter(share, chrf, ids, [True, False, False, False, False], threshold=0.611)
    points = {t.name: (list(t.x), list(t.y), list(t.customdata)) for t in fig.data}
    assert points["flagged"] == ([0.2], [10.0], [4])
    assert points["not flagged"] == ([0.5, 0.9], [40.0, 70.0], [7, 13])  # lines without a value left out
    assert "2 without chrF or source share" in fig.layout.title.text
    line = fig.layout.shapes[0]
    assert line.x0 == line.x1 == 0.611 and "0.61" in fig.layout.annotations[0].text
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text == "chrF"



@pytest.mark.browser
def test_the_histogram_and_the_scatter_name_the_flagged_lines_in_the_same_order(tmp_path):
    """Drawn by plotly.js in Chromium, the two charts' legends read "not flagged", "flagged" alike (plotly lists the
    traces of a stack of bars in reverse unless told)."""
    from bench.browser import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    rng = np.random.default_rng(1)
    share, chrf = rng.uniform(0.3, 0.9, 60), rng.uniform(10, 90, 60)
    flagged = share < 0.4
    figures = [table_figures.signal_histogram(share, "source share", flagged, threshold=0.4),
               table_figures.share_chrf_scatter(share, chrf, np.arange(60), flagged, threshold=0.4)]
    page_file = tmp_path / "charts.html"
    page_file.write_text("".join(f.to_html(full_html=False, include_plotlyjs=i == 0) for i, f in enumerate(figures)))
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(page_file.as_uri())
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot .legendtext').length >= 4")
            orders = [page.locator(".js-plotly-plot").nth(i).locator(".legendtext").all_text_contents()
                      for i in (0, 1)]
        finally:
            browser.close()
    assert orders[0] == orders[1] == ["not flagged", "flagged"], orders

def test_both_charts_mark_the_open_line():
    values = np.array([0.1, 0.4, np.nan, 0.7])
    fig = table_figures.signal_histogram(values, "source share", threshold=0.3, opened=(7, 0.4))
    marks = [(s.x0, a.text) for s, a in zip(fig.layout.shapes, fig.layout.annotations)]
    assert marks == [(0.3, "threshold 0.30"), (0.4, "line 7")]
    threshold, line = fig.layout.annotations  # the two labels on two rows: never one on top of the other
    assert abs((line.yshift or 0) - (threshold.yshift or 0)) >= line.font.size
    assert fig.layout.shapes[1].line.dash is None  # solid, unlike the dotted threshold
    assert len(table_figures.signal_histogram(values, "x", opened=(2, np.nan)).layout.shapes) == 0  # no value
    share, chrf, ids = np.array([0.2, 0.5, 0.8]), np.array([10.0, 40.0, np.nan]), np.array([4, 7, 9])
    fig = table_figures.share_chrf_scatter(share, chrf, ids, [True, False, False], opened=7)
    ring = [t for t in fig.data if t.name == "line 7"]
    assert len(ring) == 1 and (list(ring[0].x), list(ring[0].y), list(ring[0].customdata)) == ([0.5], [40.0], [7])
    assert [t.name for t in table_figures.share_chrf_scatter(share, chrf, ids, opened=9).data] == ["not flagged"]


# ------------------------------------------------------------------------------------------------ the page


@pytest.fixture()
def with_table(tiny_checkpoint, tiny_corpus, tmp_path, monkeypatch):
    ckpt = tmp_path / "tiny"
    shutil.copytree(tiny_checkpoint, ckpt)
    n = len((tiny_corpus / "test.en").read_text().splitlines())
    frame = make_table(n)
    write_table(ckpt / "tables", frame, data=tiny_corpus)
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    monkeypatch.setenv("ATTN_DATA_DIR", str(tiny_corpus))
    return ckpt, frame, (tiny_corpus / "test.en").read_text().splitlines()


def test_the_view_shows_the_shipped_table_with_its_sources_and_a_row_opens_its_sentence(with_table):
    ckpt, frame, sources = with_table
    at = new_app({"view": VIEW, "preset": "lowest-share"})
    assert_clean(at)
    shown = at.dataframe[0].value
    assert list(shown["id"]) == list(frame.sort_values("source_share")["id"])
    assert list(shown["source"]) == [sources[i] for i in shown["id"]]  # joined by id from ATTN_DATA_DIR
    columns = json.loads(at.dataframe[0].proto.columns)
    assert columns["source_share"]["type_config"]["type"] == "progress"
    assert columns["chrf"]["type_config"]["format"] == "%.1f"
    scatter = next(c for c in charts(at) if "source" in c["layout"]["xaxis"]["title"]["text"])
    assert [(s["x0"], s["x1"]) for s in scatter["layout"]["shapes"]] == [(0.5, 0.5)]  # the rule's source_share < 0.5
    assert scatter["layout"]["annotations"][0]["text"] == "flag threshold 0.50"
    line = int(shown["id"].iloc[2])
    selected = {"selection": {"rows": [2], "columns": [], "cells": []}}
    at.session_state[test_set.rows_key("test", "lowest-share", "")] = selected
    at.run()
    assert_clean(at)
    assert at.session_state["source_text"] == sources[line]
    assert at.query_params["text"] == sources[line]  # in the address: every other view opens it
    assert at.query_params["view"] == VIEW and at.query_params["preset"] == "lowest-share"
    assert any(c.value.startswith("Open in every view: ") and f" line {line} (it is in the text box" in c.value
               for c in at.caption)
    other = new_app({k: v for k, v in at.query_params.items() if k in ("text", "model")} | {"view": "heatmap"})
    assert_clean(other)
    assert other.session_state["source_text"] == sources[line]
    at.button(key="testset_go_source_or_prefix").click()  # the row's sentence in another view, one click
    at.run()
    assert_clean(at)
    assert at.query_params["view"] == "source_or_prefix" and at.query_params["text"] == sources[line]


def test_the_view_labels_each_column_from_its_description_marks_flags_and_says_the_rule_in_words(with_table):
    ckpt, frame, _ = with_table
    manifest = ckpt / "tables" / "test.manifest.json"
    data = json.loads(manifest.read_text())
    data["model"]["flag_rule"] = {"any": [{"column": "repetition", "op": ">=", "value": 3},
                                          {"column": "source_share", "op": "<", "value": 0.5}]}
    manifest.write_text(json.dumps(data))
    at = new_app({"view": VIEW, "signal": "repetition", "find": "übersetzung 1", "words": "1"})
    assert_clean(at)
    columns = json.loads(at.dataframe[0].proto.columns)
    for name in at.dataframe[0].proto.column_order:
        described = COLUMNS_DESCRIBED[name]
        assert columns[name]["label"] == described.label and columns[name]["help"] == described.help
    assert columns["flag"]["type_config"]["type"] == "text"  # a mark, not a checkbox
    shown = at.dataframe[0].value
    assert set(shown["flag"]) <= {test_set.FLAG_MARK, ""}
    assert list(shown["id"]) == [1] and any("1 line matches" in c.value for c in at.caption)  # not 10-19
    assert at.query_params["words"] == "1"
    said = " ".join(c.value for c in at.caption).replace("\\", "")  # Markdown's escapes set aside
    assert "is at least 3 or the mean share taken from the source is below 50.0%" in said
    histogram = next(c for c in charts(at) if c["layout"]["xaxis"]["title"]["text"] == "repetition")
    assert histogram["layout"]["annotations"][0]["text"] == "flag threshold 3"  # a whole number
    assert histogram["layout"]["yaxis"]["tickformat"] == ",d"
    beyond = int((frame["flag"] & ~(frame["repetition"] >= 3)).sum())
    if beyond:
        assert f"{beyond} flagged line" in said and "side of the repetition line" in said


def test_the_view_says_the_whole_rule_every_condition_in_words(with_table):
    """Issue 66: the rule was cut at 300 characters, losing the conditions behind the "One unlikely word" and
    "Possible omissions" presets; it is said whole, as Source or prefix says it (``rule_text``)."""
    from transformer.interpret.flagging import FlagRule, condition_text, rule_text

    ckpt, _, _ = with_table
    manifest = ckpt / "tables" / "test.manifest.json"
    data = json.loads(manifest.read_text())
    rule = {"any": [{"column": "repetition", "op": ">=", "value": 3},
                    {"column": "seq_logprob", "op": "<=", "value": -4.3742},
                    {"column": "source_share_min", "op": "<=", "value": 0.3464},
                    {"column": "eos_attention", "op": ">=", "value": 0.1606},
                    {"column": "min_piece_logprob", "op": "<=", "value": -16.0696},
                    {"column": "omission", "op": ">=", "value": 7.1457}]}
    data["model"]["flag_rule"] = rule
    manifest.write_text(json.dumps(data))
    at = new_app({"view": VIEW})
    assert_clean(at)
    said = " ".join(c.value for c in at.caption).replace("\\", "")  # Markdown's escapes set aside
    parsed = FlagRule.from_json(rule)
    assert len(rule_text(parsed)) > 300 and f"Flagged (may be a hallucination) when {rule_text(parsed)}." in said
    for condition in parsed.conditions:
        assert condition_text(condition) in said, condition


def test_without_the_data_the_view_says_why_and_still_shows_the_signals(with_table, monkeypatch, tmp_path):
    ckpt, _, _ = with_table
    manifest = ckpt / "tables" / "test.manifest.json"
    data = json.loads(manifest.read_text())
    data["model"]["name"] = "**bold** [a link](https://example.org)"  # a manifest's words are shown as text
    manifest.write_text(json.dumps(data))
    monkeypatch.setenv("ATTN_DATA_DIR", str(tmp_path / "nowhere"))
    at = new_app({"view": VIEW})
    assert_clean(at)
    assert any("not on this server" in i.value for i in at.info)
    shown = at.dataframe[0].value
    assert len(shown) == 20 and shown["source"].isna().all()
    caption = next(c.value for c in at.caption if "flagged" in c.value)
    assert "\\*\\*bold\\*\\*" in caption and "\\[a link\\]" in caption
    order = list(at.dataframe[0].proto.column_order)
    assert "source" not in order and "reference" not in order and order[:2] == ["id", "flag"]


def test_a_pasted_list_is_computed_within_the_work_limit_with_a_notice(with_table, monkeypatch):
    import transformer
    from app.analysis.inference import DecodeSettings
    from app.limits import work
    from transformer.interpret.table import table_rows

    ckpt, _, _ = with_table
    tr = transformer.load(ckpt, device="cpu")
    lines = ["a dog runs on the beach .", "two men play .", "a red ball", "the girl walks in the park .", "zzz"]
    at = new_app({"view": VIEW, "table": "paste"})
    assert_clean(at)
    settings = tr.settings(DecodeSettings(beam_size=at.session_state["beam_size"], alpha=at.session_state["alpha"]))
    costs = [work.table_work(tr, line, settings) for line in lines]
    # room for the first two lines only: the view plans the list against its share of the limit
    monkeypatch.setenv("ATTN_MAX_WORK", str((costs[0] + costs[1] + costs[2] / 2) / test_set.WORK_SHARE))
    at.text_area(key="source_text").set_value("")  # no sentence: the whole limit is the list's (and the frame's)
    at.text_area(key=test_set.PASTED).set_value("\n".join(lines))
    at.button(key="testset_compute").click()
    at.run()
    assert_clean(at)
    shown = at.dataframe[0].value
    expected = table_rows(tr, lines[:2], None, settings)
    assert list(shown.sort_values("id")["translation"]) == [row["translation"] for row in expected]
    assert list(shown.sort_values("id")["source"]) == lines[:2]
    np.testing.assert_allclose(shown.sort_values("id")["source_share"], [row["source_share"] for row in expected])
    notices = " ".join(i.value for i in at.info)
    assert "the first 2 of the 5 pasted lines" in notices and "ATTN\\_MAX\\_WORK" in notices
    # a selected row opens its sentence, and the list stays the same two lines (its work does not depend on it)
    at.session_state[test_set.rows_key(test_set.PASTE, "all", "")] = {"selection": {"rows": [1], "columns": [],
                                                                                    "cells": []}}
    at.run()
    assert_clean(at)
    assert at.session_state["source_text"] == lines[1] and at.query_params["text"] == lines[1]
    assert list(at.dataframe[0].value["source"]) == lines[:2]
    order = list(at.dataframe[0].proto.column_order)
    assert "source" in order and "chrf" not in order and "bleu" not in order  # no references: no blank columns


def test_public_mode_offers_the_shipped_tables_and_the_pasted_list_only(with_table, monkeypatch):
    ckpt, _, _ = with_table
    monkeypatch.setenv("ATTN_PUBLIC", "1")
    monkeypatch.setenv("ATTN_MODELS", str(ckpt))
    at = new_app({"view": VIEW, "table": "file", "file": "/etc/passwd"})
    assert_clean(at)
    assert any("file (this server opens only the tables shipped" in t.value for t in at.text)  # said, not taken
    picker = at.selectbox(key=test_set.TABLE)
    assert picker.options == ["test (shipped with this model)", "Sentences you paste (computed here)"]
    assert picker.value == "test"  # the link's table=file is not offered: the first shipped table instead
    assert any("table= value was ignored" in i.value for i in at.info)
    assert test_set.PATH not in [w.key for w in at.text_input]  # no path to a file on the server
    monkeypatch.delenv("ATTN_PUBLIC")
    local = new_app({"view": VIEW, "table": "file"})
    assert local.selectbox(key=test_set.TABLE).value == test_set.FILE
    assert test_set.PATH in [w.key for w in local.text_input]


@pytest.mark.browser
def test_a_click_on_a_row_in_a_real_browser_opens_its_sentence_and_a_phone_shows_every_preset(with_table):
    """Only a browser clicks the table's canvas; and only a browser lays the presets out on a phone's width."""
    from urllib.parse import parse_qs, urlparse

    from bench.browser import CHROMIUM, CHROMIUM_ARGS, streamlit_server

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    ckpt, frame, sources = with_table
    import os

    with streamlit_server(ckpt, {"ATTN_DATA_DIR": os.environ["ATTN_DATA_DIR"]}) as url, \
            sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(f"{url}/?view=whole_test_set&preset=lowest-share", wait_until="domcontentloaded")
            grid = page.locator("[data-testid=stDataFrame]").first
            grid.wait_for(timeout=90_000)
            grid.scroll_into_view_if_needed()
            box = grid.bounding_box()
            row = 2  # the third row shown: the third lowest source share
            page.mouse.click(box["x"] + 16, box["y"] + 35 * (row + 1) + 17)  # its selection box (35 px rows)
            line = int(frame.sort_values("source_share")["id"].iloc[row])
            page.wait_for_function("text => new URLSearchParams(location.search).get('text') === text",
                                   arg=sources[line], timeout=60_000)  # the row's source, in the address
            assert parse_qs(urlparse(page.url).query)["view"] == [VIEW]
            page.get_by_text(f" line {line} (it is in the text box").wait_for(timeout=30_000)
            assert page.locator("[data-testid=stException]").count() == 0
            assert parse_qs(urlparse(page.url).query)["line"] == [str(line)]
            # a click on a point of the scatter (the chart whose y axis is chrF) opens its line, ringed there
            scatter = page.locator(".js-plotly-plot", has=page.locator(".ytitle", has_text="chrF")).first
            scatter.scroll_into_view_if_needed()
            point = scatter.locator(".scatterlayer .trace").first.locator("path.point").nth(1)
            target = point.bounding_box()
            page.mouse.click(target["x"] + target["width"] / 2, target["y"] + target["height"] / 2)
            page.wait_for_function("line => { const l = new URLSearchParams(location.search).get('line');"
                                   " return l !== null && l !== line; }", arg=str(line), timeout=60_000)
            clicked = int(parse_qs(urlparse(page.url).query)["line"][0])
            page.wait_for_function("text => new URLSearchParams(location.search).get('text') === text",
                                   arg=sources[clicked], timeout=60_000)
            page.get_by_text(f" line {clicked} (it is in the text box").wait_for(timeout=30_000)
            scatter.locator(".legendtext", has_text=f"line {clicked}").wait_for(timeout=30_000)
            phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                        has_touch=True).new_page()
            phone.goto(f"{url}/?view=whole_test_set", wait_until="domcontentloaded")
            phone.locator("[data-testid=stDataFrame]").first.wait_for(timeout=90_000)
            for label in ("All lines", "Worst chrF", "Lowest source share", "Flagged"):
                button = phone.locator("[data-testid=stButtonGroup] button", has_text=label).first
                edge = button.bounding_box()
                assert edge["x"] >= 0 and edge["x"] + edge["width"] <= 390, (label, edge)  # nothing cut off
            table = phone.locator("[data-testid=stDataFrame]").first.bounding_box()
            assert table["x"] >= 0 and table["x"] + table["width"] <= 390
        finally:
            browser.close()


def marks(at) -> tuple[list[str], list[str]]:
    """The histogram's annotations and the scatter's trace names."""
    found = charts(at)
    histogram = next(c for c in found if c["layout"]["yaxis"]["title"]["text"] == "lines")
    scatter = next(c for c in found if c["layout"]["yaxis"]["title"]["text"] == "chrF")
    return [a["text"] for a in histogram["layout"].get("annotations", [])], [t["name"] for t in scatter["data"]]


def test_the_open_line_is_in_the_address_and_a_link_opens_it_again(with_table):
    ckpt, frame, sources = with_table
    at = new_app({"view": VIEW, "preset": "lowest-share"})
    shown = at.dataframe[0].value
    line = int(shown["id"].iloc[3])
    at.session_state[test_set.rows_key("test", "lowest-share", "")] = {"selection": {"rows": [3], "columns": [],
                                                                                     "cells": []}}
    at.run()
    assert_clean(at)
    assert at.query_params["line"] == str(line) and at.query_params["preset"] == "lowest-share"  # the sort too
    picker = at.selectbox(key=test_set.SIGNAL)  # short labels, each signal's words in the help (none cut short)
    assert all(len(label) <= 30 for label in picker.options) and "source share" in picker.options
    help_text = plain(picker.help)
    assert all(f"**{test_set.LABELS[s]}**: {tables.SIGNAL_HELP[s]}" in help_text for s in ("chrf", "source_share"))
    annotations, traces = marks(at)
    assert f"line {line}" in annotations and f"line {line}" in traces  # marked on both charts
    link = {k: v for k, v in at.query_params.items() if k != "text"}  # the line alone names the sentence
    again = new_app(link)
    assert_clean(again)
    assert again.session_state["source_text"] == sources[line] and again.query_params["line"] == str(line)
    key = test_set.rows_key("test", "lowest-share", "", ("test", line))
    assert list(again.session_state[key]["selection"]["rows"]) == [3]  # the table shows it selected
    assert any(f"Open in every view: test line {line}" in c.value for c in again.caption)
    assert f"line {line}" in marks(again)[0]
    named = f"test line {line} · Translation"  # the translation panel names it, in every view
    assert any(named in c.value for c in again.caption)
    heatmap = set_view(again, "heatmap")  # another view: the address keeps the line and its table, the panel its name
    assert_clean(heatmap)
    assert heatmap.query_params["line"] == str(line) and heatmap.query_params["table"] == "test"
    assert any(named in c.value for c in heatmap.caption)
    elsewhere = new_app(dict(heatmap.query_params))  # a link to that view names it too
    assert_clean(elsewhere)
    assert elsewhere.query_params["line"] == str(line) and any(named in c.value for c in elsewhere.caption)
    lying = new_app({**heatmap.query_params, "text": "A different sentence."})  # a line= that is not the text's
    assert "line" not in lying.query_params and not any("test line" in c.value for c in lying.caption)
    again = set_view(heatmap, VIEW)
    again.text_area(key="source_text").set_value("A different sentence.")  # typed over: no line is open
    again.button(key="translate").click()
    again.run()
    assert_clean(again)
    assert "line" not in again.query_params and not any("Open in every view" in c.value for c in again.caption)
    assert not any("test line" in c.value for c in again.caption)
    assert not any(a.startswith("line ") for a in marks(again)[0])


@pytest.mark.parametrize("asked", ["999", "x1"])
def test_a_link_to_a_line_the_table_lacks_opens_nothing(with_table, asked):
    at = new_app({"view": VIEW, "line": asked, "text": "A dog."})
    assert_clean(at)
    assert at.session_state["source_text"] == "A dog." and "line" not in at.query_params
    said = " ".join([*(c.value for c in at.caption), *(i.value for i in at.info), *(t.value for t in at.text)])
    assert "names line 999, which this table does not have" in said if asked == "999" else "not understood" in said


def test_a_click_on_a_point_of_the_scatter_opens_its_line(with_table):
    ckpt, frame, sources = with_table
    at = new_app({"view": VIEW})
    line = int(frame.dropna(subset=["chrf"])["id"].iloc[5])
    point = {"curve_number": 0, "point_number": 1, "point_index": 1, "customdata": line}
    at.session_state[lines.SCATTER] = {"selection": {"points": [point], "point_indices": [1], "box": [],
                                                     "lasso": []}}
    at.run()
    assert_clean(at)
    assert at.session_state["source_text"] == sources[line] and at.query_params["line"] == str(line)
    annotations, traces = marks(at)
    assert f"line {line}" in annotations and f"line {line}" in traces
    key = test_set.rows_key("test", "all", "", ("test", line))
    assert list(at.session_state[key]["selection"]["rows"]) == [list(at.dataframe[0].value["id"]).index(line)]
    for sent in ([{"customdata": "x"}], [{"customdata": 10**12}], "x"):  # a browser may send anything
        at.session_state[lines.SCATTER] = {"selection": {"points": sent, "point_indices": [], "box": [],
                                                         "lasso": []}}
        at.run()
        assert_clean(at)
        assert at.session_state["source_text"] == sources[line]
