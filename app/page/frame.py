"""The frame around every view: the page's name and style, model loading, the input box, a longer text's
sentences and the translation panel (the sidebar: ``app.page.sidebar``). Every change applies at once."""

from __future__ import annotations

import re
import unicodedata

import streamlit as st

import transformer
from transformer import Translator, cli

from ..analysis import cached, inference
from ..analysis.inference import Analysis, Sentence
from ..limits import ledger, work
from ..models import catalog
from . import state
from .controls import arrows_select, choose, md_escape, tap_selects
from .frozen import frozen_rows
from .sidebar import fallback_model

GROUPS_SHOWN = "_sentence_groups_shown"  # how many groups of a longer text's sentences are translated
LANGUAGES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech", "es": "Spanish", "it": "Italian",
             "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "ru": "Russian", "uk": "Ukrainian", "ar": "Arabic",
             "he": "Hebrew", "el": "Greek", "hi": "Hindi", "nl": "Dutch", "pt": "Portuguese", "pl": "Polish"}
NAMED_CHARACTERS = 12  # the <unk> notice names at most this many characters


# The page's own layout rules: less empty space above and beside the content (so that on a 1280 x 720 laptop the
# first heatmap is on screen without scrolling), the SVG heatmap scrolls sideways rather than shrinking its labels,
# wide formulas scroll inside their box instead of being cut at the screen's edge; on a phone, plotly's toolbar
# (which would cover the charts' titles) is hidden and the densest charts keep a readable width and scroll sideways.
PAGE_CSS = """<style>
[data-testid=stMainBlockContainer] {padding: 2.75rem 1.5rem 3rem 1.5rem;}
[data-testid=stMainBlockContainer] [data-testid=stVerticalBlock] {gap: 0.75rem;}
/* the text box grows with its text, up to four lines (six on a phone): a 40-word sentence shows whole on every
   screen, none of its lines cut at the box's edge (its height follows the text, so no handle to drag) */
.st-key-source_text [data-testid=stTextAreaRootElement] {height: auto !important;}
.st-key-source_text textarea {field-sizing: content; height: auto !important; min-height: 66px;
  max-height: calc(4lh + 24px); resize: none;}
@media (min-width: 641px) {
  .st-key-page_title {margin-top: -2.1rem; min-height: 1.5rem; padding-right: 3rem;}  /* in the header's band */
  [data-testid=stHeader] {background: transparent;}
  [data-testid=stColumn]:has(.st-key-opened_head) {position: sticky; top: 3rem; align-self: flex-start;}
}
@media (max-width: 640px) {
  [data-testid=stMainBlockContainer] {padding: 3.25rem 0.75rem 3rem 0.75rem;}
  .st-key-source_text textarea {max-height: calc(6lh + 24px);}
  .js-plotly-plot .modebar-container {display: none;}
  .js-plotly-plot .gtitle {font-size: 12px !important;}
}
/* a row of buttons that wraps: each button whole (its own four borders and corners), none under its neighbour */
[data-testid=stButtonGroup] [role=radiogroup] {gap: 4px;}
[data-testid=stButtonGroup] [role=radiogroup] > button {margin: 0 !important; border-radius: 0.5rem !important;}
/* Streamlit hides the side a button shares with a chosen, hovered or focused neighbour (they touch in its row); here
   they stand apart, and a row that wraps would show a button with a side missing: each keeps its own */
[data-testid=stButtonGroup] [role=radiogroup] > button:not([data-selected]):not([data-hovered]):not(
  [data-focus-visible]):not([data-disabled]) {
  border-left-color: rgba(47, 45, 43, 0.2) !important; border-right-color: rgba(47, 45, 43, 0.2) !important;}
/* the chosen button under the pointer (as one just clicked stays): Streamlit darkens its background to the primary
   colour at 20 %, on which the primary-coloured label is 4.1:1; a darker blue keeps it at 5.2:1 (WCAG 2 AA) */
[data-testid=stButtonGroup] [role=radiogroup] > button[data-selected][data-hovered],
[data-testid=stButtonGroup] [role=radiogroup] > button[data-selected][data-hovered] * {color: #245d97 !important;}
/* small grey text at 4.5:1 or more on white and on the sidebar's grey (WCAG 2 AA; Streamlit's own grey: 3.8:1) */
[data-testid=stCaptionContainer] {color: #666563; opacity: 1;}
.attn-swipe {color: #666563; font-size: 0.875rem; margin: 0;}
[class*=st-key-attn_picture_] {overflow-x: auto; overflow-y: hidden;}
[class*=st-key-attn_picture_] img {display: block; max-width: 100%;}
[data-testid=stMarkdownContainer] .katex-display {overflow-x: auto; overflow-y: hidden; padding: 2px 0;}
/* the scripts' boxes, and the wrappers Streamlit puts them in (each would take a gap of the page's column) */
.st-key-tap_selects, .st-key-arrows_select, .st-key-frozen_rows,
[data-testid=stLayoutWrapper]:has(> .st-key-tap_selects, > .st-key-arrows_select, > .st-key-frozen_rows) {
  display: none;}
/* while a run lasts, what it has not sent again yet is dimmed after half a second in one step, not faded over the
   next second: the fade drew the whole page again at every frame (docs/benchmarks.md, "the stale fade"), on the
   cores that the run needs */
[data-stale=true], [data-stale=true] *, [data-testid=stExpander] details, [data-testid=stExpander] summary {
  transition-duration: 0s !important;}
/* selector.VIEW_TOP: the view's top, an empty box (no gap of its own), scrolled to under the header */
.st-key-view_top {height: 0; overflow: hidden; margin-bottom: -0.75rem; scroll-margin-top: 3.75rem;}
</style>"""


