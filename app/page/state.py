"""The frame's session state and the page address, URL <-> state both ways.

The address always describes what is on screen: the frame's parameters here (text, model, decoding, view,
sentence) and the shown view's own parameters, which each view declares beside its ``render``
(:mod:`app.page.params`). When the address changes from outside (Back or Forward, an edited link), the next run
adopts it instead of writing the current state over it. Everything the visitor changes applies at once.
"""

from __future__ import annotations

import re
import unicodedata
from collections import ChainMap
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from time import sleep
from typing import Any
from urllib.parse import urlencode

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from transformer import Translator
from transformer.decoding import DEFAULT_ALPHA

from ..analysis.cached import Model
from ..analysis.inference import Analysis, DecodeSettings, clean_text, take_input
from ..models.catalog import ALPHA_RANGE, default_checkpoint, model_allowed, model_alpha
from ..registry import view_key
from . import params as P

# ------------------------------------------------------------------------------------------------ keys
CHECKPOINT = "checkpoint"
MODEL_CHOICE = "model_choice"
DEVICE = "device"
SEARCH = "search"
BEAM = "beam_size"
ALPHA = "alpha"
MAX_A = "max_len_a"
MAX_B = "max_len_b"
SOURCE_TEXT = "source_text"
EXAMPLE = "example"
VIEW = "view"
VIEW_GROUP = "view_group"
SENTENCE = "sentence"
SHOW_CARD = "show_card"
SRC_LANG, TGT_LANG = "src_lang", "tgt_lang"  # a multilingual model's language pickers (app.page.languages)
# Plain state (no widget)
PREVIOUS_VIEW = "_previous_view"  # the last view other than Export, for Export's share link
LAST_URL = "_last_url"  # the query parameters this session last wrote
ADOPTED = "_adopted_url"  # (the address last adopted, what it meant as the page writes it; None until its run ends)
IGNORED = "_ignored"  # link parameters the last adoption ignored, to tell the visitor
NOTICES = "_notices"  # what was changed in the visitor's input (cut, bidirectional controls removed)
EMPTY_SUBMIT = "_empty_submit"  # Translate was pressed on an empty box
FIRST_RUN = "_first_run"  # this run is the session's first (a new visitor's first screen), until its picture is sent
BARE_FIRST = "_bare_first_run"  # this run is the session's first and its address had no parameters
# how long a session's first run waits once its picture has been sent (see ``let_the_browser_paint``)
FIRST_PAINT_S = 0.12

EXAMPLES = [
    "A man in a blue shirt is riding a bike down the street.",
    "Two dogs are playing in the snow.",
    "A little girl climbs into a wooden playhouse.",
    "A woman with a red umbrella walks on the beach while her dog runs after a ball near the water.",
    "The boy kicks the ball to his father in the park.",
    "A group of people stand in front of an igloo.",
]
OTHER_MODEL = "Another directory or Hub id (type it below)"
SEARCHES = ["Beam search", "Greedy"]
DEFAULT_VIEW = "heatmap"  # a view's key (app.registry)
_DECODING = DecodeSettings()  # the sidebar starts at the decoding defaults (alpha: the model's own, else the default)
SIDEBAR_DEFAULTS: dict[str, object] = {SEARCH: "Beam search", BEAM: _DECODING.beam_size, ALPHA: DEFAULT_ALPHA,
                                       MAX_A: _DECODING.max_len_a, MAX_B: _DECODING.max_len_b}
_LANG_CODE = re.compile(r"[A-Za-z]{2,3}(_[A-Za-z]{4})?")  # en, eng_Latn: checked by app.page.languages


@dataclass(frozen=True)
class Submitted:
    """The input the page shows: the text and the decoding settings."""

    text: str
    settings: DecodeSettings


@dataclass(frozen=True)
class ViewContext:
    """What a view gets: the model (``app.analysis.cached.Model``: its translator and its cached analyses) and the
    analysed sentence (None before one)."""

    model: Model
    result: Analysis | None
    submitted: Submitted | None

    @property
    def tr(self) -> Translator:
        """The loaded model's translator."""
        return self.model.tr


def take_text(text: str) -> str:
    """The visitor's text as the page uses it: cleaned and cut to ``MAX_INPUT_CHARS``, with a notice for each
    change (shown by the next :func:`show_notices`)."""
    text, notices = take_input(text)
    st.session_state.setdefault(NOTICES, []).extend(notices)
    return text


