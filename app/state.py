"""Session state and the page address: every session-state key in one place, and URL <-> state both ways.

The address always describes what is on screen (sentence, decoding settings, view and the view's choices),
so a copied link reopens it. When the address changes from outside (the browser's Back or Forward, an
edited link), the next run adopts it instead of writing the current state over it.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import urlencode

import streamlit as st

from transformer import Tokenizer, Translator

from .analysis import KINDS
from .catalog import ALPHA_RANGE, default_checkpoint, model_allowed, model_alpha
from .inference import MAX_INPUT_CHARS, Analysis, DecodeSettings, HeadKey

# ------------------------------------------------------------------------------------------------ keys
# Widget keys (the widget's value lives in session state under this name)
CHECKPOINT = "checkpoint"
MODEL_CHOICE = "model_choice"
COMPARE_WITH = "compare_with"
COMPARE_ALPHA = "compare_alpha"
DEVICE = "device"
SEARCH = "search"
BEAM = "beam_size"
ALPHA = "alpha"
MAX_A = "max_len_a"
MAX_B = "max_len_b"
SOURCE_TEXT = "source_text"
EXAMPLE = "example"
VIEW = "view"
ATT = "att"
LAYER = "layer"
HEAD = "head"
SCALE = "scale"
STEP = "step"
GRID_PICK = "grid_pick"
ABLATE = "ablate"
LINES_HEADS = "lines_heads"
LINES_FOCUS = "lines_focus"
LINES_THRESHOLD = "lines_threshold"
SENTENCE = "sentence"
SHOW_CARD = "show_card"
# Plain state (no widget)
SUBMITTED = "submitted"  # Submitted | None: the input the page shows
ABLATION = "ablation"  # (Submitted, heads) of the last ablation run
PREVIOUS_VIEW = "_previous_view"  # the last view other than Export, for Export's share link
LAST_URL = "_last_url"  # the query parameters this session last wrote
IGNORED = "_ignored"  # link parameters the last adoption ignored, to tell the visitor
LOAD_FAILURE = "_load_failure"
LINES_FOCUS_KIND = "_lines_focus_kind"  # the attention type the Lines focus index refers to
EMPTY_SUBMIT = "_empty_submit"  # Translate was pressed on an empty box

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
SCALES = ["absolute", "stretched"]
DEFAULTS: dict[str, object] = {SEARCH: "Beam search", BEAM: 4, ALPHA: 0.6, MAX_A: 1.5, MAX_B: 10, DEVICE: "auto",
                               SCALE: "absolute", LINES_THRESHOLD: 0.05}
# Keys a link may set; adopting a link first clears them, so a key the link lacks falls back to its default.
URL_KEYS = (SEARCH, BEAM, ALPHA, MAX_A, MAX_B, VIEW, ATT, LAYER, HEAD, SCALE, STEP, GRID_PICK, ABLATE, LINES_HEADS,
            LINES_FOCUS, LINES_THRESHOLD, SENTENCE, COMPARE_WITH, COMPARE_ALPHA)
COMPARE_VIEW = "Compare models"  # the view whose choices add "with" (the second model) and "wa" to the address
COMPARE_ALPHAS = ["own", "sidebar"]  # the second model's length penalty: its card's, or the sidebar's
KIND_LABELS = {"encoder": "Encoder", "decoder": "Decoder self", "cross": "Cross"}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class Submitted:
    """The input the page shows: the text as submitted and the decoding settings at that moment."""

    text: str
    settings: DecodeSettings


@dataclass(frozen=True)
class ViewContext:
    """What a view gets: the loaded model, where it came from, and the analysed sentence (None before one)."""

    tr: Translator
    checkpoint: str
    device: str
    result: Analysis | None
    submitted: Submitted | None


def head_label(head: HeadKey) -> str:
    """``("cross", 0, 1)`` -> ``"Cross · L1 · H2"`` (the ablation picker's label)."""
    kind, layer, h = head
    return f"{KIND_LABELS[kind]} · L{layer + 1} · H{h + 1}"


def parse_head_label(label: str) -> HeadKey | None:
    """Inverse of :func:`head_label`; None for anything else."""
    match = re.fullmatch(r"(Encoder|Decoder self|Cross) · L(\d{1,3}) · H(\d{1,3})", str(label))
    if not match:
        return None
    kind = {v: k for k, v in KIND_LABELS.items()}[match.group(1)]
    return (kind, int(match.group(2)) - 1, int(match.group(3)) - 1)


def clean_text(text: str) -> str:
    """User text fit for the model and the browser: valid UTF-8, no control characters but newlines and tabs."""
    return _CONTROL.sub("", unicodedata.normalize("NFC", Tokenizer.clean(text)))


# ------------------------------------------------------------------------------------------------ parsing


def _int(value: str | None, low: int, high: int) -> int | None:
    """An int from a URL parameter within [low, high], else None."""
    try:
        v = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return v if low <= v <= high else None


def _float(value: str | None, low: float, high: float) -> float | None:
    """A finite float from a URL parameter within [low, high], else None."""
    try:
        v = float(str(value).strip())
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) and low <= v <= high else None


