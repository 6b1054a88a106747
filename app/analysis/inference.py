"""The model work behind the explorer (no Streamlit here; ``app.analysis.cached`` adds the caches).

Everything the page draws comes out of :func:`analyse` as plain numpy arrays and lists in an
:class:`Analysis`, so it can be cached, pickled, exported and checked against the model.
"""

from __future__ import annotations

import functools
import io
import json
import re
import time
import unicodedata
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from transformer import Tokenizer, TranslationResult, Translator
from transformer.decoding import DecodeSettings as DecodeSettings  # re-exported: app.analysis.inference.DecodeSettings
from transformer.network import kinds
from transformer.network.kinds import HeadKey as HeadKey  # re-exported: app.analysis.inference.HeadKey
from transformer.network.kinds import all_heads as _all_heads

ANALYSIS_TOP_K = 10
MAX_INPUT_CHARS = 5000
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")  # Unicode's Bidi_Control characters


def clean_text(text: str) -> str:
    """User text fit for the model and the browser: valid UTF-8, no control characters but newlines and tabs,
    no bidirectional controls (U+202E and its kin reverse how the text is displayed)."""
    return _BIDI.sub("", _CONTROL.sub("", unicodedata.normalize("NFC", Tokenizer.clean(text))))


def take_input(text: str) -> tuple[str, list[str]]:
    """The app's input rules: ``text`` cleaned (:func:`clean_text`) and cut to ``MAX_INPUT_CHARS``, and one notice
    for each change (the page, the offline page and the notebook say the same)."""
    notices = []
    control = len(_CONTROL.findall(text))
    if control:
        notices.append(f"Removed {control} control character(s) (invisible characters such as NUL or ESC; "
                       "newlines and tabs are kept) from the text.")
    bidi = len(_BIDI.findall(text))
    if bidi:
        notices.append(f"Removed {bidi} bidirectional control character(s) (such as U+202E, which reverses how "
                       "text is displayed) from the text.")
    text = clean_text(text)
    if len(text) > MAX_INPUT_CHARS:
        notices.append(f"The text has {len(text):,} characters; only the first {MAX_INPUT_CHARS:,} were kept "
                       f"(the cut-off {len(text) - MAX_INPUT_CHARS:,} were dropped).")
        text = text[:MAX_INPUT_CHARS]
    return text, notices


def language_args(tr: Translator, settings: DecodeSettings) -> dict[str, str | None]:
    """``src_lang`` / ``tgt_lang`` for ``Translator.translate`` (codes the model does not take: its defaults)."""
    if not tr.languages:
        return {}
    return {"src_lang": settings.src_lang if settings.src_lang in tr.languages else None,
            "tgt_lang": settings.tgt_lang if settings.tgt_lang in tr.languages else None}


def model_settings(tr: Translator, settings: DecodeSettings) -> DecodeSettings:
    """``settings`` as this model takes them: language codes it does not take become its defaults (None)."""
    return replace(settings, **{"src_lang": None, "tgt_lang": None, **language_args(tr, settings)})


