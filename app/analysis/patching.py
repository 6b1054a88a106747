"""The app's side of activation patching (``transformer.interpret.patching``): the words of the analysed
sentence, a word's substitutes of the same piece count, the edit, and the probe's run on an analysis as the views keep
it (no Streamlit here; its record is ``app.analysis.probes.PROBES["patching"]``)."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from transformer import Translator

from ..limits import work
from .inference import Analysis, model_settings

WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")  # a word of letters (with inner apostrophes or hyphens)
SUBSTITUTE = re.compile(r"[^\s<>]{1,40}")  # what a typed substitute may be: one word, no markup
SUGGESTIONS = 8  # substitutes offered for a word
NEIGHBOURS = 64  # the vocabulary's words nearest the word's embedding, tried in turn for the same piece count
POOL_MOST = 50_000  # the vocabulary's first pieces searched for words (sentencepiece lists frequent pieces first)
COMMON = frozenset([  # the words a caption swaps most often (Multi30k's domain): offered first, the first edited
    "man", "men", "woman", "women", "boy", "boys", "girl", "girls", "child", "children", "kid", "kids", "person",
    "people", "baby", "dog", "dogs", "cat", "cats", "horse", "horses", "bird", "bike", "bicycle", "car", "ball",
    "shirt", "dress", "hat", "jacket", "street", "beach", "water", "snow", "grass", "field", "road", "table", "red",
    "blue", "green", "black", "white", "yellow", "orange", "pink", "purple", "brown", "gray", "grey", "young", "old",
    "small", "large", "big", "little"])
DIRECTION_WORDS = {"denoise": "Denoise: the edited run, one site at a time taken from the original run; 1 = that site "
                         "alone brings the original prediction back.",
              "noise": "Noise: the original run, one site at a time taken from the edited run; 1 = that site alone "
                       "carries the edit's whole change."}


def words(text: str) -> list[tuple[int, int, str]]:
    """The words of ``text`` as ``(start, end, word)`` character spans, in order."""
    return [(m.start(), m.end(), m.group(0)) for m in WORD.finditer(text)]


def edited_text(text: str, word: int, substitute: str) -> str:
    """``text`` with its ``word``-th word (0-based, :func:`words`) replaced by ``substitute``."""
    start, end, _ = words(text)[word]
    return text[:start] + substitute + text[end:]


def like(word: str, model: str) -> str:
    """``word`` with ``model``'s case of the first letter (a word capitalised only there, lowered)."""
    if model[:1].isupper():
        return word[:1].upper() + word[1:]
    return word[:1].lower() + word[1:] if word[1:] == word[1:].lower() else word


def _vocabulary_words(tr: Translator) -> tuple[np.ndarray, list[str]]:
    """The vocabulary's whole-word pieces of letters (``▁dog``), among its first ``POOL_MOST``: ids and words."""
    n = min(tr.tokenizer.vocab_size, tr.config.src_vocab_size, POOL_MOST)
    ids, found = [], []
    for i, piece in enumerate(tr.tokenizer.pieces(list(range(n)))):
        if piece.startswith("▁") and len(piece) > 2 and piece[1:].isalpha():
            ids.append(i)
            found.append(piece[1:])
    return np.asarray(ids, dtype=np.int64), found


@torch.no_grad()
def substitutes(tr: Translator, text: str, word: int, k: int = SUGGESTIONS, src_lang: str | None = None) -> list[str]:
    """Up to ``k`` words to put in place of ``text``'s ``word``-th word (0-based) so that the sentence keeps its
    number of source pieces: the vocabulary's words whose embeddings are nearest the word's own (its pieces' mean),
    by cosine (the common caption words of ``COMMON`` first), each kept when the edited sentence has as many pieces
    as ``text``."""
    original = words(text)[word][2]
    pieces = tr.tokenizer.encode(original)
    if not pieces:
        return []
    length = len(tr.encode_source(text, src_lang)[0])
    ids, pool = _vocabulary_words(tr)
    if not len(ids):
        return []
    table = tr.model.src_embed.weight
    query = table[torch.tensor(pieces, device=table.device)].float().mean(0)  # (D,)
    rows = table[torch.from_numpy(ids).to(table.device)].float()  # (N, D)
    score = torch.nn.functional.cosine_similarity(rows, query[None], dim=-1)  # (N,)
    found: list[str] = []
    nearest = score.topk(min(NEIGHBOURS, len(ids))).indices.tolist()
    for i in sorted(nearest, key=lambda i: pool[i].casefold() not in COMMON):  # stable: by cosine within each
        candidate = like(pool[i], original)
        if candidate.casefold() in {original.casefold(), *(f.casefold() for f in found)}:
            continue
        if len(tr.encode_source(edited_text(text, word, candidate), src_lang)[0]) == length:
            found.append(candidate)
            if len(found) == k:
                break
    return found