# the page's name, once, first on the page (on a wider screen it sits in the band of the header, above whatever a
# notice or the input brings)
PAGE_NAME = ("**:material/travel_explore: Attention explorer** :gray[· inside a translation Transformer, every "
             "attention weight visible]")


def page_name() -> None:
    """The page's name (``PAGE_NAME``), first on the page."""
    st.container(key="page_title").markdown(PAGE_NAME)


def page_style() -> None:
    """The page's layout rules (``PAGE_CSS``): spacing, sideways scrolling of wide charts and formulas; and the
    scripts by which a tap selects a chart's point (``controls.tap_selects``) and an arrow key a radio button
    (``controls.arrows_select``), and the one that draws the wide charts' frozen row labels (``frozen.frozen_rows``)."""
    st.html(PAGE_CSS)
    tap_selects()
    arrows_select()
    frozen_rows()


class DownloadProgress:
    """A Hub download's progress as a bar with the file and the megabytes, then one line saying what came."""

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint, self.bar = checkpoint, None

    def __call__(self, done: int, total: int, name: str) -> None:
        if self.bar is None:
            self.bar = st.progress(0.0)
        if name:
            self.bar.progress(min(done / total, 1.0) if total else 0.0,
                              text=f"Downloading {md_escape(self.checkpoint)} from the Hugging Face Hub: "
                                   f"{md_escape(name)} ({done / 1e6:,.1f} of {total / 1e6:,.1f} MB)")
        else:
            self.bar.empty()
            st.caption(f"Downloaded {md_escape(self.checkpoint)} from the Hugging Face Hub ({total / 1e6:,.1f} MB).")