@dataclass
class Analysis:
    """One translated sentence with every attention weight, ``(layers, heads, queries, keys)`` per type,
    and the top-k next-token candidates of each output step (teacher-forced over the translation)."""

    text: str
    translation: str
    score: float
    source_tokens: list[str]
    target_tokens: list[str]  # output pieces, </s> last unless cut at the limit; query t produced target_tokens[t]
    decoder_input_tokens: list[str]  # <s> + outputs: the keys of decoder self-attention
    source_ids: list[int]
    target_ids: list[int]
    truncated: bool
    source_pieces: int  # pieces before truncation
    unknown_pieces: int
    encoder: np.ndarray
    decoder: np.ndarray
    cross: np.ndarray
    topk_tokens: list[list[str]]
    topk_ids: np.ndarray
    topk_probs: np.ndarray
    chosen_probs: np.ndarray
    end_logprobs: np.ndarray  # (T,) log p(the sentence ends) at each output step (</s> or a closing mark: omission)
    settings: DecodeSettings = field(default_factory=DecodeSettings)
    ablated: tuple[HeadKey, ...] = ()
    seconds: float = 0.0
    device: str = "cpu"
    hit_max_len: bool = False  # the output stopped at the maximum length before the model ended it (cut)
    unknown_chars: list[str] = field(default_factory=list)  # the input's characters outside the vocabulary

    def attention(self, kind: str) -> np.ndarray:
        """``(layers, heads, Q, K)`` of ``"encoder"``, ``"decoder"`` or ``"cross"``."""
        return {"encoder": self.encoder, "decoder": self.decoder, "cross": self.cross}[kind]

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) of an attention type."""
        if kind == "encoder":
            return self.source_tokens, self.source_tokens
        if kind == "decoder":
            return self.target_tokens, self.decoder_input_tokens
        return self.target_tokens, self.source_tokens

    def special_keys(self) -> dict[str, int | None]:
        """Key index of ``</s>`` (source keys) and ``<s>`` (decoder keys), for the head table."""
        return {"encoder": len(self.source_tokens) - 1, "cross": len(self.source_tokens) - 1, "decoder": 0}


# ----------------------------------------------------------------------------------------------- translating


@dataclass(frozen=True)
class Sentence:
    """A sentence and its pieces (the tokenizer's ``encode``), tokenized once on its way to the page: the work
    estimates, the translation and the analysis all read these pieces."""

    text: str
    pieces: tuple[int, ...]


def sentence(tr: Translator, text: str) -> Sentence:
    """``text`` with its pieces under ``tr``'s tokenizer."""
    return Sentence(text, tuple(tr.tokenizer.encode(text)))


def all_heads(tr: Translator) -> list[HeadKey]:
    """Every head of the model as ``(kind, layer, head)``."""
    return _all_heads(tr.config)


def build_head_mask(tr: Translator, ablated: tuple[HeadKey, ...]) -> dict[str, torch.Tensor] | None:
    """``head_mask`` for the model: 1 everywhere, 0 for each ablated head; None when nothing is ablated."""
    return kinds.head_mask(tr.config, ablated, tr.device) if ablated else None


def stack_layers(attns: tuple[torch.Tensor, ...]) -> np.ndarray:
    """Per-layer ``(1, H, Q, K)`` tensors -> ``(L, H, Q, K)`` float32 numpy."""
    return torch.stack([a[0].float().cpu() for a in attns]).numpy()


@torch.no_grad()
def analyse(tr: Translator, text: str, settings: DecodeSettings | None = None,
            ablated: tuple[HeadKey, ...] = (), top_k: int = ANALYSIS_TOP_K,
            pieces: tuple[int, ...] | None = None) -> Analysis:
    """Translate ``text`` and collect every attention weight and the per-step candidates (``settings`` None: the
    defaults; ``pieces``: the text's pieces when the caller has them, :class:`Sentence`)."""
    settings = settings or DecodeSettings()
    start = time.perf_counter()
    head_mask = build_head_mask(tr, ablated)
    result = tr.translate(text, model_settings(tr, settings), return_attention=False, head_mask=head_mask,
                          pieces=pieces)
    return analysis_of(tr, result, text, settings, ablated, top_k, start)


@torch.no_grad()
def analysis_of(tr: Translator, result: TranslationResult, text: str, settings: DecodeSettings | None = None,
                ablated: tuple[HeadKey, ...] = (), top_k: int = ANALYSIS_TOP_K, start: float | None = None) -> Analysis:
    """The :class:`Analysis` of a translation ``tr`` made of ``text``: one teacher-forced pass over its output gives
    every attention weight and the top-k candidates of each step (what :func:`analyse` returns after translating)."""
    from transformer.interpret.signals import end_logprobs, ending_ids  # interpret: once a sentence is analysed

    settings = settings or DecodeSettings()
    start = time.perf_counter() if start is None else start
    head_mask = build_head_mask(tr, ablated)
    out_ids = result.target_ids[:-1]  # the decoder input after BOS (target_ids ends in EOS unless cut)
    out = tr.attentions(result.source_ids, out_ids, head_mask)
    logits = out.logits[0].float()  # (T, V)
    probs = logits.softmax(dim=-1)  # (T, V)
    ends = end_logprobs(logits.log_softmax(dim=-1), ending_ids(tr.tokenizer, tr.config.eos_id))  # (T,)
    top_p, top_i = probs.topk(min(top_k, probs.size(-1)), dim=-1)
    chosen = probs.gather(1, torch.tensor(result.target_ids, device=probs.device)[:, None])[:, 0]
    top_i_list = top_i.cpu().tolist()
    unknown = sum(1 for i in result.source_ids if i == tr.tokenizer.unk_id)
    return Analysis(
        text=text, translation=result.text, score=float(result.score), source_tokens=list(result.source_tokens),
        target_tokens=list(result.target_tokens), decoder_input_tokens=list(result.decoder_input_tokens),
        source_ids=list(result.source_ids), target_ids=list(result.target_ids), truncated=bool(result.truncated),
        source_pieces=result.source_pieces or len(result.source_ids), unknown_pieces=unknown,
        encoder=stack_layers(out.encoder_attentions), decoder=stack_layers(out.decoder_attentions),
        cross=stack_layers(out.cross_attentions), topk_tokens=[tr.tokenizer.pieces(row) for row in top_i_list],
        topk_ids=np.asarray(top_i_list, dtype=np.int64), topk_probs=top_p.cpu().numpy().astype(np.float32),
        chosen_probs=chosen.cpu().numpy().astype(np.float32), end_logprobs=ends.cpu().numpy(),
        settings=settings, ablated=tuple(ablated),
        seconds=time.perf_counter() - start, device=str(tr.device), hit_max_len=bool(result.hit_max_len),
        unknown_chars=unknown_characters(tr.tokenizer, text) if unknown else [],
    )


@torch.no_grad()
def forced_logprob(tr: Translator, source_ids: list[int], target_ids: list[int],
                   ablated: tuple[HeadKey, ...] = ()) -> float:
    """Sum of log-probabilities of a fixed translation (``target_ids``, EOS included if produced), teacher-forced,
    with the ``ablated`` heads switched off."""
    out = tr.attentions(source_ids, target_ids[:-1], build_head_mask(tr, ablated))
    logp = out.logits[0].float().log_softmax(dim=-1)
    ids = torch.tensor(target_ids, device=logp.device)[:, None]
    return float(logp.gather(1, ids).sum())


# ----------------------------------------------------------------------------------------------- export


def export_json(analysis: Analysis, checkpoint: str = "") -> str:
    """Tokens, translation, settings and every attention weight as JSON (nested lists; ``attention`` last).

    The weights are encoded a head at a time and joined (the same text as one ``json.dumps`` of the whole): one
    call over a long input's millions of numbers would hold the interpreter lock for seconds, stalling every other
    visitor's run in the server, and build a nested list of that many Python floats first."""
    payload = {
        "checkpoint": checkpoint, "source": analysis.text, "translation": analysis.translation,
        "score": analysis.score, "hit_max_len": analysis.hit_max_len, "settings": analysis.settings.__dict__,
        "ablated_heads": [{"type": k, "layer": layer + 1, "head": h + 1} for k, layer, h in analysis.ablated],
        "source_tokens": analysis.source_tokens, "target_tokens": analysis.target_tokens,
        "decoder_input_tokens": analysis.decoder_input_tokens,
        "layout": "attention[type][layer][head][query][key]; decoder query t produced target_tokens[t]",
    }
    parts = [json.dumps(payload, ensure_ascii=False)[:-1], ', "attention": {']
    for i, kind in enumerate(kinds.KINDS):
        weights = np.round(analysis.attention(kind).astype(np.float64), 6)  # (layers, heads, Q, K)
        layers = ("[" + ", ".join(json.dumps(head.tolist()) for head in layer) + "]" for layer in weights)
        parts.append(f"{', ' if i else ''}{json.dumps(kind)}: [{', '.join(layers)}]")
    return "".join(parts) + "}}"


def export_npz(analysis: Analysis) -> bytes:
    """Every attention array ``(layers, heads, Q, K)`` plus the tokens, as a compressed ``.npz``."""
    buf = io.BytesIO()
    np.savez_compressed(
        buf, encoder=analysis.encoder, decoder=analysis.decoder, cross=analysis.cross,
        source_tokens=np.asarray(analysis.source_tokens), target_tokens=np.asarray(analysis.target_tokens),
        decoder_input_tokens=np.asarray(analysis.decoder_input_tokens),
        source_ids=np.asarray(analysis.source_ids), target_ids=np.asarray(analysis.target_ids),
    )
    return buf.getvalue()


def split_sentences(text: str, language: str = "en", limit: int = 100) -> list[str]:
    """The sentences of ``text`` (sentencex, a maintained rule-based splitter), stripped, at most ``limit``."""
    from sentencex import segment

    try:
        parts = [s.strip() for s in segment(language, text)]
    except Exception:  # an unknown language code: the generic rules
        parts = [s.strip() for s in segment("en", text)]
    return [s for s in parts if s][:limit] or [text.strip()]


@functools.lru_cache(maxsize=1)
def _language_identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def latin_share(text: str) -> float | None:
    """The share of the letters of ``text`` that are Latin (None without letters)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return None
    return sum(1 for c in letters if unicodedata.name(c, "").startswith("LATIN")) / len(letters)


def detect_language(text: str, min_words: int = 4, min_probability: float = 0.9) -> tuple[str, float] | None:
    """(language code, probability) of ``text`` when py3langid is confident, else None (short text is unreliable).
    Text written mostly in another script than the Latin one (Chinese, Russian...) is named from 4 letters on, with
    py3langid's best guess however sure it is: Chinese has no spaces to count words by, and its script alone says
    it is not English or German."""
    share = latin_share(text)
    if share is not None and share < 0.5 and sum(c.isalpha() for c in text) >= min_words:
        language, probability = _language_identifier().classify(text)
        return str(language), float(probability)
    if len(text.split()) < min_words:
        return None
    language, probability = _language_identifier().classify(text)
    return (str(language), float(probability)) if probability >= min_probability else None


def unknown_characters(tokenizer: object, text: str, limit: int = 2000) -> list[str]:
    """The distinct characters of ``text`` (spaces aside) that the tokenizer can only write as ``<unk>``, in order
    of appearance; at most ``limit`` distinct characters are looked at (bounded work for any input)."""
    distinct = list(dict.fromkeys(c for c in text if not c.isspace()))[:limit]
    unk = tokenizer.unk_id
    return [c for c in distinct if unk in tokenizer.encode(c)]


def translate_sentences(tr: Translator, sentences: list[Sentence], settings: DecodeSettings) -> list[str]:
    """Plain translations of several sentences (one batch)."""
    results = tr.translate_batch([s.text for s in sentences], model_settings(tr, settings),
                                 pieces=[s.pieces for s in sentences])
    return [r.text for r in results]


