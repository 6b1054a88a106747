"""NLLB-200 / M2M100 tokenization without transformers: sentencepiece plus fairseq's ids and language codes.

As transformers' ``NllbTokenizer`` (``sentencepiece.bpe.model``; id = sentencepiece id + 1, fairseq's offset, with
``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3; language codes such as ``eng_Latn`` after the pieces) and
``M2M100Tokenizer`` (``vocab.json`` + ``sentencepiece.bpe.model``; codes ``__en__`` after the vocabulary). A source is
``[src_lang_code] pieces </s>``; a translation starts with ``[tgt_lang_code]`` (decoding starts from ``</s>``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from ..regular import FileRefused
from ..tokenizer import Framing, Tokenizer, read_tokenizer_file
from .fairseq_codes import M2M100_CODES, NLLB_CODES, WMT21_CODES

SPM_FILE = "sentencepiece.bpe.model"
FAIRSEQ_SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}


def _json(path: Path) -> Any:
    try:
        return json.loads(read_tokenizer_file(path).decode("utf-8"))
    except FileRefused:  # there but not read (a FIFO, over the bound): said, never taken for absent
        raise
    except (OSError, ValueError):
        return None


class FairseqTokenizer(Framing):
    """NLLB / M2M100's tokenizer (see the module docstring); meets ``TokenizerProtocol``."""

    clean = staticmethod(Tokenizer.clean)

    def __init__(self, spm_file: str | Path, lang_ids: dict[str, int], lang_tokens: dict[str, str],
                 vocab: dict[str, int] | None = None, specials: dict[str, int] | None = None,
                 src_lang: str | None = None, tgt_lang: str | None = None, legacy: bool = False) -> None:
        self.sp = spm.SentencePieceProcessor(model_proto=read_tokenizer_file(spm_file))
        self.vocab = vocab  # M2M100: piece -> id; None: NLLB's sentencepiece id + 1
        self.inverse = {i: p for p, i in (vocab or {}).items()}
        self.specials = dict(specials or FAIRSEQ_SPECIALS)
        self.pad_id, self.eos_id, self.unk_id = self.specials["<pad>"], self.specials["</s>"], self.specials["<unk>"]
        self.bos_id = self.eos_id  # decoding starts from </s>
        self.lang_ids, self.lang_tokens = dict(lang_ids), dict(lang_tokens)
        self.names = {**{i: p for p, i in self.specials.items()}, **{i: lang_tokens[c] for c, i in lang_ids.items()}}
        self.hidden = set(self.names)  # never part of a decoded text
        self.legacy = legacy
        codes = list(self.lang_ids)
        self.default_src = src_lang if src_lang in self.lang_ids else next(
            (c for c in ("eng_Latn", "en") if c in self.lang_ids), codes[0] if codes else None)
        self.default_tgt = tgt_lang if tgt_lang in self.lang_ids else next(
            (c for c in ("deu_Latn", "de", "fra_Latn", "fr") if c in self.lang_ids and c != self.default_src),
            codes[-1] if codes else None)

    @classmethod
    def from_dir(cls, path: str | Path) -> FairseqTokenizer:
        """From a ``save_pretrained`` directory of ``NllbTokenizer`` (``sentencepiece.bpe.model``; ids of the language
        codes from ``tokenizer.json`` when there, else fairseq's) or ``M2M100Tokenizer`` (with ``vocab.json``)."""
        path = Path(path)
        config = _json(path / "tokenizer_config.json") or {}
        src, tgt = config.get("src_lang"), config.get("tgt_lang")
        vocab = _json(path / "vocab.json")
        if isinstance(vocab, dict):  # M2M100: codes after the vocabulary, in the tokenizer's fixed order
            codes = WMT21_CODES if config.get("language_codes") == "wmt21" else M2M100_CODES
            lang_ids = {c: len(vocab) + i for i, c in enumerate(codes)}
            specials = {name: int(vocab[name]) for name in FAIRSEQ_SPECIALS if name in vocab}
            return cls(path / SPM_FILE, lang_ids, {c: f"__{c}__" for c in codes}, vocab, specials, src, tgt)
        sp_size = spm.SentencePieceProcessor(model_proto=read_tokenizer_file(path / SPM_FILE)).get_piece_size()
        added: dict[str, int] = {}
        tokenizer_json = _json(path / "tokenizer.json") or {}
        for token in tokenizer_json.get("added_tokens") or []:
            added[str(token.get("content"))] = int(token.get("id"))
        for i, token in (config.get("added_tokens_decoder") or {}).items():
            added.setdefault(str(token.get("content")), int(i))
        listed = config.get("extra_special_tokens") or config.get("additional_special_tokens")
        codes = [c for c in listed if isinstance(c, str)] if isinstance(listed, list) and listed else list(NLLB_CODES)
        lang_ids = {c: added.get(c, sp_size + 1 + i) for i, c in enumerate(codes)}  # fairseq: after the pieces
        specials = {**FAIRSEQ_SPECIALS, "<mask>": added.get("<mask>", sp_size + 1 + len(codes))}
        return cls(path / SPM_FILE, lang_ids, {c: c for c in codes}, None, specials, src, tgt,
                   legacy=bool(config.get("legacy_behaviour", False)))

    def __len__(self) -> int:
        return self.vocab_size

    @property
    def vocab_size(self) -> int:
        """One past the largest id (pieces, specials and language codes)."""
        pieces = len(self.vocab) if self.vocab is not None else self.sp.get_piece_size() + 1
        return max([pieces, *(i + 1 for i in self.names)])

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(self.lang_ids)

    def lang_id(self, lang: str | None, default: str | None) -> int:
        """The id of a language code (``None``: ``default``); ``ValueError`` naming a few valid ones otherwise."""
        code = lang or default
        if code not in self.lang_ids:
            raise ValueError(f"unknown language code {code!r}: this model takes e.g. {', '.join(self.languages[:5])}")
        return self.lang_ids[code]

    def _piece_id(self, piece: str, sp_id: int) -> int:
        if self.vocab is not None:
            return self.vocab.get(piece, self.unk_id)
        return self.unk_id if sp_id == self.sp.unk_id() else sp_id + 1  # fairseq's offset

    def encode(self, text: str) -> list[int]:
        """The pieces of ``text``, no special tokens. Spaces at either end are dropped, as sentencepiece (and
        NLLB's original tokenizer) does; transformers' tokenizers-based ``NllbTokenizer`` keeps a ``▁`` for them."""
        ids = self.sp.encode(self.clean(text))
        return [self._piece_id(self.sp.id_to_piece(i), i) for i in ids]

    def source_frame(self, lang: str | None = None) -> tuple[list[int], list[int]]:
        code = self.lang_id(lang, self.default_src)
        return ([], [self.eos_id, code]) if self.legacy else ([code], [self.eos_id])

    def target_prefix(self, lang: str | None = None) -> list[int]:
        return [self.lang_id(lang, self.default_tgt)]

    def pieces(self, ids: Sequence[int]) -> list[str]:
        out = []
        for i in map(int, ids):
            if i in self.names:
                out.append(self.names[i])
            elif self.vocab is not None:
                out.append(self.inverse.get(i, "<unk>"))
            else:
                out.append(self.sp.id_to_piece(i - 1) if 0 < i - 1 < self.sp.get_piece_size() else "<unk>")
        return out

    def is_piece(self, i: int) -> bool:
        """Whether id ``i`` is a sentencepiece piece (not a special token, language code or unused row)."""
        if i in self.hidden:
            return False
        return i in self.inverse if self.vocab is not None else 0 < i - 1 < self.sp.get_piece_size()

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; special tokens, language codes and unused rows left out."""
        return self.sp.decode_pieces(self.pieces([i for i in map(int, ids) if self.is_piece(i)])).strip()
