"""The attention explorer: translate a sentence and look inside every head of the Transformer.

Run from the repository root with ``streamlit run app/main.py``. The checkpoint defaults to
``checkpoints/multi30k-en-de``; ``ATTN_CHECKPOINT`` or the sidebar can name another directory or a
Hugging Face Hub repo id.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import os  # noqa: E402
import re  # noqa: E402
from urllib.parse import urlencode  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import streamlit as st  # noqa: E402
import torch  # noqa: E402

import transformer  # noqa: E402
from app import cached, inference, views  # noqa: E402
from app.analysis import KIND_NAMES, KINDS, head_diagnostics, masked_weight  # noqa: E402
from app.inference import Analysis, HeadKey  # noqa: E402

# One intra-op thread: on a small model several threads gain nothing, and on a busy CPU their spinning
# slows decoding down many times over; visitors are served in parallel by Streamlit's threads anyway.
_threads = os.environ.get("ATTN_TORCH_THREADS", "1")
torch.set_num_threads(int(_threads) if _threads.isdigit() and int(_threads) > 0 else 1)

st.set_page_config(page_title="Attention explorer · Transformer", page_icon="🔭", layout="wide",
                   initial_sidebar_state="expanded")

EXAMPLES = [
    "A man in a blue shirt is riding a bike down the street.",
    "Two dogs are playing in the snow.",
    "A little girl climbs into a wooden playhouse.",
    "A woman with a red umbrella walks on the beach while her dog runs after a ball near the water.",
    "The boy kicks the ball to his father in the park.",
    "A group of people stand in front of an igloo.",
]
VIEWS = ["Heatmap", "All heads", "Lines", "Step through", "Head table", "Ablation", "Masks", "Positional encoding",
         "Training evolution", "Export"]
VIEW_ICONS = {"Heatmap": ":material/grid_on:", "All heads": ":material/apps:", "Lines": ":material/timeline:",
              "Step through": ":material/skip_next:", "Head table": ":material/table_rows:",
              "Ablation": ":material/content_cut:", "Masks": ":material/visibility_off:",
              "Positional encoding": ":material/waves:", "Training evolution": ":material/history:",
              "Export": ":material/download:"}
SEARCHES = ["Beam search", "Greedy"]
KIND_SHORT = {"encoder": "Encoder", "decoder": "Decoder self", "cross": "Cross"}
MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&=])")


def md_escape(text: object) -> str:
    """Backslash-escape Markdown, so user-made text (a path, an error about it) shows exactly as typed."""
    return MD_SPECIAL.sub(r"\\\1", str(text))


def clean_text(text: str) -> str:
    """Text that can be sent to the browser: lone surrogates (not valid UTF-8) become '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


def head_label(head: HeadKey) -> str:
    """``("cross", 0, 1)`` -> ``"Cross · L1 · H2"``."""
    kind, layer, h = head
    return f"{KIND_SHORT[kind]} · L{layer + 1} · H{h + 1}"


# ------------------------------------------------------------------------------------------------ state


def _int(value: str | None, low: int, high: int) -> int | None:
    """An int from a URL parameter within [low, high], else None."""
    try:
        v = int(str(value))
    except (TypeError, ValueError):
        return None
    return v if low <= v <= high else None


def _float(value: str | None, low: float, high: float) -> float | None:
    """A finite float from a URL parameter within [low, high], else None."""
    try:
        v = float(str(value))
    except (TypeError, ValueError):
        return None
    return v if low <= v <= high and np.isfinite(v) else None


def init_state() -> None:
    """First run of a session: defaults, then whatever the URL carries (a shared link opens the same view)."""
    ss = st.session_state
    if ss.get("_initialised"):
        return
    ss._initialised = True
    ss.setdefault("checkpoint", inference.default_checkpoint())
    ss.setdefault("source_text", "")
    qp = st.query_params
    text = qp.get("text")
    if text:
        ss.source_text = clean_text(text[: inference.MAX_INPUT_CHARS])
    beam = _int(qp.get("beam"), 1, 16)
    if beam is not None:
        ss.search = "Greedy" if beam == 1 else "Beam search"
        if beam > 1:
            ss.beam_size = beam
    for key, name, low, high in (("alpha", "alpha", 0.0, 2.0), ("max_len_a", "a", 0.0, 4.0)):
        v = _float(qp.get(name), low, high)
        if v is not None:
            ss[key] = round(v, 1)  # the sliders move in steps of 0.1
    b = _int(qp.get("b"), 0, 200)
    if b is not None:
        ss.max_len_b = b
    if qp.get("view") in VIEWS:
        ss.view = qp.get("view")
    if qp.get("att") in KINDS:
        ss.att = qp.get("att")
    layer = _int(qp.get("layer"), 1, 64)
    if layer is not None:
        ss.layer = layer
    head = qp.get("head")
    if head == "mean" or _int(head, 1, 128) is not None:
        ss.head = head
    if not ss.source_text.strip() and "text" not in qp:
        ss.source_text = EXAMPLES[0]  # a first visit opens on a worked example
    if ss.source_text.strip():
        ss.submitted = {"text": ss.source_text, "settings": current_settings()}


def current_settings() -> tuple[int, float, float, int]:
    """Decoding settings from the sidebar widgets (or their defaults)."""
    ss = st.session_state
    beam = 1 if ss.get("search", "Beam search") == "Greedy" else int(ss.get("beam_size", 4))
    return (beam, float(ss.get("alpha", 0.6)), float(ss.get("max_len_a", 1.5)), int(ss.get("max_len_b", 10)))