def text_of(tr: Translator, a: Analysis) -> str:
    """The analysed sentence's text: as given, or its source pieces decoded (a notebook's translation carries no
    text)."""
    return a.text or tr.tokenizer.decode(a.source_ids)


def same_length(tr: Translator, a: Analysis, edited: str) -> str | None:
    """None when ``edited`` has as many source pieces as the analysed sentence, else why not, in one line."""
    clean = tr.encode_source(text_of(tr, a), a.settings.src_lang)[0]
    other = tr.encode_source(edited, a.settings.src_lang)[0]
    if len(clean) == len(other):
        return None if clean != other else "the substitute leaves the sentence's pieces as they are"
    return (f"the substitute makes {len(other)} source pieces of the sentence's {len(clean)} "
            f"({' '.join(tr.tokenizer.pieces(other))}): patching compares two sources of the same length")


@dataclass
class Patched:
    """One edit of an analysed sentence, patched: ``result`` (``transformer.interpret.patching.PatchResult``), the
    edited text, its source pieces and its translation under the page's settings."""

    result: Any
    source: str
    edited: str
    edited_tokens: list[str]
    edited_translation: str
    exact: list[tuple[str, int, int, float, float]] = field(default_factory=list)  # a preview's top sites
    agreement: float | None = None  # a preview's Spearman agreement of its first-order and exact effects

    @property
    def note(self) -> str:
        """Why no site was patched (the metric barely moved), else ``""``."""
        return getattr(self.result, "note", "") or ("" if self.result.effect else "nothing was patched")


def run(tr: Translator, a: Analysis, edited: str, step: int | None = None, foil: int | None = None,
        direction: str = "denoise", translated: tuple[list[str], str] | None = None) -> Patched:
    """``transformer.interpret.patching.patch`` of the analysed sentence (teacher-forced on its translation) and
    ``edited``, every site, with the edited sentence's pieces and translation under the page's settings
    (``translated``, when known already; ``step`` and ``foil`` None: the contract's defaults, the step read from
    the edited translation the page shows, which is translated once)."""
    from transformer.interpret.patching import patch, preview

    s, text = a.settings, text_of(tr, a)
    other_ids = None
    if translated is None:
        other = tr.translate(edited, model_settings(tr, s), return_attention=False)
        translated, other_ids = (list(other.source_tokens), other.text), list(other.target_ids)
    chosen = dict(target_ids=list(a.target_ids), step=step, foil=foil, direction=direction, src_lang=s.src_lang,
                  tgt_lang=s.tgt_lang, edited_target_ids=other_ids)
    exact, agreement = [], None
    if work.patching_preview(tr):
        shown = preview(tr, text, edited, top=work.PREVIEW_TOP, **chosen)
        result, agreement = shown.estimate, shown.agreement
        exact = [(kind, row, column, float(e), float(x)) for (kind, row, column), e, x in
                 zip(shown.sites, shown.first_order, shown.exact)]
    else:
        result = patch(tr, text, edited, **chosen)
    return Patched(result, text, edited, *translated, exact, agreement)


def npz(p: Patched, a: Analysis) -> bytes:
    """One patching as a compressed ``.npz``: every site's ``effect_<site>`` and ``metric_<site>``, the scalars, the
    step, target and foil, and both sentences with their pieces."""
    r = p.result
    arrays = {f"{name}_{site}": np.asarray(v) for name in ("effect", "metric") for site, v in
              getattr(r, name).items()}
    buf = io.BytesIO()
    np.savez_compressed(
        buf, **arrays, m_clean=r.m_clean, m_edit=r.m_edit, logp_clean=r.logp_clean, logp_edit=r.logp_edit,
        target=r.target, foil=r.foil, step=r.step, direction=np.asarray(r.direction),
        target_ids=np.asarray(r.target_ids), edited_positions=np.asarray(r.edited_positions, dtype=np.int64),
        source=np.asarray(p.source), edited=np.asarray(p.edited), source_tokens=np.asarray(a.source_tokens),
        edited_tokens=np.asarray(p.edited_tokens), target_tokens=np.asarray(a.target_tokens))
    return buf.getvalue()