def load_model(model: cached.Model) -> Translator | None:
    """The model's cached translator, or None after showing a clear message. Failures are remembered for the whole
    server (``cached.load``: every path to a model goes through it), so every visitor is told at once and the load
    is tried again at most once a minute; when the default model fails, the run starts again and
    :func:`fall_back_from_a_broken_default` opens a working one."""
    checkpoint = model.checkpoint
    message = cached.LOAD_FAILURES.get(model)
    if message is None:
        try:
            if catalog.needs_download(checkpoint):  # outside the model cache, so the bar is never replayed
                catalog.download(checkpoint, DownloadProgress(checkpoint))
            return model.tr
        except cached.LoadFailed as err:  # remembered by the load itself
            message = str(err)
        except transformer.CheckpointError as err:  # the download
            message = catalog.visitor_message(err)
            cached.LOAD_FAILURES.remember(model, message)
        except Exception as err:  # anything else from downloading: still one clear message
            message = catalog.visitor_message(f"{type(err).__name__}: {err}")
            cached.LOAD_FAILURES.remember(model, message)
        if catalog.public_mode() and checkpoint == catalog.default_checkpoint() and fallback_model(model):
            st.rerun()  # the next run opens a working model, with a notice
    st.error(f"The model {md_escape(catalog.short_name(checkpoint))} could not be loaded: {md_escape(message)}",
             icon=":material/error:")
    if checkpoint == cli.DEFAULT_CHECKPOINT:
        st.info("The default model (checkpoints/multi30k-en-de) is not here yet. Train it with "
                "`python -m transformer.train` (see the README), or name another checkpoint directory or Hugging "
                "Face Hub repo id in the sidebar, or set the ATTN_CHECKPOINT environment variable.")
    wait = cached.LOAD_FAILURES.retry_in(model)
    st.caption(f"This server tries a model that failed to load again at most once a minute: in {wait:.0f} s."
               if wait >= 1 else "This server tries a model that failed to load again at most once a minute.")
    if st.button("Try again", key="retry_load"):
        st.rerun()
    return None


def use_example() -> None:
    """Callback: the picked example goes into the text area and is translated at once."""
    pick = st.session_state.get(state.EXAMPLE)
    if pick and pick in state.EXAMPLES:
        st.session_state[state.SOURCE_TEXT] = pick
        submit()


LANGUAGE_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,15}")  # en, deu_Latn, zh_Hans: a code, never Markdown or a link


def language_pair(tr: Translator) -> tuple[str, str] | None:
    """(source, target) language codes from the model card's ``language_pair``, or None (none, or not two codes:
    the page shows them in labels and notices, where anything else could be Markdown or a link)."""
    pair = str((tr.metadata or {}).get("language_pair", ""))
    if "-" not in pair:
        return None
    src, tgt = pair.split("-", 1)
    return (src, tgt) if LANGUAGE_CODE.fullmatch(src) and LANGUAGE_CODE.fullmatch(tgt) else None


def capability(tr: Translator) -> str:
    """What the model is for, from its model card: language pair, domain and one-sentence-at-a-time."""
    pair = language_pair(tr)
    langs = f"{LANGUAGES.get(pair[0], pair[0])} → {LANGUAGES.get(pair[1], pair[1])}" if pair else "its language pair"
    domain = (tr.metadata or {}).get("domain")
    text = f"This model translates {langs}, one sentence at a time"
    if domain:
        text += f"; it was trained on {md_escape(domain)} and does best on text like that"
    return text + ". Longer text is split into sentences, each translated on its own."


def submit() -> None:
    """Callback of the text box (Ctrl+Enter, or leaving it), the examples and the Translate button: the text,
    cleaned and cut to the limit with a notice, is what the page shows from now on."""
    ss = st.session_state
    ss[state.SOURCE_TEXT] = state.take_text(ss.get(state.SOURCE_TEXT, ""))
    ss.pop(state.SENTENCE, None)
    ss[state.EMPTY_SUBMIT] = not ss[state.SOURCE_TEXT].strip()