def url_params(view: str) -> dict[str, str]:
    """The submitted input, decoding settings and view, as URL query parameters."""
    ss = st.session_state
    params: dict[str, str] = {}
    sub = ss.get("submitted")
    if sub:
        beam, alpha, a, b = sub["settings"]
        params.update(text=sub["text"], beam=str(beam), alpha=f"{alpha:g}", a=f"{a:g}", b=str(b))
    params["view"] = view
    for key in ("att", "layer", "head"):
        if ss.get(key) is not None:
            params[key] = str(ss.get(key))
    return params


def sync_url(params: dict[str, str]) -> None:
    """Write ``params`` into the page address (only when they changed)."""
    if dict(st.query_params.to_dict()) != params:
        st.query_params.from_dict(params)


def choose(widget, label: str, options: list, key: str, default, **kwargs):
    """A widget whose value lives in session state and is reset when it is not among the options."""
    if key in st.session_state and st.session_state[key] not in options:
        del st.session_state[key]
    if key not in st.session_state:
        st.session_state[key] = default
    return widget(label, options, key=key, **kwargs)


# ------------------------------------------------------------------------------------------------ sidebar


def sidebar() -> tuple[str, str]:
    """Checkpoint, device and decoding settings; returns (checkpoint, device)."""
    with st.sidebar:
        st.header(":material/travel_explore: Attention explorer")
        st.caption("A from-scratch encoder-decoder Transformer (Vaswani et al., 2017), every attention weight visible.")
        st.subheader("Model")
        st.text_input("Checkpoint: directory or Hugging Face Hub repo id", key="checkpoint",
                      help="Defaults to $ATTN_CHECKPOINT or checkpoints/multi30k-en-de.")
        devices = ["auto", "cpu"] + (["cuda"] + [f"cuda:{i}" for i in range(1, torch.cuda.device_count())]
                                     if torch.cuda.is_available() else [])
        choose(st.selectbox, "Device", devices, "device", "auto",
               help="auto = CUDA when a GPU is present, else CPU.")
        st.subheader("Decoding")
        choose(st.radio, "Search", SEARCHES, "search", "Beam search", horizontal=True)
        st.session_state.setdefault("beam_size", 4)
        st.slider("Beam size", 2, 16, key="beam_size", disabled=st.session_state.search == "Greedy")
        st.session_state.setdefault("alpha", 0.6)
        st.slider("Length penalty α", 0.0, 2.0, step=0.1, key="alpha",
                  help="GNMT length penalty ((5+|Y|)/6)^α; higher favours longer outputs (beam search only).")
        st.session_state.setdefault("max_len_a", 1.5)
        st.session_state.setdefault("max_len_b", 10)
        c1, c2 = st.columns(2)
        c1.slider("Max length a", 0.0, 4.0, step=0.1, key="max_len_a")
        c2.slider("Max length b", 0, 200, key="max_len_b")
        st.caption("At most a × source length + b output tokens (and never past the model's maximum).")
    checkpoint = st.session_state.checkpoint.strip()
    try:
        device = inference.resolve_device_name(st.session_state.device)
    except transformer.CheckpointError:
        device = "cpu"
    return checkpoint, device


def show_model_facts(tr: transformer.Translator) -> None:
    """Sizes, parameters and the scores of the model card, in the sidebar."""
    with st.sidebar:
        facts = inference.model_facts(tr)
        st.dataframe(pd.DataFrame({"": list(facts), "value": [str(v) for v in facts.values()]}), hide_index=True,
                     width="stretch")
        scores = inference.model_scores(tr)
        if scores:
            cols = st.columns(2)
            for i, (name, value) in enumerate(list(scores.items())[:6]):
                cols[i % 2].metric(name, f"{value:.2f}")
        meta = tr.metadata or {}
        with st.expander("Training details"):
            if meta.get("training_command"):
                st.caption("Trained with")
                st.code(str(meta["training_command"]), language="bash", wrap_lines=True)
            history = meta.get("history")
            if isinstance(history, list) and history:
                st.caption(f"{len(history)} validations during training; the curves are in the Training evolution "
                           "view.")
            if not meta:
                st.caption("No metadata.json in this checkpoint.")
            st.caption(f"Loaded from {md_escape(tr.path)}")


def load_model(checkpoint: str, device: str) -> transformer.Translator | None:
    """The cached model, or None after showing a clear message (failures are remembered per session)."""
    ss = st.session_state
    failure = ss.get("_load_failure")
    if failure and failure[:2] == (checkpoint, device):
        message = failure[2]
    else:
        try:
            return cached.get_translator(checkpoint, device)
        except transformer.CheckpointError as err:
            message = str(err)
        except Exception as err:  # anything else from loading: still one clear message
            message = f"{type(err).__name__}: {err}"
        ss._load_failure = (checkpoint, device, message)
    st.error(f"The model could not be loaded: {md_escape(message)}", icon=":material/error:")
    if checkpoint == inference.DEFAULT_CHECKPOINT:
        st.info("The default model (checkpoints/multi30k-en-de) is not here yet. Train it with "
                "`python -m transformer.train` (see the README), or name another checkpoint directory or Hugging "
                "Face Hub repo id in the sidebar, or set the ATTN_CHECKPOINT environment variable.")
    if st.button("Try again", key="retry_load"):
        ss.pop("_load_failure", None)
        st.rerun()
    return None