def show_notices() -> None:
    """Say what was changed in the visitor's input, once."""
    for notice in st.session_state.pop(NOTICES, []):
        st.info(notice, icon=":material/content_cut:")


LINK_NAME_CHARS = 32  # a link's parameter name is shown cut to this many characters
LINK_NAMES_SHOWN = 12  # and at most this many of them


def shown_link_name(name: str) -> str:
    """A link's parameter name as the page may show it: invisible and format characters (controls, bidirectional
    controls, zero-width joiners) removed, other spacing made a plain space, cut to ``LINK_NAME_CHARS`` with the
    count of what was cut."""
    kept = "".join(" " if unicodedata.category(c).startswith("Z") else c for c in name
                   if not unicodedata.category(c).startswith("C"))
    if len(kept) > LINK_NAME_CHARS:
        kept = f"{kept[:LINK_NAME_CHARS]}… (+{len(kept) - LINK_NAME_CHARS:,} characters)"
    return kept if kept.strip() else "(a name of invisible characters)"


def show_ignored() -> None:
    """Say which parts of the link were not understood. Nothing a link carries is shown as Markdown: the notice's
    words are the page's own, and the names follow as plain text (``st.text``: no formatting, no links), each
    cut to ``LINK_NAME_CHARS``, at most ``LINK_NAMES_SHOWN`` of them with the count of the rest. The link's
    values are never shown."""
    ignored = st.session_state.get(IGNORED)
    if not ignored:
        return
    st.info(f"{len(ignored)} part(s) of the link were not understood and were left at their defaults. Their names, "
            "as the link wrote them (cut short), are below; a link's text is never an instruction from this page.",
            icon=":material/link_off:")
    lines = [shown_link_name(name) + (f" ({why})" if why else "") for name, why in ignored[:LINK_NAMES_SHOWN]]
    if len(ignored) > LINK_NAMES_SHOWN:
        lines.append(f"… and {len(ignored) - LINK_NAMES_SHOWN:,} more not shown")
    st.text("\n".join(lines))


def adopt_model_decoding() -> None:
    """After a model is picked: its own length penalty (``decoding.alpha`` of its metadata, else the default)."""
    st.session_state[ALPHA] = model_alpha(st.session_state.get(CHECKPOINT, ""))


def settings_from_state(ss: Mapping[str, Any] | None = None) -> DecodeSettings:
    """Decoding settings from the sidebar widgets (or their defaults), of ``ss`` (default: the session's state)."""
    ss = st.session_state if ss is None else ss
    d = SIDEBAR_DEFAULTS
    greedy = ss.get(SEARCH, d[SEARCH]) == "Greedy"
    return DecodeSettings(beam_size=1 if greedy else int(ss.get(BEAM, d[BEAM])),
                          alpha=float(ss.get(ALPHA, d[ALPHA])), max_len_a=float(ss.get(MAX_A, d[MAX_A])),
                          max_len_b=int(ss.get(MAX_B, d[MAX_B])),
                          src_lang=ss.get(SRC_LANG), tgt_lang=ss.get(TGT_LANG))  # app.page.languages' pickers


def submitted(ss: Mapping[str, Any] | None = None) -> Submitted | None:
    """What the page shows: the text in the box with the sidebar's settings, as they are now (None: empty box)."""
    ss = st.session_state if ss is None else ss
    text = ss.get(SOURCE_TEXT, "")
    return Submitted(text, settings_from_state(ss)) if text.strip() else None


# ------------------------------------------------------------------------------------------------ the frame's address


def _with_text(text: Callable[[Submitted], str | None]) -> Callable[[Mapping[str, Any]], str | None]:
    """A frame parameter the address writes only with a text in the box (the settings of its translation)."""
    return lambda ss: (text(sub) or None) if (sub := submitted(ss)) else None


def _search(beam: int, ss: MutableMapping[str, Any]) -> None:
    """``beam=1`` is greedy search; more is beam search of that size."""
    ss[SEARCH] = "Greedy" if beam == 1 else "Beam search"
    if beam > 1:
        ss[BEAM] = beam


def _model_name(text: str) -> str | None:
    model = clean_text(text).strip()
    return model if 0 < len(model) <= 300 else None


def _open_model(model: str, ss: MutableMapping[str, Any]) -> str | None:
    """A link's model, if this server offers it (else why not)."""
    if not model_allowed(model):
        return "not offered on this server; the default opens instead"
    ss[CHECKPOINT] = model
    return None


def _lang_code(text: str) -> str | None:
    return text.strip() if _LANG_CODE.fullmatch(text.strip()) else None