def input_area(tr: Translator) -> None:
    """Text area, examples and the Translate button, with a line on what the model can do."""
    c1, c2, c3 = st.columns([4, 1.4, 1], vertical_alignment="bottom", gap="small")  # one row: the box is low
    pair = language_pair(tr)
    label = "Text to translate"
    if pair:
        label += f" ({LANGUAGES.get(pair[0], pair[0])} → {LANGUAGES.get(pair[1], pair[1])})"
    # the smallest box Streamlit draws (68 px), its label hidden (the placeholder and the button's help say it)
    c1.text_area(label, key=state.SOURCE_TEXT, height=68, on_change=submit,  # Ctrl+Enter applies it at once
                 placeholder=f"{label}: type a sentence, e.g. “A dog runs on the beach.”",
                 label_visibility="collapsed")
    if st.session_state.get(state.EXAMPLE) not in (None, st.session_state.get(state.SOURCE_TEXT)):
        st.session_state[state.EXAMPLE] = None  # the visitor typed (or a link brought) other text: no example
    c2.selectbox("Examples", state.EXAMPLES, index=None, key=state.EXAMPLE, on_change=use_example,
                 placeholder="Examples…", label_visibility="collapsed")
    c3.button("Translate", key="translate", type="primary", icon=":material/translate:", width="stretch",
              on_click=submit, help=capability(tr))
    state.show_notices()
    if st.session_state.pop(state.EMPTY_SUBMIT, False):
        st.warning("Type a sentence first: the text box is empty.", icon=":material/edit:")


def language_notice(tr: Translator, sentences: list[str]) -> None:
    """A notice when the input (or some of its sentences) looks like another language than the model's source."""
    pair = language_pair(tr)
    if not pair:
        return
    source = LANGUAGES.get(pair[0], pair[0])
    found = [(i, inference.detect_language(s)) for i, s in enumerate(sentences, 1)]
    other = [(i, f) for i, f in found if f and f[0] != pair[0]]
    if not other:
        return
    if len(sentences) == 1:
        lang, probability = other[0][1]
        st.info(f"This looks like {LANGUAGES.get(lang, lang)} ({probability:.0%} sure), but the model translates "
                f"from {source}: expect a poor translation.", icon=":material/translate:")
    else:
        listed = ", ".join(f"{i} ({LANGUAGES.get(f[0], f[0])})" for i, f in other)
        st.info(f"Sentence(s) {listed} do not look like {source}, the language this model translates from: expect "
                "poor translations there.", icon=":material/translate:")


def pick_sentence(model: cached.Model, sub: state.Submitted) -> Sentence | None:
    """Split the input into sentences; with more than one, show every translation and let one be explored (the
    picked one returned with its pieces: each sentence is tokenized once); one sentence: None, the input is the
    sentence. Sentences that look like another language than the model's get a notice."""
    tr = model.tr
    texts = inference.split_sentences(sub.text, language_pair(tr)[0] if language_pair(tr) else "en")
    language_notice(tr, texts)
    if len(texts) <= 1:
        st.session_state.pop(state.SENTENCE, None)
        return None
    sentences = [inference.sentence(tr, text) for text in texts]
    picked = st.session_state.get(state.SENTENCE)
    picked = picked - 1 if isinstance(picked, int) and 1 <= picked <= len(sentences) else 0
    plan = work.plan_text(tr, [len(s.pieces) for s in sentences], picked, sub.settings)
    asked = st.session_state.get(GROUPS_SHOWN)  # (checkpoint, submitted, groups): a new text starts at one group
    translations, shown = model.sentence_translations(
        sentences, plan, asked[2] if asked and asked[:2] == (model.checkpoint, sub) else 1)
    st.caption(f"The text holds {len(sentences)} sentences; each was translated on its own. Pick one to explore.")
    with st.container(border=True, height=280 if len(sentences) > 4 else "content"):  # bounded, scrolls
        st.text("\n".join(f"{i}. {src}\n   → {translations[i - 1]}" if i <= len(translations) else f"{i}. {src}"
                          for i, src in enumerate(texts, 1)))
    ledger.cut(plan.notices)
    if shown < len(plan.groups):
        rest = len(sentences) - len(translations)
        ledger.cut([f"{len(translations)} of the {len(sentences)} sentences translated so far (the next ones with the "
                  "button below the list; each sentence can still be explored)"])
        if st.button(f"Translate the next {len(plan.groups[shown])} sentences ({rest} left)", key="more_sentences"):
            st.session_state[GROUPS_SHOWN] = (model.checkpoint, sub, shown + 1)
            st.rerun()
    numbers = list(range(1, len(sentences) + 1))
    number = choose(st.selectbox, "Sentence to explore", numbers, state.SENTENCE, 1,
                    format_func=lambda n: f"{n}. {texts[n - 1][:80]}")
    return sentences[number - 1]