# ------------------------------------------------------------------------------------------------ input


def use_example() -> None:
    """Callback: copy the picked example into the text area."""
    pick = st.session_state.get("example")
    if pick and pick in EXAMPLES:
        st.session_state.source_text = pick


LANGUAGES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech", "es": "Spanish", "it": "Italian"}


def language_label(tr: transformer.Translator) -> str:
    """``"English → German"`` from the model card's ``language_pair``, or ``""``."""
    pair = str((tr.metadata or {}).get("language_pair", ""))
    if "-" not in pair:
        return ""
    src, tgt = pair.split("-", 1)
    return f"{LANGUAGES.get(src, src)} → {LANGUAGES.get(tgt, tgt)}"


def input_area(tr: transformer.Translator) -> None:
    """Text area, examples and the Translate button; a click stores the submitted input."""
    c1, c2 = st.columns([4, 1.3], vertical_alignment="bottom")
    pair = language_label(tr)
    with c1:
        label = f"Sentence to translate ({pair})" if pair else "Sentence to translate"
        st.text_area(label, key="source_text", height=96, max_chars=inference.MAX_INPUT_CHARS,
                     placeholder="Type an English sentence, e.g. “A dog runs on the beach.”")
    with c2:
        st.selectbox("Examples", EXAMPLES, index=None, key="example", on_change=use_example,
                     placeholder="Pick an example…")
        clicked = st.button("Translate", key="translate", type="primary", icon=":material/translate:",
                            width="stretch")
    if clicked:
        text = st.session_state.source_text
        if not text.strip():
            st.session_state.submitted = None
            st.warning("Type a sentence first: the text box is empty.", icon=":material/edit:")
        else:
            st.session_state.submitted = {"text": clean_text(text), "settings": current_settings()}


def show_translation(tr: transformer.Translator, result: Analysis) -> None:
    """The translation, its score and the subword pieces, with notices for truncation and unknown characters."""
    if result.truncated:
        st.warning(f"The text is {result.source_pieces} subword pieces long; this model takes at most "
                   f"{tr.max_source_tokens}, so only the first {tr.max_source_tokens} were translated.",
                   icon=":material/content_cut:")
    if result.unknown_pieces:
        st.info(f"{result.unknown_pieces} piece(s) of the input are not in the model's vocabulary and appear as "
                "<unk> (emoji and rare scripts, for example).", icon=":material/help:")
    with st.container(border=True):
        beam = result.settings.beam_size
        st.caption(f"Translation · score {result.score:.3f} (log-probability / length penalty) · "
                   f"{'greedy' if beam == 1 else f'beam {beam}'} · {result.seconds * 1000:.0f} ms on {result.device}")
        if result.translation.strip():
            st.text(result.translation)
        else:
            st.text("(empty output: the model ended the sentence at once)")
        with st.expander(f"Subword pieces: {len(result.source_tokens)} in, {len(result.target_tokens)} out",
                         expanded=True):
            st.caption("Source pieces (▁ marks the start of a word; </s> ends the sentence)")
            st.code("  ".join(result.source_tokens), language=None, wrap_lines=True)
            st.caption("Output pieces")
            st.code("  ".join(result.target_tokens), language=None, wrap_lines=True)


# ------------------------------------------------------------------------------------------------ views


def n_layers(tr: transformer.Translator, kind: str) -> int:
    """Layers of an attention type (encoder layers, or decoder layers for decoder self and cross)."""
    return tr.config.n_encoder_layers if kind == "encoder" else tr.config.n_decoder_layers


def kind_control(key: str = "att", with_scale: bool = True) -> str:
    """Which attention type (encoder self / decoder self / cross), and the colour scale beside it."""
    c1, c2 = st.columns([3, 1.3]) if with_scale else (st.container(), None)
    kind = choose(c1.segmented_control, "Attention", list(KINDS), key, "cross", format_func=KIND_NAMES.get,
                  required=True, persist_state="session")
    if c2 is not None:
        choose(c2.segmented_control, "Colour scale", ["absolute", "stretched"], "scale", "absolute", required=True,
               persist_state="session", format_func=lambda v: "0 – 1" if v == "absolute" else "stretch",
               help="0 – 1: a colour means the same weight in every chart. Stretch: from the smallest to the "
                    "largest weight shown, to bring out faint patterns.")
    return kind


def colour_range(*arrays: np.ndarray) -> tuple[float, float]:
    """(zmin, zmax) for attention charts: 0 to 1, or stretched over the weights shown."""
    if st.session_state.get("scale", "absolute") != "stretched":
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


def layer_head_controls(tr: transformer.Translator, kind: str, with_head: bool = True) -> tuple[int, str]:
    """Layer (1-based) and head ('mean' or '1'…)."""
    c1, c2 = st.columns(2)
    layers = list(range(1, n_layers(tr, kind) + 1))
    layer = choose(c1.selectbox, "Layer", layers, "layer", layers[-1], persist_state="session")
    head = "mean"
    if with_head:
        heads = ["mean"] + [str(h) for h in range(1, tr.config.n_heads + 1)]
        head = choose(c2.selectbox, "Head", heads, "head", "mean", persist_state="session",
                      format_func=lambda h: "mean over heads" if h == "mean" else f"head {h}")
    return layer, head