# In the address's order. A link without text or model keeps the session's (``clears=()``); its view is
# checked against the registered views; the model against what this server offers.
P.register_frame((
    P.Param("text", SOURCE_TEXT, take_text, write=_with_text(lambda sub: sub.text), clears=()),
    P.Param("beam", BEAM, P.int_in(1, 16), adopt=_search, write=_with_text(lambda sub: str(sub.settings.beam_size)),
            clears=(SEARCH, BEAM)),
    P.Param("alpha", ALPHA, P.float_in(*ALPHA_RANGE, digits=1),
            write=_with_text(lambda sub: f"{sub.settings.alpha:g}")),
    P.Param("a", MAX_A, P.float_in(0, 4, 1), write=_with_text(lambda sub: f"{sub.settings.max_len_a:g}")),
    P.Param("b", MAX_B, P.int_in(0, 200), write=_with_text(lambda sub: str(sub.settings.max_len_b))),
    P.Param("src", SRC_LANG, _lang_code, write=_with_text(lambda sub: sub.settings.src_lang)),
    P.Param("tgt", TGT_LANG, _lang_code, write=_with_text(lambda sub: sub.settings.tgt_lang)),
    P.Param("model", CHECKPOINT, _model_name, adopt=_open_model, clears=(),
            write=lambda ss: m if (m := ss.get(CHECKPOINT)) and m != default_checkpoint() else None),
    P.Param("s", SENTENCE, P.int_in(1, 200), default=1),
    P.Param("view", VIEW, lambda text: key if (key := view_key(text)) and P.is_view(key) else None,
            clears=(VIEW, VIEW_GROUP)),  # a view's key, or its title (older links)
))


# ------------------------------------------------------------------------------------------------ URL -> state


def adopt_url(query: dict[str, str]) -> list[tuple[str, str]]:
    """Set the session state from a link's query parameters (:func:`app.page.params.adopt`: the frame's, then the link's
    view's own); returns what was ignored: (the link's parameter name, why in the page's own words, or "") pairs,
    shown by :func:`show_ignored` as text, never as Markdown.

    Every value is checked (type, range, known names); a bad one is ignored and its key keeps its default. A
    parameter the link's view does not use is ignored too. Values that depend on the model (layer and head
    numbers, the model to compare with) are checked again where they are used, which says when it drops one.
    """
    ss = st.session_state
    return P.adopt(query, ss, lambda: ss.setdefault(VIEW, DEFAULT_VIEW))  # no (known) view in the link: the default


# ------------------------------------------------------------------------------------------------ state -> URL


def url_params(view: str) -> dict[str, str]:
    """What is on screen with ``view`` shown, as URL query parameters: the frame's, then the view's own (each only
    where it says something: the decoding settings with a text, other values where they differ from the default)."""
    return P.address(ChainMap({VIEW: view}, st.session_state), view)


def share_query(view: str) -> str:
    """The query string of a link to ``view`` as it is now."""
    return urlencode(url_params(view))


# ------------------------------------------------------------------------------------------------ per run


def history_navigation() -> bool:
    """Whether this run was started by the browser's Back or Forward button.

    Streamlit marks such a run (``is_history_navigation`` of the run context); its query string is the address
    the visitor went back to. Any other run carries whatever address the browser showed when it sent the
    request, which lags behind when the visitor acts before the previous run's new address arrived (Ctrl+Enter,
    then Translate at once). Without the mark (an older Streamlit), a changed address counts as navigation."""
    ctx = get_script_run_ctx()
    if ctx is None or not hasattr(ctx, "is_history_navigation"):
        return True
    return bool(ctx.is_history_navigation)