FSI, PDI = "\u2068", "\u2069"  # first-strong isolate ... pop directional isolate (Unicode bidi, UAX #9)


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 piece``, ``3 pieces``: the count and its noun, in the right number."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"


def unknown_notice(pieces: int, chars: list[str]) -> str:
    """The notice for input the vocabulary lacks: how many pieces became <unk>, and the characters behind them
    (their own count: a run of unknown characters is one piece), each isolated (FSI ... PDI), so a right-to-left
    letter keeps its quotes and commas where they are written."""
    named = ", ".join(f"“{FSI}{c}{PDI}”" if unicodedata.category(c).startswith("L") else  # a letter shows itself;
                      f"“{FSI}{c}{PDI}” ({unicodedata.name(c, f'U+{ord(c):04X}').lower()})"  # a symbol its name too
                      for c in chars[:NAMED_CHARACTERS])
    more = f" and {len(chars) - NAMED_CHARACTERS:,} more" if len(chars) > NAMED_CHARACTERS else ""
    which = (f", from {plural(len(chars), 'character')} it does not know: {named}{more}" if chars else "")
    verb = "is" if pieces == 1 else "are"
    return (f"{plural(pieces, 'piece')} of the input {verb} not in the model's vocabulary and "
            f"{'shows' if pieces == 1 else 'show'} as <unk>{which}. The model sees only that something unknown "
            "stood there.")


def show_translation(tr: Translator, result: Analysis, line: str | None = None) -> None:
    """The translation, its score and the subword pieces, with notices for truncation and unknown characters;
    ``line``: what names the sentence when it is a test set's line ("test_2016_flickr line 57")."""
    if result.truncated:
        st.warning(f"The text is {result.source_pieces} subword pieces long; this model takes at most "
                   f"{tr.max_source_tokens}, so only the first {tr.max_source_tokens} were translated.",
                   icon=":material/content_cut:")
    if result.unknown_pieces:
        st.info(md_escape(unknown_notice(result.unknown_pieces, result.unknown_chars)), icon=":material/help:")
    if result.hit_max_len:
        s = result.settings
        st.warning(f"Cut at the maximum length: the output stopped after {len(result.target_tokens)} pieces (a × "
                   f"source + b, a = {s.max_len_a:g}, b = {s.max_len_b}) before the model ended the sentence. Raise "
                   "Max length a or b in the sidebar to let it finish.", icon=":material/content_cut:")
    beam = result.settings.beam_size
    score = (f"score {result.score:.3f}, cut at the maximum length: an unfinished output's, not comparable with "
             "a whole sentence's" if result.hit_max_len else
             f"score {result.score:.3f} (log-probability / length penalty)")
    text, pieces = st.columns([3, 1.3], vertical_alignment="center")  # one row on a wide screen, no frame: low
    with text.container(gap=None):
        st.text(result.translation if result.translation.strip() else
                "(empty output: the model ended the sentence at once)")
        st.caption(f"{md_escape(line) + ' · ' if line else ''}Translation · {score} · "
                   f"{'greedy' if beam == 1 else f'beam {beam}'} · {result.seconds * 1000:.0f} ms on {result.device}")
    with pieces, st.expander(f"Subword pieces: {len(result.source_tokens)} in, {len(result.target_tokens)} out"):
        st.caption("Source pieces (▁ marks the start of a word; </s> ends the sentence)")
        st.text("  ".join(result.source_tokens))
        st.caption("Output pieces")
        st.text("  ".join(result.target_tokens))