def pick_weights(attn: np.ndarray, layer: int, head: str) -> np.ndarray:
    """``(Q, K)`` of a 1-based layer and a head or the mean over heads."""
    per_layer = attn[layer - 1]
    return per_layer.mean(axis=0) if head == "mean" else per_layer[int(head) - 1]


def heatmap_title(kind: str, layer: int, head: str) -> str:
    """Chart title naming the type, layer and head."""
    return f"{KIND_NAMES[kind]} · layer {layer} · {'mean over heads' if head == 'mean' else f'head {head}'}"


AXIS_TITLES = {"encoder": ("source token (query)", "source token (key)"),
               "decoder": ("output token (query = the step producing it)", "decoder input (key)"),
               "cross": ("output token (query = the step producing it)", "source token (key)")}
READING = {
    "encoder": "Each row is a source piece building its new representation; the colours along the row say how "
               "much it takes from each source piece (a row sums to 1).",
    "decoder": "Row t is the step that produced output piece t; it may only look at the decoder inputs up to "
               "and including its own position (<s> and the pieces already produced), never ahead.",
    "cross": "Row t is the step that produced output piece t; the colours say which source pieces it read "
             "from. Good heads often trace a soft word alignment.",
}


def draw_heatmap(result: Analysis, kind: str, layer: int, head: str, key: str) -> None:
    """The big heatmap of one head (or the mean), with a window for long sentences."""
    attn = result.attention(kind)
    weights = pick_weights(attn, layer, head)
    queries, keys = result.axes(kind)
    q0, q1, k0, k1 = 0, len(queries), 0, len(keys)
    if max(len(queries), len(keys)) > 60:
        st.caption("Long sentence: choose a window to read the tokens, or drag on the chart to zoom.")
        c1, c2 = st.columns(2)
        q0, q1 = c1.slider("Query rows", 0, len(queries), (0, min(len(queries), 60)), key=f"{key}_qwin")
        k0, k1 = c2.slider("Key columns", 0, len(keys), (0, min(len(keys), 60)), key=f"{key}_kwin")
        q1, k1 = max(q1, q0 + 1), max(k1, k0 + 1)
    qt, kt = AXIS_TITLES[kind]
    zmin, zmax = colour_range(weights[q0:q1, k0:k1])
    fig = views.attention_heatmap(weights[q0:q1, k0:k1], queries[q0:q1], keys[k0:k1],
                                  title=heatmap_title(kind, layer, head), query_title=qt, key_title=kt,
                                  query_offset=q0, key_offset=k0, zmin=zmin, zmax=zmax)
    st.plotly_chart(fig, config=views.plotly_config(f"{kind}-L{layer}-{'mean' if head == 'mean' else 'H' + head}"),
                    key=key)
    range_caption(weights, kind)


def view_heatmap(tr: transformer.Translator, result: Analysis) -> None:
    """One attention matrix, large."""
    st.caption("One attention matrix: pick the attention type, the layer and a head (or the mean over heads). "
               "Hover a cell for its query token, key token and weight; the camera icon saves a PNG.")
    kind = kind_control()
    layer, head = layer_head_controls(tr, kind)
    st.caption(READING[kind])
    draw_heatmap(result, kind, layer, head, key="heatmap_chart")


