"""The sidebar: the model (checkpoint, device) and the decoding settings. They are settled before the page draws
anything (:func:`chosen_model`: a broken default's replacement, the picker's choice, the defaults) and drawn after
the page's picture (:func:`sidebar`, :func:`show_model_facts`), so that the browser draws the picture first."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
import torch

import transformer
from transformer import Translator, environment
from transformer.network.weights import packed_bytes

from ..analysis import cached
from ..models import card, catalog
from . import state
from .controls import choose, md_escape, settle


def chosen_model() -> tuple[cached.Model, list[tuple[str, str]]]:
    """The model and decoding settings this run uses, settled before anything is drawn (the sidebar that shows
    them is drawn after the page's picture, :func:`sidebar`): a broken default's replacement, the picked model,
    the device, the decoding defaults. Returns the model and what the sidebar must say (notice, icon)."""
    ss, default_device = st.session_state, catalog.default_device()
    notices = [fall_back_from_a_broken_default(_device(ss.get(state.DEVICE, default_device)))]
    notices.append(settle_model_choice())
    settle(state.DEVICE, devices(), default_device)
    settle(state.SEARCH, state.SEARCHES, state.SIDEBAR_DEFAULTS[state.SEARCH])
    for key in (state.BEAM, state.MAX_A, state.MAX_B):
        ss.setdefault(key, state.SIDEBAR_DEFAULTS[key])
    ss.setdefault(state.ALPHA, catalog.model_alpha(ss[state.CHECKPOINT]))
    return cached.Model(ss[state.CHECKPOINT].strip(), _device(ss[state.DEVICE])), [n for n in notices if n]


def devices() -> list[str]:
    """The Device picker's choices: auto, the CPU and each GPU present."""
    return ["auto", "cpu"] + (["cuda"] + [f"cuda:{i}" for i in range(1, torch.cuda.device_count())]
                              if torch.cuda.is_available() else [])


def sidebar(notices: list[tuple[str, str]]) -> None:
    """Checkpoint, device and decoding settings (as :func:`chosen_model` settled them), and its ``notices``."""
    ss = st.session_state
    with st.sidebar:  # the app's name and what it is are at the top of the page, once
        st.subheader("Model")
        for notice, icon in notices:
            st.warning(notice, icon=icon)
        model_picker()
        server = " This server's `ATTN_DEVICE` picks the default." if environment.is_set("ATTN_DEVICE") else ""
        choose(st.selectbox, "Device", devices(), state.DEVICE, catalog.default_device(),
               help="auto = CUDA when a GPU is present, else CPU." + server)
        st.caption(dtype_caption())
        st.subheader("Decoding")
        choose(st.radio, "Search", state.SEARCHES, state.SEARCH, state.SIDEBAR_DEFAULTS[state.SEARCH], horizontal=True)
        st.slider("Beam size", 2, 16, key=state.BEAM, disabled=ss[state.SEARCH] == "Greedy")
        st.slider("Length penalty α", *catalog.ALPHA_RANGE, step=0.1, key=state.ALPHA, format="%.1f",
                  help="GNMT length penalty ((5+|Y|)/6)^α; higher favours longer outputs (beam search only). "
                       f"This model's own: {catalog.alpha_label(ss[state.CHECKPOINT])}; picking a model sets it.")
        c1, c2 = st.columns(2)
        c1.slider("Max length a", 0.0, 4.0, step=0.1, key=state.MAX_A, format="%.1f")
        c2.slider("Max length b", 0, 200, key=state.MAX_B)
        st.caption("At most a × source length + b output tokens (and never past the model's maximum).")


def _device(choice: str) -> str:
    """The device a choice of the Device picker resolves to (``"auto"``: CUDA when present); CPU when unusable."""
    try:
        return str(transformer.resolve_device(choice))
    except transformer.CheckpointError:
        return "cpu"


def number(name: str, value: float) -> str:
    """A score as a person writes it: whole numbers without decimals (beam 5, 1000 sentences), seconds as
    seconds, else two decimals."""
    if name.endswith("seconds"):
        return f"{value:.1f} s"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def markdown_table(header: tuple[str, str], rows: list[tuple[object, object]]) -> str:
    """A two-column Markdown table, every cell escaped (a light element: no data-grid code for the browser)."""
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {md_escape(a)} | {md_escape(b)} |" for a, b in rows]
    return "\n".join(lines)


def settle_model_choice() -> tuple[str, str] | None:
    """The model picker's choice, settled before it is drawn: in public mode one of the allow-list (a link's
    broken model gives way to it: the notice and its icon are returned), else the free field's model."""
    ss = st.session_state
    infos = cached.get_checkpoint_list()
    options = picker_choices(infos)
    if catalog.public_mode():  # the hosted demo: the allow-list only, no free-form field
        broken = {i.path: i.problem for i in infos if i.problem}
        notice = None
        if ss[state.CHECKPOINT] in broken and ss[state.CHECKPOINT] != ss.get(state.MODEL_CHOICE):  # e.g. a link's
            notice = (f"{md_escape(catalog.short_name(ss[state.CHECKPOINT]))} is unavailable on this server "
                      f"({md_escape(catalog.visitor_message(broken[ss[state.CHECKPOINT]]))}); "
                      f"{md_escape(catalog.short_name(options[0]))} opens instead.", ":material/block:")
        if ss.get(state.MODEL_CHOICE) not in options:
            ss[state.MODEL_CHOICE] = ss[state.CHECKPOINT] if ss[state.CHECKPOINT] in options else options[0]
        ss[state.CHECKPOINT] = ss[state.MODEL_CHOICE]
        return notice
    wanted = ss[state.CHECKPOINT].strip() if ss[state.CHECKPOINT].strip() in options else state.OTHER_MODEL
    if ss.get(state.MODEL_CHOICE) != wanted:
        ss[state.MODEL_CHOICE] = wanted  # follow the free field (typed, or set by a link)
    return None


def picker_choices(infos: list[catalog.CheckpointInfo]) -> list[str]:
    """The Model picker's choices: in public mode the allow-listed models that are not broken (the default if none
    is left); else the usable checkpoints, the Hub's models and "another directory"."""
    if catalog.public_mode():
        broken = {i.path for i in infos if i.problem}
        return [m for m in catalog.allowed_models() if m not in broken] or [catalog.default_checkpoint()]
    return [*(i.path for i in infos if i.problem is None), *catalog.hub_models(), state.OTHER_MODEL]


def model_picker() -> None:
    """The checkpoints under ``checkpoints/`` (language pair, layout, test BLEU), and a free field for any
    directory or Hub repo id. Broken directories are named, not offered (the choice is settled by
    :func:`settle_model_choice`)."""
    ss = st.session_state
    infos = cached.get_checkpoint_list()
    usable = {i.path: i for i in infos if i.problem is None}
    options = picker_choices(infos)
    if catalog.public_mode():

        def chosen() -> None:
            ss[state.CHECKPOINT] = ss[state.MODEL_CHOICE]
            state.adopt_model_decoding()

        st.selectbox("Model", options, key=state.MODEL_CHOICE, on_change=chosen,  # never a path of the server
                     format_func=lambda p: Path(p).name if p in usable else
                     catalog.hub_label(p) if p in catalog.MULTILINGUAL else catalog.short_name(p))
        if ss[state.CHECKPOINT] in usable:
            st.caption(md_escape(usable[ss[state.CHECKPOINT]].label()))
        return

    def picked() -> None:
        if ss[state.MODEL_CHOICE] != state.OTHER_MODEL:
            ss[state.CHECKPOINT] = ss[state.MODEL_CHOICE]
            state.adopt_model_decoding()

    st.selectbox("Model", options, key=state.MODEL_CHOICE, on_change=picked,  # short names: the sidebar is narrow
                 format_func=lambda p: Path(p).name if p in usable else
                 catalog.hub_label(p) if p in options[len(usable):-1] else p)
    if ss[state.MODEL_CHOICE] in usable:
        st.caption(md_escape(usable[ss[state.MODEL_CHOICE]].label()))
    st.text_input("Checkpoint: directory or Hugging Face Hub repo id", key=state.CHECKPOINT,
                  on_change=state.adopt_model_decoding,
                  help="Defaults to $ATTN_CHECKPOINT or checkpoints/multi30k-en-de.")
    for info in infos:
        if info.problem:
            st.caption(f":material/block: {md_escape(info.path)} is unavailable: {md_escape(info.problem)}")


def show_model_facts(tr: Translator, checkpoint: str = "") -> None:
    """Sizes, parameters and the scores of the model card, in the sidebar (where it was loaded from: in public mode
    the model's short name, never the server's path)."""
    with st.sidebar:
        facts = card.model_facts(tr)
        st.markdown(markdown_table(("property", "value"), [(k, v) for k, v in facts.items()]))
        scores = card.model_scores(tr)
        if scores:
            st.caption("Scores from the model card (beam search, sacreBLEU)")
            st.markdown(markdown_table(("score", "value"), [(k, number(k, v)) for k, v in scores.items()]))
        meta = tr.metadata or {}
        with st.expander("Training details"):
            for caption, text in card.training_recipe(meta):  # how the shipped weights were really made
                st.caption(md_escape(caption))
                st.text(text)
            history = meta.get("history")
            if isinstance(history, list) and history:
                st.caption(f"{len(history)} validations during training; the curves are in the Training evolution "
                           "view.")
            if not meta:
                st.caption("No metadata.json in this checkpoint.")
            where = catalog.short_name(checkpoint or Path(str(tr.path)).name) if catalog.public_mode() else tr.path
            st.caption(f"Loaded from {md_escape(where)}")
            packed = packed_bytes(tr.model)
            if packed:  # the products where oneDNN measured faster than MKL on this CPU (ATTN_GEMM)
                st.caption(f"Plus {packed / 1e6:,.1f} MB of the weights prepacked for oneDNN's product, for the layers "
                           "where it measured faster than MKL's on this CPU (or ATTN_GEMM=onednn)")


def dtype_caption() -> str:
    """What the weights are kept in, beside the device (where the server's ``$ATTN_DTYPE`` decides it; the variable
    named only when it is set)."""
    chosen = " (this server's `ATTN_DTYPE`)" if environment.is_set("ATTN_DTYPE") else ""
    return f"Weights in {catalog.model_dtype()}{chosen}; attention weights and every interpretation in float32."


def fallback_model(broken: cached.Model) -> str | None:
    """A model to open instead of ``broken``: the first allow-listed checkpoint directory that passes its check and
    has not failed to load here (on the same device), or None."""
    usable = [i.path for i in cached.get_checkpoint_list() if i.problem is None]
    return next((m for m in catalog.allowed_models() if m in usable and m != broken.checkpoint
                 and cached.LOAD_FAILURES.get(cached.Model(m, broken.device)) is None), None)


def fall_back_from_a_broken_default(device: str) -> tuple[str, str] | None:
    """Public mode: when the page would open the default model and it is broken (its check fails, or it failed to
    load on this server), open a working allow-listed model instead, with a notice naming both (short names only)
    and why (returned with its icon, for the sidebar to show). A local server shows the default's error instead
    (whoever runs it can fix it or pick another)."""
    ss = st.session_state
    default = catalog.default_checkpoint()
    if not catalog.public_mode() or ss.get(state.CHECKPOINT, "").strip() != default:
        return None
    broken = cached.Model(default, device)
    problem = next((i.problem for i in cached.get_checkpoint_list() if i.path == default and i.problem), None) \
        or cached.LOAD_FAILURES.get(broken)
    other = fallback_model(broken) if problem else None
    if other is None:
        return None
    ss[state.CHECKPOINT] = ss[state.MODEL_CHOICE] = other  # the picker is drawn after this
    if "alpha" not in (ss.get(state.LAST_URL) or {}):  # the model's own length penalty, unless the link set one
        state.adopt_model_decoding()
    return (f"The default model {md_escape(catalog.short_name(default))} could not be opened "
            f"({md_escape(catalog.visitor_message(problem))}); {md_escape(catalog.short_name(other))} opens instead.",
            ":material/swap_horiz:")
