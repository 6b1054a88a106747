"""What carries the change: activation and path patching (``transformer.interpret.patching``). Pick a
source word and its substitute, read both translations with the metric, pick the step and the foil, and see which
encoder layers and positions, which decoder layers' readings of the source and which heads carry the change; a
click on a head opens its attention."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from ..analysis import patching
from ..drawing import patching as drawing
from ..page import controls, heatmaps, params, plots
from ..page.params import Param, int_in, one_of
from ..page.state import ViewContext
from ..parts import Table
from ..parts import what_carries_the_change as described  # its description (the offline page's, a notebook's)

PATCH_WORD, PATCH_SUBSTITUTE, PATCH_STEP, PATCH_FOIL, PATCH_DIRECTION, PATCH_HEAD = (
    "patch_word", "patch_substitute", "patch_step", "patch_foil", "patch_direction", "patch_head")
EDITED_TEXT = "_patch_text"  # the sentence the picked word and substitute belong to
LAST = "patch_last"  # the last patching drawn: (text, settings, its arguments), for Export's file
AUTO = -1  # the step or foil the library picks (the address leaves it out)
HEAD_KINDS = {"cross_head": "cross", "dec_head": "decoder"}  # a heads chart's site kind -> its attention kind


def _from_one(text: str) -> int | None:
    value = int_in(1, 10_000)(text)
    return None if value is None else value - 1


def _substitute(text: str) -> str | None:
    text = str(text).strip()
    return text if patching.SUBSTITUTE.fullmatch(text) else None


PARAMS = (Param("pw", PATCH_WORD, _from_one, None, lambda v: str(int(v) + 1)),
          Param("ps", PATCH_SUBSTITUTE, _substitute),
          Param("pt", PATCH_STEP, _from_one, AUTO, lambda v: str(int(v) + 1)),
          Param("pf", PATCH_FOIL, int_in(0, 10_000_000), AUTO),
          Param("pd", PATCH_DIRECTION, one_of(*patching.DIRECTION_WORDS), "denoise"),
          controls.head_ref_param("ph", PATCH_HEAD))


def another_word() -> None:
    """A new source word: its own first substitute, and the library's step and foil again."""
    for key in (PATCH_SUBSTITUTE, PATCH_STEP, PATCH_FOIL):
        st.session_state.pop(key, None)


def pick_edit(ctx: ViewContext) -> str | None:
    """The word and substitute pickers (a substitute may be typed); the edited text, or None (and why, said)."""
    result, tr = ctx.result, ctx.tr
    spans = patching.words(result.text)
    if not spans:
        st.info("This sentence has no word to swap.", icon=":material/info:")
        return None
    src_lang = result.settings.src_lang
    linked = st.session_state.get(params.FROM_LINK, {})
    from_link = PATCH_WORD in linked or PATCH_SUBSTITUTE in linked  # a link's edit is this sentence's
    linked.pop(PATCH_SUBSTITUTE, None)
    if st.session_state.get(EDITED_TEXT) != result.text and not from_link:  # another sentence: its own edit
        for key in (PATCH_WORD, PATCH_SUBSTITUTE, PATCH_STEP, PATCH_FOIL):
            st.session_state.pop(key, None)
    st.session_state[EDITED_TEXT] = result.text
    first = described.default_edit(tr, result) if PATCH_WORD not in st.session_state else None
    c1, c2 = st.columns(2, vertical_alignment="bottom")
    index = controls.choose(c1.selectbox, "Source word", list(range(len(spans))), PATCH_WORD, first[0] if first else 0,
                            format_func=lambda i: f"{i + 1}: {spans[i][2]}", on_change=another_word)
    offered = ctx.model.substitutes(result.text, index, src_lang)
    typed = st.session_state.get(PATCH_SUBSTITUTE)
    options = offered + ([typed] if isinstance(typed, str) and typed not in offered else [])
    if not options:
        c2.caption(f"No word of the vocabulary with as many pieces as {spans[index][2]!r} was found: type one.")
    st.session_state.setdefault(PATCH_SUBSTITUTE, options[0] if options else None)
    substitute = c2.selectbox("Substitute (same number of pieces)", options, key=PATCH_SUBSTITUTE,
                              persist_state="session", accept_new_options=True, placeholder="Type a word…",
                              help="Words nearest the source word's embedding that keep the sentence's number of "
                                   "pieces; type another to try it.")
    if not substitute:
        return None
    if not patching.SUBSTITUTE.fullmatch(str(substitute)):
        st.warning("A substitute is one word of at most 40 characters.", icon=":material/edit_off:")
        return None
    edited = patching.edited_text(result.text, index, str(substitute))
    why = patching.same_length(tr, result, edited)
    if why:
        st.warning(f"Not patched: {why}.", icon=":material/edit_off:")
        return None
    return edited


def follow_click(kind: str, key: str) -> None:
    """A new click on the heads chart ``key`` (of attention ``kind``) opens that head (``PATCH_HEAD``, in the
    address)."""
    points = ((st.session_state.get(key) or {}).get("selection") or {}).get("points") or []
    seen = f"_{key}_points"
    if points != st.session_state.get(seen):
        st.session_state[seen] = points
        picked = drawing.head_pick({"points": points})
        if picked is not None:
            st.session_state[PATCH_HEAD] = controls.head_ref((kind, *picked))


