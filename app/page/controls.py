"""Widgets and page pieces shared by several views: attention type, layer/head pickers, colour range; and the
address parameters they share (the views list them in their own ``PARAMS``). The big heatmap and the window of a
long sentence: :mod:`app.page.heatmaps`."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import streamlit as st

from transformer import Translator
from transformer.network.kinds import layer_counts

from ..analysis.inference import HeadKey
from ..drawing.analysis import KIND_NAMES, KINDS, head_title
from ..limits import ledger, work
from . import state
from .params import FROM_LINK, Param, int_in, link_value_dropped, one_of

# Session-state keys shared by several views, and their address parameters
ATT, LAYER, HEAD, SCALE, MEASURE = "att", "layer", "head", "scale", "measure"
SCALES = ["absolute", "stretched"]
ATT_PARAM = Param("att", ATT, one_of(*KINDS), "cross")
LAYER_PARAM = Param("layer", LAYER, int_in(1, 64))
HEAD_PARAM = Param("head", HEAD, lambda v: v if v == "mean" else (str(int(v)) if int_in(1, 128)(v) else None),
                   "mean")
SCALE_PARAM = Param("scale", SCALE, {"abs": "absolute", "stretch": "stretched"}.get, "absolute",
                    lambda v: "stretch" if v == "stretched" else "abs")
MEASURE_PARAM = Param("m", MEASURE, one_of("weights", "norms"), "weights")
KIND_LABELS = {"encoder": "Encoder", "decoder": "Decoder self", "cross": "Cross"}

MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&=])")
REPEATS_NOTE = ("A piece that occurs more than once carries its number after a dot (▁a·3 is the piece ▁a at position "
           "3), so each keeps its own row and column. Source pieces and output steps count from 1; the decoder "
           "input counts from 0 (<s> is 0), so decoder input t is the piece output step t produced, with the same "
           "number.")


# What GitHub-flavoured Markdown turns into a link even when escaped (Streamlit's Markdown finds bare addresses in
# the text after escapes are resolved): "www.", "scheme://" and "name@host". A word joiner (U+2060, invisible) inside
# each keeps it text.
_AUTOLINK = re.compile(r"(?i)(www)(\.)|(:)(//)|(@)")
WORD_JOINER = "\u2060"


def md_escape(text: object) -> str:
    """Backslash-escape Markdown, so user-made text (a path, an error about it) shows exactly as typed, and never
    as a link: a bare address (``www.x``, ``https://x``, ``a@b.c``) gets an invisible word joiner that stops GFM's
    autolinks (a backslash does not)."""
    text = _AUTOLINK.sub(lambda m: WORD_JOINER.join(g for g in m.groups() if g) if m.group(5) is None
                         else WORD_JOINER + "@", str(text))
    return MD_SPECIAL.sub(r"\\\1", text)


def head_label(head: HeadKey) -> str:
    """``("cross", 0, 1)`` -> ``"Cross · L1 · H2"`` (the ablation picker's label)."""
    kind, layer, h = head
    return f"{KIND_LABELS[kind]} · L{layer + 1} · H{h + 1}"


def parse_head_label(label: str) -> HeadKey | None:
    """Inverse of :func:`head_label`; None for anything else."""
    match = re.fullmatch(r"(Encoder|Decoder self|Cross) · L([0-9]{1,3}) · H([0-9]{1,3})", str(label))
    if not match:
        return None
    kind = {v: k for k, v in KIND_LABELS.items()}[match.group(1)]
    return (kind, int(match.group(2)) - 1, int(match.group(3)) - 1)


def head_ref(head: HeadKey) -> str:
    """``("cross", 0, 1)`` -> ``"cross.1.2"`` (the address's way, 1-based)."""
    return f"{head[0]}.{head[1] + 1}.{head[2] + 1}"


def parse_head_ref(text: str) -> HeadKey | None:
    """Inverse of :func:`head_ref`; None when malformed."""
    match = re.fullmatch(r"(encoder|decoder|cross)\.([0-9]{1,3})\.([0-9]{1,3})", str(text).strip())
    if not match or int(match.group(2)) < 1 or int(match.group(3)) < 1:
        return None
    return (match.group(1), int(match.group(2)) - 1, int(match.group(3)) - 1)


def keep_if(key: str, valid: bool) -> None:
    """Drop the value under ``key`` when it is not ``valid`` here (saying so when a link set it)."""
    if key in st.session_state and not valid:
        del st.session_state[key]
        link_value_dropped(key)


def follow_table(event: object, refs: list[str], key: str) -> None:
    """A newly selected row of a dataframe (``event``, one row per head in ``refs``' order) becomes the value under
    ``key``, which the address holds (a table's selection itself cannot be restored from a link)."""
    rows = list(getattr(getattr(event, "selection", None), "rows", []) or [])
    seen = f"_{key}_rows"
    if rows != st.session_state.get(seen):
        st.session_state[seen] = rows
        if rows and 0 <= rows[0] < len(refs):
            st.session_state[key] = refs[rows[0]]


def head_picker(refs: list[str], key: str) -> HeadKey | None:
    """A picker of one head among ``refs`` (``cross.1.2``...) under ``key``; the chosen head or None."""
    keep_if(key, st.session_state.get(key) in refs + [None])
    st.session_state.get(FROM_LINK, {}).pop(key, None)
    st.session_state.setdefault(key, None)
    ref = st.selectbox("Open a head (or select its row in the table)", refs, key=key, placeholder="Pick a head…",
                       format_func=lambda r: head_label(parse_head_ref(r)))
    return parse_head_ref(ref) if ref else None


def head_ref_param(name: str, key: str) -> Param:
    """An address parameter holding one head as ``cross.1.2``."""
    return Param(name, key, lambda v: head_ref(h) if (h := parse_head_ref(v)) else None)


def choose(widget: Callable, label: str, options: list, key: str, default, **kwargs):
    """A widget whose value lives in session state (kept while other views show) and is reset when it is not
    among the options (with a notice when a link set it)."""
    settle(key, options, default)
    return widget(label, options, key=key, persist_state="session", **kwargs)


def settle(key: str, options: list, default):
    """The value the widget of :func:`choose` will show, known before it is drawn (a view may draw its chart first
    and its controls after, so that the browser draws the picture in the page's first frame)."""
    keep_if(key, st.session_state.get(key) in options)
    st.session_state.get(FROM_LINK, {}).pop(key, None)  # a link's value that fits: nothing to say later
    if key not in st.session_state:
        st.session_state[key] = default
    return st.session_state[key]


LARGE_MODEL = 20_000_000  # parameters: above this, integrated gradients take a minute or more on a CPU
LARGE_VOCABULARY = 100_000  # pieces: above this (NLLB's 256k, M2M100's 128k) too, every pass scores them all


def n_parameters(tr: Translator) -> int:
    """The model's parameter count (tied embeddings once)."""
    return sum(p.numel() for p in tr.model.parameters())


def capped(notices: list[str] | tuple[str, ...]) -> None:
    """Record what this server's work limit cut (``app.limits.ledger.cut``): the page says it once, in one notice
    (``work_notice``)."""
    ledger.cut(notices)


def work_notice(place: Any, req: ledger.Request) -> None:
    """The one notice of what this request's work limit cut, in ``place`` (an ``st.empty``), if anything was."""
    text = req.notice()
    if text:
        place.info(md_escape(text), icon=":material/speed:")


def attributions(ctx: state.ViewContext, method: str) -> dict:
    """``probes.attributions`` of the analysed sentence through the cache, within this server's work limit (fewer
    steps, a shorter span or input x gradient, with a notice), with a progress bar while it runs."""
    result = ctx.result
    plan = work.plan_attribution(ctx.tr, len(result.source_ids), len(result.target_ids), method)
    capped(plan.notices)
    bar = st.progress(0.0, text="Attributing every output piece…")

    def progress(done: int, total: int) -> None:
        bar.progress(done / total, text=f"Attributing every output piece… pass {done} of {total}")

    try:
        return ctx.model.beyond("attributions", result, plan.method, plan.steps, plan.span, work.work_bytes(),
                                progress=progress)
    finally:
        bar.empty()


def n_layers(tr: Translator, kind: str) -> int:
    """Layers of an attention type (encoder layers, or decoder layers for decoder self and cross)."""
    return layer_counts(tr.config)[kind]


FIRST_KIND, FIRST_SCALE, FIRST_HEAD = "cross", "absolute", "mean"  # what the controls show until a visitor picks


def layer_choices(tr: Translator, kind: str) -> list[int]:
    """The Layer picker's choices (1-based); its default is the last."""
    return list(range(1, n_layers(tr, kind) + 1))


def head_choices(tr: Translator) -> list[str]:
    """The Head picker's choices: the mean over heads, then each head (1-based)."""
    return [FIRST_HEAD] + [str(h) for h in range(1, tr.config.n_heads + 1)]


def kind_control(key: str = ATT, with_scale: bool = True, columns: tuple | None = None) -> str:
    """Which attention type (encoder self / decoder self / cross), and the colour scale beside it (in the two
    ``columns`` given, else in a new row; inactive while weighted norms show, which have their own scale)."""
    c1, c2 = columns or (st.columns([3, 1.3]) if with_scale else (st.container(), None))
    kind = choose(c1.segmented_control, "Attention", list(KINDS), key, FIRST_KIND, format_func=KIND_NAMES.get,
                  required=True, wrap=True)  # wraps in a narrow column (a phone, a laptop) instead of being cut
    if c2 is not None:
        scale_control(c2)
    return kind


def scale_control(where=st) -> None:
    """The colour scale, 0 to 1 or stretched (inactive while weighted norms show, which have their own scale)."""
    norms = st.session_state.get(MEASURE) == "norms"
    choose(where.segmented_control, "Colour scale", SCALES, SCALE, FIRST_SCALE, disabled=norms,
           required=True, wrap=True, format_func=lambda v: "0 – 1" if v == "absolute" else "stretch",
           help="Weighted norms run from 0 to their largest value; the scale applies to weights." if norms else
           "0 – 1: a colour means the same weight in every chart. Stretch: from the smallest to the "
           "largest weight shown, to bring out faint patterns.")


def colour_range(*arrays: np.ndarray) -> tuple[float, float]:
    """(zmin, zmax) for attention charts: 0 to 1, or stretched over the weights shown."""
    if st.session_state.get(SCALE, FIRST_SCALE) != "stretched":
        return (0.0, 1.0)
    low = min(float(np.min(a)) for a in arrays)
    high = max(float(np.max(a)) for a in arrays)
    return (low, max(high, low + 1e-6))


def range_caption(weights: np.ndarray, kind: str) -> None:
    """How spread out the weights are, so a pale (or uniform) chart reads right."""
    text = (f"Weights here run from {weights.min():.3f} to {weights.max():.3f}; the largest weight in a row is "
            f"{weights.max(axis=-1).mean():.3f} on average")
    if kind != "decoder":
        text += f", and an even spread over the {weights.shape[-1]} keys would give {1 / weights.shape[-1]:.3f} each"
    st.caption(text + ".")


def heatmap_settings(tr: Translator) -> tuple[str, int, str]:
    """(kind, layer, head) as :func:`heatmap_controls` will show them, before they are drawn."""
    kind = settle(ATT, list(KINDS), FIRST_KIND)
    layers = layer_choices(tr, kind)
    layer = settle(LAYER, layers, layers[-1])
    head = settle(HEAD, head_choices(tr), FIRST_HEAD)
    settle(SCALE, SCALES, FIRST_SCALE)
    return kind, layer, head


def heatmap_controls(tr: Translator) -> tuple[str, int, str]:
    """Type, layer, head and colour scale, stacked (in the narrow column beside a chart): (kind, layer, head)."""
    kind = kind_control(with_scale=False)
    layer, head = layer_head_controls(tr, kind, columns=(st.container(), st.container()))  # "mean over heads" whole
    scale_control()
    return kind, layer, head


def layer_head_controls(tr: Translator, kind: str, with_head: bool = True,
                        columns: tuple | None = None) -> tuple[int, str]:
    """Layer (1-based) and head ('mean' or '1'…), in the two ``columns`` given, else in a new row."""
    c1, c2 = columns or st.columns(2)
    layers = layer_choices(tr, kind)
    layer = choose(c1.selectbox, "Layer", layers, LAYER, layers[-1])
    head = FIRST_HEAD
    if with_head:
        head = choose(c2.selectbox, "Head", head_choices(tr), HEAD, FIRST_HEAD,
                      format_func=head_title)
    return layer, head


# A tap selects a point as a click does. Plotly selects the point under its last hover ("event+select": a click on a
# point is a selection, which a chart's on_select receives); a mouse hovers before it clicks, a finger does not, so on
# a phone a tap reached plotly as a click with no point and opened nothing. At the start of a one-finger touch on such
# a chart's plot area this constant script sends plotly a hover at the touch point (the hover label shows, as a
# mouse's would), so the tap that follows selects the point under the finger. Installed once per page.
TAP_SELECTS_JS = """<script>
(() => {
  if (window.__attnTapSelects) return;
  window.__attnTapSelects = true;
  document.addEventListener("touchstart", (e) => {
    const area = e.target instanceof Element && e.target.closest(".js-plotly-plot .nsewdrag");
    const plot = area && area.closest(".js-plotly-plot");
    if (!plot || e.touches.length !== 1 || !String((plot._fullLayout || {}).clickmode).includes("select")) return;
    const t = e.touches[0];
    area.dispatchEvent(new MouseEvent("mousemove", {clientX: t.clientX, clientY: t.clientY, bubbles: true,
                                                   view: window}));
  }, {capture: true, passive: true});
})();
</script>"""
TAP_SELECTS = "tap_selects"  # the key of the hidden container that holds the script (CSS: app.page.frame)


def tap_selects() -> None:
    """Once on the page, hidden: the script by which a tap selects a chart's point as a click does
    (``TAP_SELECTS_JS``), so that a chart's ``on_select`` works on a phone."""
    st.container(key=TAP_SELECTS).html(TAP_SELECTS_JS, unsafe_allow_javascript=True)


# An arrow key selects, as the ARIA radio pattern asks of a radio group: Streamlit's segmented controls (the groups, the
# view pills, every one-of-several picker) move the focus on an arrow and select only on Space or Enter; this
# constant script clicks the radio the focus moved to. Installed once per page.
ARROWS_SELECT_JS = """<script>
(() => {
  if (window.__attnArrowsSelect) return;
  window.__attnArrowsSelect = true;
  document.addEventListener("keydown", (e) => {
    if (!["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown"].includes(e.key) || e.altKey || e.ctrlKey || e.metaKey
        || e.shiftKey) return;
    const from = e.target instanceof Element && e.target.closest("[role=radio]");
    const group = from && from.closest("[data-testid=stButtonGroup] [role=radiogroup]");
    if (!group) return;
    setTimeout(() => {  // after the control has moved the focus
      const to = document.activeElement;
      if (to && to !== from && group.contains(to) && to.getAttribute("role") === "radio"
          && to.getAttribute("aria-checked") !== "true") to.click();
    }, 30);
  }, {capture: true});  // before the control's own handler, which keeps the event to itself
})();
</script>"""
ARROWS_SELECT = "arrows_select"  # the key of the hidden container that holds the script (CSS: app.page.frame)


def arrows_select() -> None:
    """Once on the page, hidden: the script by which an arrow key selects in a row of one-of-several buttons
    (``ARROWS_SELECT_JS``), as it does in any radio group."""
    st.container(key=ARROWS_SELECT).html(ARROWS_SELECT_JS, unsafe_allow_javascript=True)


def has_repeats(*token_lists: list[str]) -> bool:
    """Whether any list holds a token twice (its labels then carry positions)."""
    return any(len(set(tokens)) < len(tokens) for tokens in token_lists)


MEASURES = {"weights": "attention weights", "norms": "what each key passes on"}
FIRST_MEASURE = "weights"
NORMS_NOTE = ("What each key passes on (Kobayashi et al., 2020): its attention weight times the length of the vector "
              "it sends through the head, so how much of key j the head actually hands on, not just how much it "
              "looks at it. A head parked on </s> or <s> with a tiny vector there shows a big weight but passes "
              "little on.")
NORMS_TERMS = ("Weighted norms ‖α_ij · v_j W_O^h‖: the weight α_ij times the length of key j's value vector v_j "
               "after head h's slice of the output projection W_O.")


def measure_setting(key: str = MEASURE) -> str:
    """The value :func:`measure_control` will show, before it is drawn."""
    return settle(key, list(MEASURES), FIRST_MEASURE)


def measure_control(key: str = MEASURE) -> str:
    """Attention weights, or the weighted norms of what each head passes on."""
    return choose(st.segmented_control, "Show", list(MEASURES), key, FIRST_MEASURE, format_func=MEASURES.get,
                  required=True, wrap=True, help=NORMS_TERMS)
