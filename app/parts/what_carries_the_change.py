"""What carries the change: activation and path patching (``transformer.interpret.patching``). One
source word is swapped for another of the same piece count; each site (an encoder layer's stream at a source
piece, a decoder layer's reading of a source piece, a head) takes its value from the other run, and its effect says
how much of the change in the prediction it carries."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from transformer import Translator

from ..analysis import patching, probes
from ..analysis.inference import Analysis
from ..drawing import patching as drawing
from ..limits import work
from . import Chart, Choice, Note, Part, Source, Table, planned

PROBE = "patching"  # its record in app.analysis.probes.PROBES (cost, the page's words)
INTRO = ("If this source word were another, which layers, positions and heads would carry the change to the output? "
         "Activation patching (causal tracing): the sentence and an edited copy, one word swapped for another of "
         "the same number of pieces, are run on the same translation; one site at a time takes its value from the "
         "other run, and its effect is the share of the change in the prediction it brings back (1: all of it, 0: "
         "none). Attention says where a head looks; this says what carries the change.")
METRIC = "m = logit[target] − logit[foil]"
SCALE_NOTE = ("One colour scale for every chart of this edit: white 0, blue up to 1 (the site carries the whole "
              "change), red below 0 (it works against it); values beyond [0, 1] are shown as they are, the scale "
              "widened to hold them.")
MIN_LETTERS = 3  # the default edit swaps a word of at least this many letters (not "a", "in")


def default_edit(tr: Translator, a: Analysis) -> tuple[int, str] | None:
    """The edit a page shows first: the first common caption word (``patching.COMMON``), else the first word of at
    least ``MIN_LETTERS`` letters, that has a substitute of the same piece count, with its first substitute
    (``patching.substitutes``); None when no word has one."""
    text = patching.text_of(tr, a)
    spans = list(enumerate(patching.words(text)))
    for i, (_, _, word) in sorted(spans, key=lambda s: s[1][2].casefold() not in patching.COMMON):
        if len(word) >= MIN_LETTERS:
            found = patching.substitutes(tr, text, i, 1, a.settings.src_lang)
            if found:
                return i, found[0]
    return None


def word_index(text: str, word: Any) -> int | None:
    """A word of ``text`` named by its number (from 1) or by itself (its first occurrence); None when it has none."""
    spans = patching.words(text)
    if isinstance(word, (int, np.integer)) and not isinstance(word, bool):
        return int(word) - 1 if 1 <= word <= len(spans) else None
    found = [i for i, (_, _, w) in enumerate(spans) if w == str(word)]
    return found[0] if found else None


def runs(a: Analysis, p: patching.Patched) -> list[tuple[str, str, str, float, float]]:
    """Both runs as the view and the offline page show them: name, source, translation, ``m`` and ``log p(target)``."""
    r = p.result
    return [("Original", p.source, a.translation, r.m_clean, r.logp_clean),
            ("Edited", p.edited, p.edited_translation, r.m_edit, r.logp_edit)]


def metric_words(tr: Translator, a: Analysis, p: patching.Patched) -> str:
    """What the metric compares at which step, in one line."""
    r = p.result
    target, foil = tr.tokenizer.pieces([r.target, r.foil])
    at = a.target_tokens[r.step] if r.step < len(a.target_tokens) else target
    return (f"Both runs read the original translation up to output step {r.step + 1} ({at}); there {METRIC} compares "
            f"the target {target} with the foil {foil}.")


def summary(tr: Translator, a: Analysis, p: patching.Patched) -> list[Part]:
    """Both sentences with their translations, ``m`` and ``p(target)``, and what the metric compares at which
    step."""
    target = tr.tokenizer.pieces([p.result.target])[0]
    rows = [[name.lower(), source, translation, f"{m:+.3f}", f"{math.exp(logp):.3f}"]
            for name, source, translation, m, logp in runs(a, p)]
    return [Table(["run", "source", "translation", METRIC, f"p({target})"], rows, metric_words(tr, a, p)),
            *([Note(f"Nothing patched: {p.note}.", warning=True)] if p.note else [])]


def site_name(a: Analysis, kind: str, row: int, column: int) -> str:
    """One site in words (layers, heads and positions from 1, the source piece named)."""
    piece = a.source_tokens[column] if kind in ("enc_resid", "cross_kv") and column < len(a.source_tokens) else ""
    layer = "the embeddings" if row == 0 else f"layer {row}"
    return {"enc_resid": f"encoder {layer} at {column + 1}: {piece}",
            "enc_head": f"encoder layer {row + 1}, head {column + 1}",
            "cross_kv": f"decoder layer {row + 1} reading {column + 1}: {piece}",
            "cross_head": f"cross-attention layer {row + 1}, head {column + 1}",
            "dec_head": f"decoder self-attention layer {row + 1}, head {column + 1}",
            "dec_resid": f"decoder {layer} at position {column}"}[kind]


def preview_parts(a: Analysis, p: patching.Patched) -> list[Part]:
    """A previewed model's (``work.patching_preview``) word on its charts, and its top sites, first-order beside
    exact; nothing for a model patched exactly."""
    if not p.exact:
        return []
    agree = "undefined (too few sites, or one side constant)" if p.agreement is None or math.isnan(p.agreement) \
        else f"{p.agreement:.2f}"
    return [Note(f"This model is too large to patch every site on a CPU: the charts show each site's first-order "
                 f"effect (attribution patching: one forward and one backward pass), and the {len(p.exact)} strongest "
                 f"were patched exactly (table). Rank agreement of the two over those sites (Spearman): {agree}.",
                 warning=True),
            Table(["site", "first-order effect", "exact effect"],
                  [[site_name(a, kind, row, column), f"{e:+.3f}", f"{x:+.3f}"]
                   for kind, row, column, e, x in p.exact])]


def charts(a: Analysis, p: patching.Patched, n_layers: tuple[int, int]) -> list[Chart]:
    """The encoder's stream (layer x source piece, the edited piece outlined), the cross-attention's reading
    (decoder layer x source piece) and the heads (layer x head: cross-attention, decoder self-attention), on one
    diverging scale (``drawing.scale_bound``); nothing when no site was patched."""
    e = p.result.effect
    if not e:
        return []
    sites = [e[k] for k in ("enc_resid", "cross_kv", "cross_head", "dec_head") if k in e]
    bound = drawing.scale_bound(*sites)
    marked = list(p.result.edited_positions)
    source = drawing.marked_tokens(a.source_tokens, p.edited_tokens, marked)
    enc, dec = n_layers
    out = []
    if "enc_resid" in e:
        out.append(Chart(drawing.effect_heatmap(e["enc_resid"], drawing.layer_names(enc + 1, "embeddings"), source,
                                                "Encoder: one layer's stream at one source piece", "encoder layer",
                                                "source piece (edited: outlined)", bound, marked),
                         "Row 0 is the embeddings; row l the output of encoder layer l.", "patching-encoder"))
    if "cross_kv" in e:
        out.append(Chart(drawing.effect_heatmap(e["cross_kv"], drawing.layer_names(dec), source,
                                                "Cross-attention reading: decoder layer × source piece",
                                                "decoder layer", "source piece (edited: outlined)", bound, marked),
                         "Only that decoder layer reads that source piece's keys and values from the other run: at "
                         "which layer is the piece read?", "patching-cross-reading"))
    for kind, title in (("cross_head", "Cross-attention heads"), ("dec_head", "Decoder self-attention heads")):
        if kind in e:
            heads = e[kind]  # (L_d, H)
            out.append(Chart(drawing.effect_heatmap(heads, drawing.layer_names(heads.shape[0]),
                                                    drawing.head_names(heads.shape[1]),
                                                    f"{title} at output step {p.result.step + 1}", "decoder layer",
                                                    "head", bound, clickable=True),
                             "", f"patching-{kind.replace('_', '-')}"))
    return out


def fits(tr: Translator, a: Analysis) -> tuple[bool, list[str]]:
    """Whether patching an edit of this sentence fits the work allowed, and the notices."""
    return work.plan_patching(tr, len(a.source_ids), len(a.target_ids), a.settings)


def edit_of(tr: Translator, a: Analysis, options: dict) -> tuple[str, str, str] | str:
    """The edited text, the swapped word and its substitute, from ``options`` (``word``: its number from 1 or the
    word itself, ``substitute``), else the default edit; or why there is none (one line)."""
    word, substitute = options.get("word"), options.get("substitute")
    text = patching.text_of(tr, a)
    if word is None and substitute is None:
        found = default_edit(tr, a)
        if found is None:
            return "no word of this sentence has a substitute of the same number of pieces in the vocabulary"
        index, substitute = found
    else:
        index = word_index(text, word) if word is not None else None
        if index is None:
            return f"the sentence has no word {word!r}"
        if substitute is None:
            found = patching.substitutes(tr, text, index, 1, a.settings.src_lang)
            if not found:
                return f"no substitute of the same number of pieces for {patching.words(text)[index][2]!r}"
            substitute = found[0]
    edited = patching.edited_text(text, index, str(substitute))
    why = patching.same_length(tr, a, edited)
    return why if why else (edited, patching.words(text)[index][2], str(substitute))


def describe(src: Source) -> list[Part]:
    """The default edit (or ``word`` and ``substitute`` of the options), both directions behind a picker."""
    tr, a = src.tr, src.analysis
    ok, parts = planned(fits(tr, a))
    if not ok:
        return parts
    edit = edit_of(tr, a, src.options)
    if isinstance(edit, str):
        return [*parts, Note(f"Not patched: {edit}.", warning=True)]
    edited, word, substitute = edit
    run = probes.PROBES[PROBE].run
    n_layers = (tr.config.n_encoder_layers, tr.config.n_decoder_layers)
    first = str(src.options.get("direction", "denoise"))
    words = patching.DIRECTION_WORDS
    order = [first, *(d for d in words if d != first)] if first in words else list(words)
    runs = [run(tr, a, edited, None, None, order[0])]
    first = runs[0]  # the second direction: the same step, foil and edited translation
    runs.append(run(tr, a, edited, first.result.step, first.result.foil, order[1],
                    (first.edited_tokens, first.edited_translation)))
    options = [(d, [Note(patching.DIRECTION_WORDS[d]), *preview_parts(a, p), *charts(a, p, n_layers)])
               for d, p in zip(order, runs)]
    return [*parts, Note(f"The edit: {word} → {substitute}."), *summary(tr, a, runs[0]),
            *([] if runs[0].note else [Note(SCALE_NOTE), Choice("Direction", options, 0)])]