def render(ctx: ViewContext) -> None:
    """The edit, both translations with the metric, step / foil / direction, the heatmaps and an opened head."""
    result, tr = ctx.result, ctx.tr
    st.caption(described.INTRO)
    fits, notices = described.fits(tr, result)
    controls.capped(notices)
    if not fits or not result.target_ids:
        return
    edited = pick_edit(ctx)
    if edited is None:
        return
    forced = len(tr.tokenizer.target_prefix(result.settings.tgt_lang))  # a language code is no step
    steps = list(range(forced, len(result.target_ids)))
    step = controls.settle(PATCH_STEP, [AUTO, *steps], AUTO)
    foil_id = st.session_state.get(PATCH_FOIL, AUTO)
    direction = controls.settle(PATCH_DIRECTION, list(patching.DIRECTION_WORDS), "denoise")
    args = (edited, None if step == AUTO else step, None if foil_id == AUTO else foil_id, direction)
    try:
        patched = ctx.model.beyond("patching", result, *args)
    except ValueError as err:  # a step or foil the library refuses (a link's): said in one line, back to auto
        if args[1:3] == (None, None):
            st.warning(f"Not patched: {err}", icon=":material/edit_off:")
            return
        st.warning(f"The step and foil are back to auto: {err}", icon=":material/edit_off:")
        st.session_state[PATCH_STEP], st.session_state[PATCH_FOIL] = AUTO, AUTO
        args = (edited, None, None, direction)
        patched = ctx.model.beyond("patching", result, *args)
    st.session_state[LAST] = (result.text, result.settings, args)
    r = patched.result
    target, foil = tr.tokenizer.pieces([r.target, r.foil])
    for name, source, translation, m, logp in described.runs(result, patched):
        st.markdown(f"**{name}:** {controls.md_escape(source)} → {controls.md_escape(translation)}  \n"
                    f"m = {m:+.3f} · p({controls.md_escape(target)}) = {math.exp(logp):.3f}")
    c1, c2, c3 = st.columns([2, 2, 3], vertical_alignment="bottom")
    outputs = result.target_tokens
    c1.selectbox("Output step", [AUTO, *steps], key=PATCH_STEP, persist_state="session",
                 format_func=lambda t: f"auto: {r.step + 1}: {outputs[r.step]}" if t == AUTO
                 else f"{t + 1}: {outputs[t]}", help="Both runs read the original translation up to this step; "
                 "auto: the first step where the two translations differ.")
    candidates = [int(i) for i in result.topk_ids[r.step]] if r.step < len(result.topk_ids) else []
    foils = [AUTO, *(i for i in dict.fromkeys([r.foil, *candidates]) if i != r.target)]
    controls.settle(PATCH_FOIL, foils, AUTO)
    c2.selectbox("Foil", foils, key=PATCH_FOIL, persist_state="session",
                 format_func=lambda i: f"auto: {foil}" if i == AUTO else tr.tokenizer.pieces([i])[0],
                 help=f"{described.METRIC}: the target is the original translation's piece at the step; auto: the "
                      "edited run's top piece there.")
    c3.segmented_control("Direction", list(patching.DIRECTION_WORDS), key=PATCH_DIRECTION, persist_state="session",
                         required=True, format_func=str.capitalize)
    st.caption(patching.DIRECTION_WORDS[direction])
    st.caption(controls.md_escape(described.metric_words(tr, result, patched)))
    if patched.note:
        st.warning(f"Nothing patched: {patched.note}.", icon=":material/info:")
        return
    for part in described.preview_parts(result, patched):  # a large model's: first-order charts, its top sites
        if isinstance(part, Table):
            st.dataframe(pd.DataFrame(part.rows, columns=part.columns).set_index(part.columns[0]), width="stretch")
        else:
            st.info(controls.md_escape(part.text), icon=":material/speed:")
    n_layers = (tr.config.n_encoder_layers, tr.config.n_decoder_layers)
    charts = described.charts(result, patched, n_layers)
    st.caption(described.SCALE_NOTE)
    heads = [c for c in charts if c.name.startswith("patching-cross-head") or c.name.startswith("patching-dec-head")]
    for chart in charts:
        if chart not in heads:
            plots.chart(chart.figure, chart.name, chart.name.replace("-", "_"))
            if chart.caption:
                st.caption(chart.caption)
    refs = [controls.head_ref((kind, layer, h)) for kind in HEAD_KINDS.values()
            for layer in range(tr.config.n_decoder_layers) for h in range(tr.config.n_heads)]
    controls.keep_if(PATCH_HEAD, st.session_state.get(PATCH_HEAD) in refs)

    st.caption("Click a head to open its attention below.")
    columns = st.columns(len(heads)) if len(heads) > 1 else [st.container()]
    for chart, where in zip(heads, columns):
        key = chart.name.replace("-", "_")
        plots.chart(chart.figure, chart.name, key, where, on_select="rerun", selection_mode="points")
        follow_click(HEAD_KINDS["cross_head" if "cross" in chart.name else "dec_head"], key)
    st.session_state.setdefault(PATCH_HEAD, None)
    ref = st.selectbox("Open a head's attention", refs, key=PATCH_HEAD, persist_state="session",
                       placeholder="Pick a head…",
                       format_func=lambda v: controls.head_label(controls.parse_head_ref(v)))
    if ref:
        kind, layer, head = controls.parse_head_ref(ref)
        heatmaps.draw_heatmap(result, kind, layer + 1, str(head + 1), key="patch_head_chart")
    st.download_button("Download these numbers (NPZ)", ctx.model.patching_file(result.text, result.settings, args),
                       file_name="patching.npz", mime="application/octet-stream", key="download_patching",
                       icon=":material/download:", on_click="ignore")