def adopt_model_decoding() -> None:
    """After a model is picked: its own length penalty (``decoding.alpha`` of its metadata, else 0.6)."""
    st.session_state[ALPHA] = model_alpha(st.session_state.get(CHECKPOINT, ""))


def settings_from_state() -> DecodeSettings:
    """Decoding settings from the sidebar widgets (or their defaults)."""
    ss = st.session_state
    greedy = ss.get(SEARCH, DEFAULTS[SEARCH]) == "Greedy"
    return DecodeSettings(beam_size=1 if greedy else int(ss.get(BEAM, DEFAULTS[BEAM])),
                          alpha=float(ss.get(ALPHA, DEFAULTS[ALPHA])), max_len_a=float(ss.get(MAX_A, DEFAULTS[MAX_A])),
                          max_len_b=int(ss.get(MAX_B, DEFAULTS[MAX_B])),
                          src_lang=ss.get("src_lang"), tgt_lang=ss.get("tgt_lang"))  # app.languages' pickers


def adopt_url(params: dict[str, str], views: list[str]) -> list[str]:
    """Set the session state from a link's query parameters; returns the names of the parameters ignored.

    Every value is checked (type, range, known names); a bad one is ignored and its key keeps its default.
    Values that depend on the model (layer and head numbers) are range-checked again by the widgets.
    """
    ss = st.session_state
    for key in URL_KEYS:
        ss.pop(key, None)
    ignored: list[str] = []
    known = {"text", "beam", "alpha", "a", "b", "view", "att", "layer", "head", "scale", "step", "pick", "off", "lh",
             "lf", "lt", "s", "model", "with", "wa"}
    ignored += [k for k in params if k not in known]

    def take(name: str, value: object) -> bool:
        if value is None and name in params:
            ignored.append(name)
        return value is not None

    text = params.get("text")
    if text is not None:
        if len(text) > MAX_INPUT_CHARS:
            ignored.append(f"text beyond {MAX_INPUT_CHARS:,} characters")
        ss[SOURCE_TEXT] = clean_text(text[:MAX_INPUT_CHARS])
    beam = _int(params.get("beam"), 1, 16)
    if take("beam", beam):
        ss[SEARCH] = "Greedy" if beam == 1 else "Beam search"
        if beam > 1:
            ss[BEAM] = beam
    for key, name, low, high in ((ALPHA, "alpha", *ALPHA_RANGE), (MAX_A, "a", 0.0, 4.0)):
        v = _float(params.get(name), low, high)
        if take(name, v):
            ss[key] = round(v, 1)  # the sliders move in steps of 0.1
    b = _int(params.get("b"), 0, 200)
    if take("b", b):
        ss[MAX_B] = b
    view = params.get("view")
    if take("view", view if view in views else None):
        ss[VIEW] = view
    att = params.get("att")
    if take("att", att if att in KINDS else None):
        ss[ATT] = att
    layer = _int(params.get("layer"), 1, 64)
    if take("layer", layer):
        ss[LAYER] = layer
    head = params.get("head")
    if take("head", head if head == "mean" or _int(head, 1, 128) is not None else None):
        ss[HEAD] = head if head == "mean" else str(int(head))
    scale = {"abs": "absolute", "stretch": "stretched"}.get(params.get("scale", ""))
    if take("scale", scale):
        ss[SCALE] = scale
    step = _int(params.get("step"), 1, 1000)
    if take("step", step):
        ss[STEP] = step
    pick = re.fullmatch(r"(\d{1,2})\.(\d{1,3})", params.get("pick", ""))
    if take("pick", pick):
        ss[GRID_PICK] = f"L{int(pick.group(1))} · H{int(pick.group(2))}"
    if "off" in params:
        heads = [_head_from_url(part) for part in params["off"].split(",")[:512] if part]
        if heads and all(h is not None for h in heads):
            ss[ABLATE] = [head_label(h) for h in sorted(set(heads))]
        else:
            ignored.append("off")
    if "lh" in params:
        nums = [_int(x, 1, 128) for x in params["lh"].split(",")[:128] if x] if params["lh"] else []
        if all(n is not None for n in nums):
            ss[LINES_HEADS] = sorted(set(nums))
        else:
            ignored.append("lh")
    lf = params.get("lf")
    if take("lf", None if lf is None else ("all" if lf == "all" else _int(lf, 0, 10_000))):
        ss[LINES_FOCUS] = "all" if lf == "all" else int(lf)
    lt = _float(params.get("lt"), 0.0, 0.5)
    if take("lt", lt):
        ss[LINES_THRESHOLD] = round(lt, 2)
    sentence = _int(params.get("s"), 1, 200)
    if take("s", sentence):
        ss[SENTENCE] = sentence
    if "model" in params:
        model = clean_text(params["model"]).strip()
        if not (0 < len(model) <= 300):
            ignored.append("model")
        elif not model_allowed(model):
            ignored.append("model (not offered on this server; the default opens instead)")
        else:
            ss[CHECKPOINT] = model
    partner = clean_text(params.get("with", "")).strip()
    if take("with", partner if 0 < len(partner) <= 300 else None):
        ss[COMPARE_WITH] = partner  # the Compare view keeps it only if it is one of the models it lists
    wa = params.get("wa")
    if take("wa", wa if wa in COMPARE_ALPHAS else None):
        ss[COMPARE_ALPHA] = wa
    ss.setdefault(ALPHA, model_alpha(ss.get(CHECKPOINT, "")))  # no (valid) alpha in the link: the model's own
    text = ss.get(SOURCE_TEXT, "")
    ss[SUBMITTED] = Submitted(text, settings_from_state()) if text.strip() else None
    return ignored