def view_all_heads(tr: transformer.Translator, result: Analysis) -> None:
    """Every layer x head of one type, and one opened large."""
    st.caption("Every head of one attention type at a glance, on one shared colour scale, so strong and diffuse "
               "heads compare fairly. Click a head in the grid (or pick it below) to open it large.")
    kind = kind_control()
    attn = result.attention(kind)
    queries, keys = result.axes(kind)
    options = [f"L{layer} · H{h}" for layer in range(1, attn.shape[0] + 1) for h in range(1, attn.shape[1] + 1)]
    pick = st.session_state.get("grid_pick")
    highlight = None
    if pick in options:
        index = options.index(pick)
        highlight = (index // attn.shape[1], index % attn.shape[1])
    def open_clicked_head() -> None:  # a click on a cell of the grid opens that head, as the pills below do
        picked = views.grid_pick((st.session_state.get("grid_chart") or {}).get("selection"))
        label = picked and f"L{picked[0]} · H{picked[1]}"
        if label in options:
            st.session_state["grid_pick"] = label

    st.plotly_chart(views.head_grid(attn, queries, keys, kind, highlight=highlight, zrange=colour_range(attn)),
                    config=views.plotly_config(f"{kind}-all-heads"), key="grid_chart", on_select=open_clicked_head,
                    selection_mode="points")
    if st.session_state.get("grid_pick") not in options:
        st.session_state.pop("grid_pick", None)
    pick = st.pills("Open a head large", options, key="grid_pick")
    if pick:
        layer, head = (int(x[1:]) for x in pick.split(" · "))
        draw_heatmap(result, kind, layer, str(head), key="grid_large_chart")


def view_lines(tr: transformer.Translator, result: Analysis) -> None:
    """BertViz-style token-to-token lines for one layer."""
    st.caption("Token-to-token lines for one layer, one colour per head (like BertViz's head view): queries on the "
               "left, keys on the right; stronger weights draw darker, thicker lines. Hover a token to see where "
               "each head sends it; click a head in the legend to hide it.")
    kind = kind_control(with_scale=False)
    layer, _ = layer_head_controls(tr, kind, with_head=False)
    attn = result.attention(kind)[layer - 1]
    queries, keys = result.axes(kind)
    c1, c2, c3 = st.columns([2, 2, 1])
    heads = c1.multiselect("Heads", list(range(1, tr.config.n_heads + 1)),
                           default=list(range(1, tr.config.n_heads + 1)), key="lines_heads")
    focus_options = ["all"] + list(range(len(queries)))
    focus = choose(c2.selectbox, "Only the lines of query", focus_options, "lines_focus", "all",
                   format_func=lambda i: "every query" if i == "all" else f"{i}: {queries[i]}")
    threshold = c3.slider("Hide weights below", 0.0, 0.5, 0.05, 0.01, key="lines_threshold")
    fig = views.attention_lines(attn, queries, keys, heads=[h - 1 for h in heads],
                                focus=None if focus == "all" else int(focus), threshold=threshold,
                                title=f"{KIND_NAMES[kind]} · layer {layer}")
    shown = attn[[h - 1 for h in heads]] if heads else attn[:0]
    if shown.size and (shown if focus == "all" else shown[:, int(focus)]).max() < threshold:
        st.info(f"No weight in this selection reaches {threshold:.2f}; lower 'Hide weights below' to see lines "
                "(a head that spreads its attention evenly draws only faint ones).", icon=":material/tune:")
    st.plotly_chart(fig, config=views.plotly_config(f"{kind}-L{layer}-lines"), key="lines_chart")


def view_step(tr: transformer.Translator, result: Analysis) -> None:
    """Top-k candidates and cross-attention of one output step."""
    st.caption("Step-through decoding: at each output step, the model's top candidates for the next piece with "
               "their probabilities (given the pieces before it), and where that step's cross-attention looked.")
    steps = len(result.target_tokens)
    c1, c2, c3 = st.columns([3, 1, 1])
    if steps > 1:
        step = c1.slider("Output step", 1, steps, 1, key="step")
    else:
        step = 1
        c1.caption("The output has a single step.")
    k = c2.slider("Candidates", 3, result.topk_probs.shape[1], min(8, result.topk_probs.shape[1]), key="topk")
    layers = list(range(1, tr.config.n_decoder_layers + 1))
    layer = choose(c3.selectbox, "Cross-attention layer", layers, "step_layer", layers[-1])
    t = step - 1
    produced = result.target_tokens[t]
    st.caption("Output so far (the piece of this step last)")
    st.code("  ".join(result.target_tokens[:t]) + ("  " if t else "") + f"[{produced}]", language=None,
            wrap_lines=True)
    candidates = result.topk_tokens[t][:k]
    probs = result.topk_probs[t][:k]
    chosen_id = result.target_ids[t]
    ids = list(result.topk_ids[t][:k])
    chosen = ids.index(chosen_id) if chosen_id in ids else None
    if chosen is None:
        candidates = [*candidates, produced]
        probs = np.append(probs, result.chosen_probs[t])
        chosen = len(candidates) - 1
    a, b = st.columns([2, 3]) if len(result.source_tokens) <= 40 else (st.container(), st.container())
    with a:
        st.plotly_chart(views.topk_figure(candidates, probs, chosen), config=views.plotly_config(f"step{step}-topk"),
                        key="topk_chart")
        st.caption(f"Kept piece: p = {result.chosen_probs[t]:.3f}. Beam search can keep a piece that is not the "
                   "most probable at its own step, when it leads to a better whole sentence.")
    with b:
        cross = result.cross[layer - 1][:, t, :]  # (H, S)
        st.plotly_chart(views.step_cross_figure(cross, result.source_tokens, produced,
                                                zrange=colour_range(cross, cross.mean(axis=0))),
                        config=views.plotly_config(f"step{step}-cross"), key="step_cross_chart")


def view_table(tr: transformer.Translator, result: Analysis) -> None:
    """Per-head diagnostics; a selected row opens its heatmap."""
    st.caption("Head diagnostics, one row per head; click a column header to sort, select a row to open its "
               "heatmap. Entropy (nats) is low for focused heads; 'on special token' is the share on </s> (source "
               "keys) or <s> (decoder keys), where idle heads park their attention; previous / same / next are "
               "the shares on the key one position before, at, or after the query (by index). All are means over "
               "the queries.")
    rows = head_diagnostics({k: result.attention(k) for k in KINDS}, result.special_keys())
    frame = pd.DataFrame(rows)
    shown = frame.drop(columns=["kind"]).assign(type=frame["kind"].map(KIND_SHORT))  # short names: room for numbers
    number = st.column_config.NumberColumn(format="%.3f")
    share = {c: st.column_config.ProgressColumn(c, min_value=0.0, max_value=1.0, format="%.2f")
             for c in ("max weight", "on special token", "on previous", "on same", "on next")}
    event = st.dataframe(shown, hide_index=True, width="stretch", on_select="rerun", selection_mode="single-row",
                         key="diag_table", column_config={"entropy": number, **share}, height=360)
    selected = list(getattr(getattr(event, "selection", None), "rows", []) or [])
    if selected:
        row = frame.iloc[selected[0]]
        draw_heatmap(result, str(row["kind"]), int(row["layer"]), str(int(row["head"])), key="table_chart")
    else:
        st.info("Select a row (the box at its left) to open that head's heatmap.", icon=":material/touch_app:")


def view_ablation(tr: transformer.Translator, checkpoint: str, device: str, result: Analysis) -> None:
    """Switch heads off, translate again, compare."""
    st.caption("Head ablation: switch heads off (their output is multiplied by 0; their weights are still "
               "computed but no longer reach the rest of the network), translate again, and compare.")
    heads = inference.all_heads(tr)
    labels = {head_label(h): h for h in heads}
    c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
    chosen = c1.multiselect("Heads to switch off", list(labels), key="ablate",
                            placeholder="e.g. Cross · L1 · H2")
    run = c2.button("Translate without them", key="ablate_run", type="primary", width="stretch")
    sub = st.session_state.submitted
    if run:
        if not chosen:
            st.warning("Choose at least one head to switch off.")
        st.session_state.ablation = {"text": sub["text"], "settings": sub["settings"],
                                     "heads": tuple(sorted(labels[c] for c in chosen))}
    abl = st.session_state.get("ablation")
    if not abl or abl["text"] != sub["text"] or abl["settings"] != sub["settings"] or not abl["heads"]:
        st.info("Choose heads and press the button; the new translation appears beside the original.")
        return
    try:
        ablated = cached.get_analysis(checkpoint, device, abl["text"], abl["settings"], abl["heads"])
    except Exception as err:
        st.error(f"The ablated translation failed: {type(err).__name__}: {md_escape(err)}")
        return
    forced = cached.get_forced_logprob(checkpoint, device, tuple(result.source_ids), tuple(result.target_ids),
                                   abl["heads"])
    base = cached.get_forced_logprob(checkpoint, device, tuple(result.source_ids), tuple(result.target_ids), ())
    st.caption(f"Switched off: {', '.join(head_label(h) for h in abl['heads'])}")
    a, b = st.columns(2)
    with a.container(border=True):
        st.caption("Original")
        st.text(result.translation or "(empty)")
        st.metric("Score", f"{result.score:.3f}")
    with b.container(border=True):
        st.caption(f"With {len(abl['heads'])} head(s) off")
        st.text(ablated.translation or "(empty)")
        st.metric("Score", f"{ablated.score:.3f}", delta=f"{ablated.score - result.score:+.3f}")
    same = "the same" if ablated.translation == result.translation else "a different"
    st.caption(f"The ablated model gives {same} translation. The original translation's log-probability under "
               f"the ablated model: {forced:.3f} (was {base:.3f}, change {forced - base:+.3f}); a big drop means "
               "these heads mattered for it.")
    kind = kind_control(key="ablate_att")
    layers = list(range(1, n_layers(tr, kind) + 1))
    layer = choose(st.selectbox, "Layer to compare", layers, "ablate_layer", layers[-1])
    c1, c2 = st.columns(2)
    qt, kt = AXIS_TITLES[kind]
    pair = [res.attention(kind)[layer - 1].mean(axis=0) for res in (result, ablated)]
    zmin, zmax = colour_range(*pair)  # one colour scale for both
    for col, res, weights, name in ((c1, result, pair[0], "original"), (c2, ablated, pair[1], "heads off")):
        queries, keys = res.axes(kind)
        fig = views.attention_heatmap(weights, queries, keys, zmin=zmin, zmax=zmax,
                                      title=f"{name}: {KIND_NAMES[kind]} · layer {layer} · mean over heads",
                                      query_title=qt, key_title=kt)
        col.plotly_chart(fig, config=views.plotly_config(f"ablation-{name}"), key=f"ablation_{name}_chart")


def view_masks(tr: transformer.Translator, result: Analysis) -> None:
    """Padding and causal masks of this sentence, and how they combine."""
    st.caption("The masks decide which keys a query may see: a blocked key's score is set to −∞ before the "
               "softmax, so its weight is exactly 0. Add padding to see the sentence as it sits in a batch next to "
               "longer ones.")
    c1, c2 = st.columns(2)
    pad_src = c1.slider("Padding after the source", 0, 8, 2, key="pad_src")
    pad_tgt = c2.slider("Padding after the decoder input", 0, 8, 2, key="pad_tgt")
    masks = inference.mask_arrays(tr, result, pad_src, pad_tgt)
    src = result.source_tokens + ["<pad>"] * pad_src
    dec = result.decoder_input_tokens + ["<pad>"] * pad_tgt
    panels = [
        ("encoder", "Encoder self-attention: padding mask", src, src,
         "Every source piece may look at every real source piece, in both directions. Only the <pad> columns are "
         "blocked: padding_mask(src) is True where the key is a real token, broadcast over all queries."),
        ("causal", "Causal mask", dec, dec,
         "Lower triangle: decoder position i sees positions 0…i only, so training on whole sentences never lets "
         "a step peek at the piece it must predict."),
        ("decoder", "Decoder self-attention: padding AND causal", dec, dec,
         "What the decoder really uses: the causal triangle with the <pad> columns removed (padding_mask(tgt) & "
         "causal_mask(T))."),
        ("cross", "Cross-attention: source padding", dec, src,
         "Each decoder position may read every real source piece; only the source <pad> columns are blocked. No "
         "causal part: the whole source is known before decoding starts."),
    ]
    per_row = 1 if max(len(src), len(dec)) > 40 else 2  # long sentences: one mask per row, to read the tokens
    for i in range(0, 4, per_row):
        cols = st.columns(per_row)
        for col, (key, title, queries, keys, text) in zip(cols, panels[i:i + per_row]):
            with col:
                qtitle = "source (query)" if key == "encoder" else "decoder input (query)"
                ktitle = "source (key)" if key in ("encoder", "cross") else "decoder input (key)"
                st.plotly_chart(views.mask_figure(masks[key], queries, keys, title, qtitle, ktitle),
                                config=views.plotly_config(f"mask-{key}"), key=f"mask_{key}_chart")
                st.caption(text)
    unpadded = inference.mask_arrays(tr, result, 0, 0)
    leak = max(masked_weight(result.decoder, unpadded["decoder"]), masked_weight(result.cross, unpadded["cross"]),
               masked_weight(result.encoder, unpadded["encoder"]))
    st.success(f"Check on this sentence's real attention: the largest weight on any blocked position is {leak:g} "
               "(decoder self-attention never looks ahead).", icon=":material/check_circle:")


def wave_dims(d_model: int, length: int) -> list[int]:
    """Even (sine) dimensions whose wavelengths are about 2π, length/4, length/2 and 2·length, plus one cosine."""
    dims = {0}
    for target in (length / 4, length / 2, 2 * length):
        i = np.log(max(target, 2 * np.pi) / (2 * np.pi)) / np.log(10000.0) * d_model  # wavelength = 2π·10000^(i/d)
        dims.add(int(min(max(0, 2 * round(i / 2)), d_model - 2)))
    dims.add(min(sorted(dims)[1] + 1 if len(dims) > 1 else 1, d_model - 1))
    return sorted(dims)


def view_positional(tr: transformer.Translator, checkpoint: str, device: str, result: Analysis | None) -> None:
    """The sinusoidal positional encoding: table, waves, similarity, the model's table, sizes."""
    st.caption("The sinusoidal positional encoding added to every token embedding: PE[pos, 2i] = sin(pos / "
               "10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)). Each pair of dimensions is a wave; "
               "wavelengths grow geometrically from 2π to 10000·2π, so nearby positions get similar codes.")
    c1, c2 = st.columns(2)
    d_model = c1.slider("d_model", 8, 1024, int(tr.config.d_model), 8, key="pe_d")
    length = c2.slider("Positions", 8, 512, int(min(100, max(tr.config.max_len, 8))), 1, key="pe_len")
    table = inference.positional_table(length, d_model)
    a, b = st.columns(2)
    a.plotly_chart(views.pe_heatmap(table), config=views.plotly_config("positional-encoding"), key="pe_heat")
    with b:
        dims = st.multiselect("Dimensions to draw", list(range(d_model)), default=wave_dims(d_model, length),
                              key=f"pe_dims_{d_model}_{length}")
        st.plotly_chart(views.pe_waves(table, dims), config=views.plotly_config("pe-waves"), key="pe_waves")
    a, b = st.columns(2)
    with a:
        st.plotly_chart(views.pe_similarity(table), config=views.plotly_config("pe-similarity"), key="pe_sim")
        st.caption("Cosine similarity between the codes of two positions: it depends only on their distance "
                   "(the bands run parallel to the diagonal), which lets attention use relative positions.")
    with b:
        own = inference.model_pe(tr)
        diff = float(np.abs(own - inference.positional_table(*own.shape)).max())
        st.plotly_chart(views.pe_heatmap(own, title=f"The model's own table ({own.shape[0]} × {own.shape[1]})"),
                        config=views.plotly_config("model-pe"), key="pe_model")
        st.caption(f"tr.model.pe, the buffer the model adds; largest difference from the formula: {diff:.1e}.")
    if result is not None:
        norms = inference.embedding_norms(tr, result.source_ids)
        own = inference.model_pe(tr)
        pe_norms = np.linalg.norm(own[: len(result.source_ids)], axis=1)
        vocab = cached.get_vocab_norms(checkpoint, device)
        st.plotly_chart(views.norms_figure(result.source_tokens, norms, pe_norms, vocab),
                        config=views.plotly_config("pe-vs-embeddings"), key="pe_norms")
        st.caption(f"Every positional code has length √(d_model/2) = {np.sqrt(tr.config.d_model / 2):.2f}. The "
                   "embeddings are multiplied by √d_model before the code is added, so a token's identity is not "
                   "drowned by its position.")
    else:
        st.info("Translate a sentence to compare its token embeddings with the positional codes.")


def view_evolution(tr: transformer.Translator, checkpoint: str, device: str, result: Analysis) -> None:
    """The same sentence's attention in the training snapshots."""
    st.caption("The same sentence in the training snapshots shipped with the checkpoint: each snapshot is run "
               "teacher-forced on the final translation (so the axes match) and also translates on its own.")
    snaps = inference.list_snapshots(tr)
    history = (tr.metadata or {}).get("history")
    if not snaps:
        st.info("This checkpoint has no training snapshots (a snapshots/ folder of stepNNNNNNN.safetensors files "
                "written by `python -m transformer.train --snapshots ...`).", icon=":material/history:")
        fig = views.history_figure(history) if isinstance(history, list) and history else None
        if fig is not None:
            st.caption("Validation scores during training, from the model card.")
            st.plotly_chart(fig, config=views.plotly_config("training-history"), key="evolution_history")
        return
    kind = kind_control()
    layer, head = layer_head_controls(tr, kind)
    panels, rows = [], []
    for path in snaps:
        try:
            attn, text = cached.get_snapshot_attentions(checkpoint, device, str(path), tuple(result.source_ids),
                                                        tuple(result.target_ids))
        except Exception as err:
            st.warning(f"Skipped {md_escape(path.name)}: {md_escape(err)}")
            continue
        step = inference.snapshot_step(path)
        panels.append((f"step {step}", pick_weights(attn[kind], layer, head)))
        rows.append({"checkpoint": f"step {step}", "its own greedy translation": text or "(empty)"})
    steps = (tr.metadata or {}).get("steps")
    final_name = f"final (step {steps})" if steps else "final"
    panels.append((final_name, pick_weights(result.attention(kind), layer, head)))
    rows.append({"checkpoint": final_name, "its own greedy translation": result.translation})
    queries, keys = result.axes(kind)
    st.plotly_chart(views.evolution_figure(panels, queries, keys, heatmap_title(kind, layer, head),
                                           zrange=colour_range(*[w for _, w in panels])),
                    config=views.plotly_config(f"evolution-{kind}-L{layer}"), key="evolution_chart")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if isinstance(history, list) and history:
        fig = views.history_figure(history, marks=[inference.snapshot_step(p) for p in snaps])
        if fig is not None:
            st.caption("Validation scores during training; dotted lines mark the snapshots.")
            st.plotly_chart(fig, config=views.plotly_config("training-history"), key="evolution_history")


def view_export(checkpoint: str, device: str, result: Analysis) -> None:
    """JSON / NPZ downloads, PNG hint and the share link."""
    st.caption("Take the numbers with you, or share this exact view.")
    sub = st.session_state.submitted
    c1, c2 = st.columns(2)
    with c1.container(border=True):
        st.markdown("**Attention weights**")
        st.caption("Every layer and head of the three attention types, shaped (layers, heads, queries, keys), "
                   "with the tokens.")
        st.download_button("Download JSON", cached.get_export(checkpoint, device, sub["text"], sub["settings"], (),
                                                              "json"),
                           file_name="attention.json", mime="application/json", key="download_json",
                           icon=":material/data_object:", on_click="ignore")
        st.download_button("Download NPZ (numpy)", cached.get_export(checkpoint, device, sub["text"], sub["settings"],
                                                                     (), "npz"),
                           file_name="attention.npz", mime="application/octet-stream", key="download_npz",
                           icon=":material/download:", on_click="ignore")
    with c2.container(border=True):
        st.markdown("**Figures and links**")
        st.caption("Every chart has a camera icon in its toolbar (top right, on hover) that saves it as a PNG. "
                   "The page address carries the sentence, the decoding settings and the view, so copying it "
                   "shares exactly what you see:")
        try:
            base = (st.context.url or "").split("?")[0]
        except Exception:  # no browser context (tests, bare mode)
            base = ""
        st.code(f"{base}?{st.session_state.get('_share_query', '')}", language=None, wrap_lines=True)


# ------------------------------------------------------------------------------------------------ page


def main() -> None:
    """The page: sidebar, model, input, translation, the chosen view; then the URL is brought up to date."""
    init_state()
    checkpoint, device = sidebar()
    st.title("Inside a translation Transformer")
    st.caption("Type a sentence, translate it, and explore every attention head of the encoder-decoder: heatmaps, "
               "all heads at once, BertViz-style lines, step-by-step decoding, head statistics and ablation, masks, "
               "positional encodings and how attention grew during training.")
    tr = load_model(checkpoint, device)
    if tr is None:
        return
    show_model_facts(tr)
    card = inference.model_card(tr)
    if card:
        with st.expander("About this model (its model card)", icon=":material/description:"):
            st.markdown(card)  # the checkpoint's own README: Markdown, never raw HTML
    input_area(tr)
    result = None
    sub = st.session_state.get("submitted")
    if sub:
        try:
            with st.spinner("Translating…"):
                result = cached.get_analysis(checkpoint, device, sub["text"], tuple(sub["settings"]), ())
        except Exception as err:  # never a stack trace
            st.error(f"The translation failed: {type(err).__name__}: {md_escape(err)}", icon=":material/error:")
    if result is not None:
        show_translation(tr, result)
        if sub["text"] != st.session_state.source_text or tuple(sub["settings"]) != current_settings():
            st.caption(":material/info: The text or the decoding settings changed: press **Translate** to apply them.")
    if st.session_state.get("view") not in VIEWS:
        st.session_state.view = "Heatmap"
    view = st.segmented_control("View", VIEWS, key="view", required=True, label_visibility="collapsed",
                                format_func=lambda v: f"{VIEW_ICONS[v]} {v}")
    st.session_state._share_query = urlencode(url_params(view))
    try:
        if view == "Positional encoding":
            view_positional(tr, checkpoint, device, result)
        elif result is None:
            st.info("Type or pick a sentence and press **Translate** to see its attention.",
                    icon=":material/translate:")
        elif view == "Heatmap":
            view_heatmap(tr, result)
        elif view == "All heads":
            view_all_heads(tr, result)
        elif view == "Lines":
            view_lines(tr, result)
        elif view == "Step through":
            view_step(tr, result)
        elif view == "Head table":
            view_table(tr, result)
        elif view == "Ablation":
            view_ablation(tr, checkpoint, device, result)
        elif view == "Masks":
            view_masks(tr, result)
        elif view == "Training evolution":
            view_evolution(tr, checkpoint, device, result)
        elif view == "Export":
            view_export(checkpoint, device, result)
    except Exception as err:  # never a stack trace
        st.error(f"This view could not be drawn: {type(err).__name__}: {md_escape(err)}", icon=":material/error:")
    sync_url(url_params(view))


main()