# Streamlit drops a whole address of more than 524,288 characters or 1,000 parameters before the page's script
# sees it (streamlit.runtime.state.query_params.sanitize_query_string): the run gets no parameters at all. Only the
# browser still has the address it opened (the navigation entry keeps it however the page rewrites the address
# since), so on such a first run a constant script compares it with those limits and, when over, shows the page's
# own notice in a banner (none of the link's text). Nothing here comes from a visitor.
LINK_TOO_LONG_JS = """<script>
(() => {
  const entry = performance.getEntriesByType("navigation")[0];
  const query = new URL(entry ? entry.name : window.location.href).search.slice(1);
  if (query.length <= 524288 && query.split("&").length <= 1000) return;
  const box = document.createElement("div");
  box.setAttribute("role", "alert");
  box.className = "attn-link-too-long";
  box.style.cssText = "position:fixed;top:3.5rem;left:0.75rem;right:0.75rem;margin:0 auto;max-width:44rem;" +
    "z-index:1000100;padding:0.75rem 2.5rem 0.75rem 1rem;border-radius:0.5rem;" +
    "background:#fff8e1;color:#4e3b00;border:1px solid #f0c36d;font:15px/1.4 sans-serif;" +
    "box-shadow:0 2px 8px rgba(0,0,0,0.15)";
  box.textContent = "This link was too long to open (over 524,288 characters or 1,000 parameters), so the page " +
    "opened with its defaults instead of what the link asked for. Shorten the text or the link and try again.";
  const close = document.createElement("button");
  close.textContent = "\u00d7";
  close.setAttribute("aria-label", "Close");
  close.style.cssText = "position:absolute;top:0.3rem;right:0.5rem;border:0;background:none;font-size:1.3rem;" +
    "cursor:pointer;color:inherit";
  close.onclick = () => box.remove();
  box.appendChild(close);
  document.body.appendChild(box);
})();
</script>"""


def link_too_long_notice() -> None:
    """On a session's first run that got no address parameters: the browser says whether the link it opened was
    one Streamlit dropped for its length (``LINK_TOO_LONG_JS``; a short or bare address shows nothing)."""
    if st.session_state.get(BARE_FIRST):
        st.html(LINK_TOO_LONG_JS, unsafe_allow_javascript=True)


def start_run() -> None:
    """At the top of every run: defaults on a first visit, and adopt the address on a first visit (a link) and on
    Back/Forward. Any other run keeps the session's state, which wins over an address that lags behind it; the
    run's end writes the address anew (Streamlit's own rule for widgets bound to the address)."""
    ss = st.session_state
    ss.setdefault(CHECKPOINT, default_checkpoint())
    ss.setdefault(SOURCE_TEXT, "")
    if not model_allowed(ss[CHECKPOINT]):
        ss[CHECKPOINT] = default_checkpoint()
    current = st.query_params.to_dict()
    first = ss.get(LAST_URL) is None
    ss[FIRST_RUN] = first
    ss[BARE_FIRST] = first and not current
    if first or (current != ss[LAST_URL] and history_navigation()):
        ss[IGNORED] = adopt_url(current) if current else []
        ss.setdefault(ALPHA, model_alpha(ss[CHECKPOINT]))  # the model's own length penalty unless the link names one
        if first and not current.get("text"):  # a first visit opens on a worked example
            ss[SOURCE_TEXT] = ss.get(SOURCE_TEXT) or EXAMPLES[0]
        ss[LAST_URL] = current
        ss[ADOPTED] = (current, None)


def let_the_browser_paint() -> None:
    """Once, on a session's first run, right after its picture was sent: wait ``FIRST_PAINT_S``, so that the browser
    paints the picture before the rest of the page arrives. Without it the rest (~45 elements, and the scripts of
    their kinds) reaches the browser while it is still drawing the picture, and building it holds the picture's
    first paint back; the rest itself comes no later than it did (docs/speed-app.md). Later runs (the
    browser has every script then) and first runs with no picture do not wait."""
    if st.session_state.get(FIRST_RUN):
        st.session_state[FIRST_RUN] = False
        sleep(FIRST_PAINT_S)


def end_run(view: str) -> None:
    """At the end of every run: remember the view for Export's link and write the address (the browser makes a
    new history entry only when it changed).

    Written every run, even when it equals the address the run was asked with: an earlier run's address may still
    be on its way to the browser (a run that ended just as Back was pressed), and the last word must be this
    run's."""
    ss = st.session_state
    if view != "export":
        ss[PREVIOUS_VIEW] = view
    out = kept_address(url_params(view))
    st.query_params.from_dict(out)
    ss[LAST_URL] = out


def kept_address(out: dict[str, str]) -> dict[str, str]:
    """The address to write: ``out``, or the address the page last adopted (a link, or Back/Forward) while what is
    on screen is still what that address meant and it says nothing ``out`` does not (it only leaves out values
    the page fills in: the decoding settings, a view's defaults). A link opened is then not rewritten, which would
    add an entry to the browser's history, so Back leaves the page at once instead of landing on the link again."""
    ss = st.session_state
    adopted, meant = ss.get(ADOPTED, (None, None))
    if adopted is None:
        return out
    if meant is None:  # the run that adopted it: what it meant, as written
        ss[ADOPTED] = (adopted, meant := out)
    if out == meant and all(out.get(name) == value for name, value in adopted.items()):
        return dict(adopted)
    return out