def _head_from_url(part: str) -> HeadKey | None:
    """``"cross.1.2"`` -> ``("cross", 0, 1)``; None when malformed."""
    match = re.fullmatch(r"(encoder|decoder|cross)\.(\d{1,3})\.(\d{1,3})", part.strip())
    if not match or int(match.group(2)) < 1 or int(match.group(3)) < 1:
        return None
    return (match.group(1), int(match.group(2)) - 1, int(match.group(3)) - 1)


# ------------------------------------------------------------------------------------------------ state -> URL


def url_params(view: str) -> dict[str, str]:
    """What is on screen as URL query parameters (only what differs from the defaults, besides text and view)."""
    ss = st.session_state
    params: dict[str, str] = {}
    sub: Submitted | None = ss.get(SUBMITTED)
    if sub:
        s = sub.settings
        params.update(text=sub.text, beam=str(s.beam_size), alpha=f"{s.alpha:g}", a=f"{s.max_len_a:g}",
                      b=str(s.max_len_b))
    if ss.get(CHECKPOINT) and ss.get(CHECKPOINT) != default_checkpoint():
        params["model"] = str(ss[CHECKPOINT])
    if ss.get(SENTENCE) not in (None, 1):
        params["s"] = str(ss[SENTENCE])
    params["view"] = view
    for key, name in ((ATT, "att"), (LAYER, "layer"), (HEAD, "head"), (STEP, "step")):
        if ss.get(key) is not None:
            params[name] = str(ss[key])
    if ss.get(SCALE, DEFAULTS[SCALE]) != DEFAULTS[SCALE]:
        params["scale"] = "stretch"
    pick = re.fullmatch(r"L(\d+) · H(\d+)", str(ss.get(GRID_PICK) or ""))
    if pick:
        params["pick"] = f"{pick.group(1)}.{pick.group(2)}"
    heads = [h for h in (parse_head_label(label) for label in ss.get(ABLATE) or []) if h is not None]
    if heads:
        params["off"] = ",".join(f"{k}.{layer + 1}.{h + 1}" for k, layer, h in heads)
    if ss.get(LINES_HEADS) is not None:
        params["lh"] = ",".join(str(h) for h in ss[LINES_HEADS])
    if ss.get(LINES_FOCUS) not in (None, "all"):
        params["lf"] = str(ss[LINES_FOCUS])
    if ss.get(LINES_THRESHOLD) not in (None, DEFAULTS[LINES_THRESHOLD]):
        params["lt"] = f"{float(ss[LINES_THRESHOLD]):g}"
    if view == COMPARE_VIEW and ss.get(COMPARE_WITH):
        params["with"] = str(ss[COMPARE_WITH])
    if view == COMPARE_VIEW and ss.get(COMPARE_ALPHA) == "sidebar":
        params["wa"] = "sidebar"
    return params


def share_query(view: str) -> str:
    """The query string of a link to ``view`` as it is now."""
    return urlencode(url_params(view))


# ------------------------------------------------------------------------------------------------ per run


def start_run(views: list[str]) -> None:
    """At the top of every run: defaults on a first visit, and adopt the address when it changed from outside
    (first visit with a link, Back/Forward, an edited address)."""
    ss = st.session_state
    ss.setdefault(CHECKPOINT, default_checkpoint())
    ss.setdefault(SOURCE_TEXT, "")
    if not model_allowed(ss[CHECKPOINT]):
        ss[CHECKPOINT] = default_checkpoint()
    current = st.query_params.to_dict()
    if ss.get(LAST_URL) is None or current != ss[LAST_URL]:
        first = ss.get(LAST_URL) is None
        ss[IGNORED] = adopt_url(current, views) if current else []
        ss.setdefault(ALPHA, model_alpha(ss[CHECKPOINT]))  # the model's own length penalty unless the link names one
        if first and not current.get("text"):  # a first visit opens on a worked example
            ss[SOURCE_TEXT] = ss.get(SOURCE_TEXT) or EXAMPLES[0]
            ss[SUBMITTED] = Submitted(ss[SOURCE_TEXT], settings_from_state())
        ss[LAST_URL] = current


def end_run(view: str) -> None:
    """At the end of every run: remember the view for Export's link and write the address (a new history entry
    when it changed)."""
    ss = st.session_state
    if view != "Export":
        ss[PREVIOUS_VIEW] = view
    params = url_params(view)
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)
    ss[LAST_URL] = params
