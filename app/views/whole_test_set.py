"""Whole test set: every line's translation and signals in one table (``python -m transformer.corpus``), with
presets, a histogram of one signal and source share against chrF (:mod:`app.views.whole_test_set_charts`); a selected
row opens its sentence in every view.

The tables shipped beside a checkpoint (``tables/<split>.parquet``) hold ids, translations and signals; their
sources and references are read back from a copy of the data set (:func:`app.analysis.tables.join_inputs`). A
pasted list is computed here, within the request's work limit (``ATTN_MAX_WORK``). In public mode those are the only
tables; elsewhere a table file on this machine can be opened too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from transformer.interpret.columns import COLUMNS
from transformer.interpret.flagging import flag_rule

from .. import registry
from ..analysis import tables
from ..analysis.inference import MAX_INPUT_CHARS, take_input
from ..limits import ledger, work
from ..models import catalog
from ..page import controls, state
from ..page.params import Param, one_of
from ..page.state import ViewContext
from . import whole_test_set_lines as lines
from .whole_test_set_charts import LABELS, SIGNAL, charts
from .whole_test_set_lines import LINE, OPENED

TABLE, PRESET, FIND = "testset_table", "testset_preset", "testset_find"
WHOLE = "testset_whole_words"  # the find box matches whole words only
PATH = "testset_path"  # a table file on this machine (not in public mode; never in the address)
PASTE, FILE = ":paste", ":file"  # the table choices that are not a shipped table's name
PASTED, REFS, ASKED = "testset_paste", "testset_refs", "_testset_asked"  # the pasted list, and what was computed
PAGE = "testset_page"  # the page of the table shown (0-based), of the table, preset and filter in PAGED
PAGED = "_testset_paged"
MAX_LIST = 200  # lines of a pasted list (the work limit may allow fewer)
MAX_LINK_LIST = 20_000  # characters of a pasted list a link may carry
# of a request's work (ATTN_MAX_WORK), kept for the pasted list (the registry's): 800 units in public mode, about 28
# Multi30k captions at beam 4 with the shipped model (a unit's time: docs/limits.md)
WORK_SHARE = registry.VIEWS["whole_test_set"].work_share
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _table_choice(text: str) -> str | None:
    """A link's ``table=``: a shipped table's name (checked against the model's tables where used), ``paste`` or
    ``file``."""
    text = text.strip()
    if text in ("paste", "file"):
        return ":" + text
    return text if _NAME.fullmatch(text) else None


def _find(text: str) -> str | None:
    found = state.clean_text(text).strip()[:100]
    return found or None


def _pasted(text: str) -> str | None:
    """A link's pasted list (``lines=``, ``refs=``): cleaned, its first ``MAX_LIST`` lines, ``MAX_LINK_LIST``
    characters at most."""
    lines = state.clean_text(text)[:MAX_LINK_LIST].split("\n")[:MAX_LIST]
    return "\n".join(lines) or None


def _path(text: str) -> str | None:
    path = state.clean_text(text).strip()
    return path if 0 < len(path) <= 300 and "\n" not in path else None


def _open_path(path: str, ss: MutableMapping[str, Any]) -> str | None:
    """A link's table file, except on a public server (which opens no file a link names)."""
    if catalog.public_mode():
        return "this server opens only the tables shipped with its models"
    ss[PATH] = path
    return None


def _written_line(ss: MutableMapping[str, Any]) -> str | None:
    """The address's ``line=``: the line of the shown table that is open (a selected row, a clicked point)."""
    line = lines.open_id(ss, ss.get(TABLE))
    return None if line is None else str(line)


def _written_table(ss: Mapping[str, Any]) -> str | None:
    """The address's ``table=`` (the shown table's name)."""
    table = ss.get(TABLE)
    return None if table is None else str(table).lstrip(":")


# The address holds the open line (line=, beside its table and preset), the pasted list (a link reopens it, to
# compute with one click; it never computes by itself) and, off a public server, the table file's path.
PARAMS = (Param("table", TABLE, _table_choice, dump=lambda v: str(v).lstrip(":"),
                everywhere=lambda ss: _written_table(ss) if _written_line(ss) else None),
          Param("preset", PRESET, one_of(*tables.PRESETS), default="all"),
          Param("signal", SIGNAL, one_of(*tables.SIGNAL_HELP), default="chrf"),
          Param("find", FIND, _find, default=""),
          Param("line", LINE, lines.line_of, write=_written_line, clears=(LINE, OPENED, lines.JUMPED),
                everywhere=_written_line),  # every view shows the open line: its address names it too
          Param("words", WHOLE, lambda v: {"1": True, "0": False}.get(v), dump=lambda v: "1" if v else "0",
                default=False),
          Param("lines", PASTED, _pasted, default=""),
          Param("refs", REFS, _pasted, default=""),
          Param("file", PATH, _path, default="", adopt=_open_path))

# Headers (LABELS) and tooltips: each column's one description (transformer.interpret.columns.COLUMNS)
COLUMN_HELP = {name: column.help for name, column in COLUMNS.items()}
FLAG_MARK = "⚠ flagged"  # the flag column's mark: a label, not a checkbox beside the row's selection box
ORDER = ("id", "flag", "flag_score", "source", "translation", "reference", "chrf", "source_share", "source_share_min",
         "eos_attention", "seq_logprob", "min_piece_logprob", "omission", "bleu", "score", "repetition", "length_ratio",
         "hit_max_len", "unk")


NARROW = {"id": 52, "flag": 84, "flag_score": 76}  # px: the first columns leave a phone's screen to the sentences


def column_config(frame: pd.DataFrame) -> dict:
    """Bars for the shares, numbers with a fitting format, the texts as plain text; headers in plain words."""
    config: dict = {}
    for column in frame.columns:
        label, tip = LABELS.get(column, column), COLUMN_HELP.get(column)
        if column in tables.SHARES:
            config[column] = st.column_config.ProgressColumn(label, min_value=0.0, max_value=1.0, format="%.2f",
                                                             help=tip, width=112)
        elif column == "flag":  # shown as a mark (marked), so never mistaken for the row's selection box
            config[column] = st.column_config.TextColumn(label, help=tip, width=NARROW.get(column))
        elif column in ("hit_max_len", "truncated"):
            config[column] = st.column_config.CheckboxColumn(label, help=tip, width=NARROW.get(column))
        elif column in (*tables.TEXTS, "note"):
            config[column] = st.column_config.TextColumn(label, help=tip, width="medium")
        elif column in ("id", "unk", "repetition", "source_pieces", "output_pieces"):
            config[column] = st.column_config.NumberColumn(label, format="%d", help=tip, width=NARROW.get(column))
        elif column == "flag_score":
            config[column] = st.column_config.NumberColumn(label, format="%.2f", help=tip, width=NARROW[column])
        elif column in ("chrf", "bleu"):
            config[column] = st.column_config.NumberColumn(label, format="%.1f", help=tip, width="small")
        elif pd.api.types.is_numeric_dtype(frame[column]):
            config[column] = st.column_config.NumberColumn(label, format="%.3f", help=tip, width=None)
    return config


def marked(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows as the table shows them: the flag as a mark (``FLAG_MARK``, or empty), not true/false."""
    return frame.assign(flag=np.where(frame["flag"].to_numpy(dtype=bool), FLAG_MARK, ""))


def shown_columns(frame: pd.DataFrame) -> list[str]:
    """The columns in the table's order, the contract's first, others after; a column with no value in any line
    (sources without the data set, chrF without references) is left out rather than shown as a column of blanks."""
    kept = [c for c in frame.columns if c in ("id", "flag", "translation") or not frame[c].isna().all()]
    return [c for c in ORDER if c in kept] + [c for c in kept if c not in ORDER]


def rows_key(*parts: object) -> str:
    """The dataframe's key for one table, preset and filter: another of them starts with no row selected."""
    return "testset_rows_" + hashlib.sha1(repr(parts).encode()).hexdigest()[:12]


def choices(ctx: ViewContext) -> tuple[list[str], dict[str, str]]:
    """The tables this server offers for the loaded model: its shipped ones, a pasted list, and (not in public mode)
    a table file; with how the picker names each."""
    shipped = tables.shipped_tables(ctx.tr.path)
    names = {name: f"{name} (shipped with this model)" for name in shipped}
    names[PASTE] = "Sentences you paste (computed here)"
    if not catalog.public_mode():
        names[FILE] = "A table file on this machine"
    return list(names), names


def load(ctx: ViewContext, choice: str) -> tables.Table | None:
    """The chosen table with its inputs joined, or None (with a message, or the pasted list's form)."""
    if choice == PASTE:
        return pasted_table(ctx)
    if choice == FILE:
        path = st.text_input("Table file (.parquet, made by python -m transformer.corpus)", key=PATH,
                             placeholder="runs/test.parquet", persist_state="session")
        if not path.strip():
            st.info("Name a table file made by `python -m transformer.corpus --out FILE.parquet`.",
                    icon=":material/table:")
            return None
        source = Path(catalog.resolve_checkpoint(path.strip())).expanduser()
        if not source.is_file():  # a typo, most often: a warning, not an error
            st.warning(f"There is no table file at {controls.md_escape(path.strip())}.", icon=":material/search_off:")
            return None
    else:
        source = tables.shipped_tables(ctx.tr.path)[choice]
    try:
        table = tables.join_inputs(tables.read_table(source))
    except tables.TableError as err:
        st.error(f"This table cannot be shown: {controls.md_escape(catalog.visitor_message(str(err)))}",
                 icon=":material/error:")
        return None
    if table.notes:  # what reading a table file left out or cut: its words are the file's, shown as text
        st.info(controls.md_escape(f"In this table, {'; '.join(table.notes)}."), icon=":material/rule:")
    return table


def pasted_table(ctx: ViewContext) -> tables.Table | None:
    """The pasted list's form; once asked, its table, computed here with a progress bar for as many lines, from the
    first, as this request's work limit allows (a notice says when that is fewer than pasted)."""
    ss = st.session_state
    cap_pasted(ss)
    st.text_area(f"Sentences to translate, one a line (at most {MAX_LIST})", key=PASTED, height=120,
                 persist_state="session", max_chars=MAX_LINK_LIST,  # kept while a shipped table shows
                 placeholder="A dog runs on the beach.\nSKU 4471-AX 9930\nzzz zzz zzz zzz")
    st.text_area("Their references, one a line in the same order (optional: for chrF and BLEU)", key=REFS,
                 height=68, persist_state="session", max_chars=MAX_LINK_LIST)
    if any(len(ss.get(key) or "") >= MAX_LINK_LIST for key in (PASTED, REFS)):  # full: what was cut is left out
        st.info(f"A box holds at most {MAX_LINK_LIST:,} characters (the page's address holds the list, and a link "
                "carries no more): the rest of what was pasted is left out.", icon=":material/content_cut:")
    asked = st.button("Compute the table", key="testset_compute", type="primary", icon=":material/table:")
    sources, total = tables.pasted_lines(state.clean_text(ss.get(PASTED, "")), MAX_LIST)
    references, _ = tables.pasted_lines(state.clean_text(ss.get(REFS, "")), MAX_LIST)
    if total > MAX_LIST:
        st.info(f"{total:,} lines were pasted; the first {MAX_LIST} are used.", icon=":material/content_cut:")
    if references and len(references) != len(sources):
        st.warning(f"{len(references)} references for {len(sources)} sentences: the references are left out (one "
                   "a line, in the same order, for every sentence).", icon=":material/rule:")
        references = []
    long = sum(len(line) > MAX_INPUT_CHARS for line in sources)
    sources = [line[:MAX_INPUT_CHARS] for line in sources]
    if long:
        st.info(f"{long} line(s) were cut to {MAX_INPUT_CHARS:,} characters.", icon=":material/content_cut:")
    settings = state.settings_from_state()
    wanted = (tuple(sources), tuple(references) or None, settings)
    if asked and not sources:
        st.warning("Paste a sentence first: the box is empty.", icon=":material/edit:")
    if asked and sources:
        ss[ASKED] = wanted
    if not sources or ss.get(ASKED) != wanted:
        if sources:
            st.caption("Press Compute the table to translate these lines and measure their signals.")
        return None
    tr = ctx.tr
    # planned against this view's own share, not what the page's sentence left: the same lines whichever sentence
    # is open (a selected row opens another one, and must not change the table)
    fit, estimate = work.table_lines(tr, sources, settings, min(ledger.left(), WORK_SHARE * ledger.max_work()))
    if fit == 0:
        st.warning(f"Even the first line is more work than this server allows per request (ATTN_MAX_WORK, about "
                   f"{ledger.amount(work.table_work(tr, sources[0], settings))} units asked): try shorter lines or a "
                   "smaller beam.", icon=":material/speed:")
        return None
    if fit < len(sources):
        ledger.cut([f"the table holds the first {fit} of the {len(sources)} pasted lines (about "
                  f"{ledger.amount(sum(work.table_work(tr, line, settings) for line in sources))} units asked)"])
    ledger.spend(estimate)
    bar = st.progress(0.0, text=f"Translating and measuring {fit} lines…")

    def progress(done: int, count: int) -> None:
        bar.progress(done / max(count, 1), text=f"Translating and measuring: {done} of {count} lines")

    try:
        rows = ctx.model.table(tuple(sources[:fit]), tuple(references[:fit]) or None, settings, progress)
    except Exception as err:  # never a stack trace
        bar.empty()
        st.error(f"The table could not be computed: {type(err).__name__}: "
                 f"{controls.md_escape(catalog.visitor_message(err))}", icon=":material/error:")
        return None
    bar.empty()
    manifest = {"model": {"name": Path(catalog.short_name(ctx.model.checkpoint)).name,
                          "flag_rule": flag_rule(tr.path).to_json()},
                "settings": {"beam": settings.beam_size, "alpha": settings.alpha}, "input": {"lines": fit}}
    return tables.Table(tables.normalise(pd.DataFrame(rows), "the pasted list"), manifest)


def cap_pasted(ss: MutableMapping[str, Any]) -> None:
    """The pasted list and its references cut to ``MAX_LINK_LIST`` characters, as a link's are: they go into the
    page's address (the boxes' ``max_chars`` holds a browser's typing to it; this, whatever else set them)."""
    for key in (PASTED, REFS):
        text = ss.get(key)
        if text is not None and not isinstance(text, str):
            ss[key] = ""
        elif text is not None and len(text) > MAX_LINK_LIST:
            ss[key] = text[:MAX_LINK_LIST]


def render(ctx: ViewContext) -> None:
    """The table picker, presets and filter; the table; the histogram and the scatter."""
    options, names = choices(ctx)
    default = options[0]
    top = st.columns([2, 3], vertical_alignment="bottom")
    with top[0]:
        choice = controls.choose(st.selectbox, "Table", options, TABLE, default, format_func=names.get,
                                 help="A table has one row per input line: its translation and the signals that "
                                      "find bad or hallucinated translations (python -m transformer.corpus).")
    with top[1]:
        preset = controls.choose(st.segmented_control, "Show", list(tables.PRESETS), PRESET, "all",
                                 format_func=lambda p: tables.PRESETS[p].label, required=True, wrap=True,
                                 help=" ".join(f"{p.label}: {p.help}." for p in tables.PRESETS.values())
                                 + " Click a column header to sort by it.")
    table = load(ctx, choice)
    if table is None:
        return
    frame = table.frame
    find_row = st.columns([4, 1], vertical_alignment="center")
    find = find_row[0].text_input("Find", key=FIND, placeholder="Lines whose source, translation or reference "
                                  "contains…", label_visibility="collapsed", persist_state="session")
    whole = find_row[1].toggle("Whole words", key=WHOLE, persist_state="session",
                               help='Only where the text is a word of its own: "dog" then does not find "hotdog".')
    if table.inputs_note:  # it names the manifest's split and languages: as text, never Markdown
        st.info(controls.md_escape(table.inputs_note), icon=":material/description:")
    flagged = int(frame["flag"].sum())
    st.caption(f"{controls.md_escape(tables.table_caption(table.manifest, len(frame)))} · {flagged:,} flagged "
               f"({flagged / max(len(frame), 1):.1%}). Select a row (the box at its left) to open that sentence in "
               "every view.")
    shown = tables.apply_preset(frame, preset, find or "", bool(whole))
    if (find or "").strip():
        st.caption(f"{len(shown):,} {'line matches' if len(shown) == 1 else 'lines match'} "
                   f"“{controls.md_escape(find.strip())}”{' as a whole word' if whole else ''}.")
    if shown.empty:
        st.info("No line matches: try another preset or clear the filter.", icon=":material/filter_alt_off:")
    lines.open_asked(frame, choice, table.manifest)  # a link's line=
    order = shown_columns(frame)
    page, shown = paged(shown, order, (choice, preset, find or "", bool(whole)))
    jumped = st.session_state.get(lines.JUMPED)  # a line opened from a point or a link: the table starts with it
    key = rows_key(choice, preset, find or "", *(("whole words",) if whole else ()), *([page] if page else []),
                   *([jumped] if jumped else []))
    event = st.dataframe(marked(shown), hide_index=True, width="stretch", height=360, on_select="rerun",
                         selection_mode="single-row", key=key, column_order=order,
                         column_config=column_config(shown), selection_default=lines.selection_of(shown, key, choice))
    lines.follow(event, key, shown, choice, table.manifest)
    lines.opened_line(choice)
    charts(ctx, frame, tables.rule_of(table.manifest), choice, table.manifest)


def open_line_name(ctx: ViewContext) -> str | None:
    """What names the sentence shown while it is a test-set line opened in Whole test set ("test_2016_flickr line
    57"), in any view, until the text changes; None otherwise. A link's ``line=`` to another view (its ``table=`` a
    shipped table) is opened once its row's source is the link's text."""
    ss = st.session_state
    choice, asked = ss.get(TABLE), ss.get(LINE)
    if isinstance(asked, int) and lines.open_id(ss, choice) is None:
        shipped = tables.shipped_tables(ctx.tr.path)
        if choice in shipped:
            try:
                table = tables.join_inputs(tables.read_table(shipped[choice]))
            except tables.TableError:
                table = None
            row = None if table is None else lines.row_of_line(table.frame, int(asked))
            if row is not None and row["source"] is not None and take_input(str(row["source"]))[0] == \
                    ss.get(state.SOURCE_TEXT):
                ss[OPENED] = (choice, int(asked), ss.get(state.SOURCE_TEXT))
                ss.pop(LINE, None)
    line = lines.open_id(ss, choice)
    return None if line is None else lines.line_name(choice, line)


def paged(shown: pd.DataFrame, columns: list[str], which: tuple) -> tuple[int, pd.DataFrame]:
    """The page of ``shown`` to send (``tables.pages``: about 1 MB at most), with a page picker and a caption when
    there is more than one; ``which`` (table, preset, filter): another one starts at the first page."""
    starts = tables.pages(shown, columns)
    if len(starts) <= 2:
        return 0, shown
    ss = st.session_state
    count = len(starts) - 1
    if ss.get(PAGED) != which or ss.get(PAGE) not in range(count):
        ss[PAGED] = which
        ss[PAGE] = 0
    page = st.selectbox("Page", list(range(count)), key=PAGE,
                        format_func=lambda i: f"rows {starts[i] + 1:,}-{starts[i + 1]:,}",
                        help="The table is sent a page at a time (about 1 MB at most, as every chart).")
    page = page if isinstance(page, int) and 0 <= page < count else 0
    st.caption(f"Rows {starts[page] + 1:,}-{starts[page + 1]:,} of {len(shown):,}: a page holds at most about "
               f"{tables.PAGE_BYTES / 1e6:.0f} MB of the table and {tables.PAGE_ROWS:,} rows; pick another page "
               "above.")
    return page, shown.iloc[starts[page]:starts[page + 1]].reset_index(drop=True)
