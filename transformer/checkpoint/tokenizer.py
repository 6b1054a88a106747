"""Tokenizers: the :class:`TokenizerProtocol` every model family's tokenizer meets, our sentencepiece wrapper (one
joint vocabulary for source and target) and Marian's split one."""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import sentencepiece as spm

from .regular import read_regular

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
MAX_TOKENIZER_BYTES = 64 * 2**20  # a tokenizer file, at most: NLLB-200's tokenizer.json is 17 MB, its
# sentencepiece model 4.9 MB; ours 0.3-0.4 MB


def read_tokenizer_file(path: str | Path) -> bytes:
    """A tokenizer file's bytes: a regular file of at most ``MAX_TOKENIZER_BYTES`` (``regular.FileRefused``, a
    ``ValueError``, otherwise; a FIFO never blocks)."""
    return read_regular(path, MAX_TOKENIZER_BYTES, Path(path).name)


@runtime_checkable
class TokenizerProtocol(Protocol):
    """What ``Translator``, the heads command and the app ask of a tokenizer, whatever the model family.

    ``encode`` gives the pieces of a text without special tokens; the family's special tokens frame them:
    ``source_frame(lang)`` the ids before and after a source (ours and Marian: ``[]``, ``[</s>]``; NLLB / M2M100:
    ``[lang_code]``, ``[</s>]``), ``target_prefix(lang)`` the ids decoding must produce first (NLLB / M2M100: the
    target language's code). ``languages``: the codes a multilingual model takes (empty for one language pair).
    """

    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int

    @property
    def vocab_size(self) -> int: ...

    @property
    def languages(self) -> tuple[str, ...]: ...

    def encode(self, text: str) -> list[int]: ...

    def source_frame(self, lang: str | None = None) -> tuple[list[int], list[int]]: ...

    def target_prefix(self, lang: str | None = None) -> list[int]: ...

    def encode_source(self, text: str, lang: str | None = None) -> list[int]: ...

    def encode_target(self, text: str, lang: str | None = None) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def pieces(self, ids: Sequence[int]) -> list[str]: ...


class Framing:
    """The special-token framing of a one-language-pair model: sources end in ``</s>``, targets start bare."""

    eos_id: int
    languages: tuple[str, ...] = ()

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def source_frame(self, lang: str | None = None) -> tuple[list[int], list[int]]:
        """Ids before and after a source's pieces."""
        return [], [self.eos_id]

    def target_prefix(self, lang: str | None = None) -> list[int]:
        """Ids a translation starts with (after the decoder's start token)."""
        return []

    def encode_source(self, text: str, lang: str | None = None) -> list[int]:
        """A source as the encoder reads it, special tokens included."""
        before, after = self.source_frame(lang)
        return [*before, *self.encode(text), *after]

    def target_pieces(self, text: str) -> list[int]:
        """A target text's pieces (a family with a target vocabulary of its own overrides this)."""
        return self.encode(text)

    def encode_target(self, text: str, lang: str | None = None) -> list[int]:
        """A reference translation as the decoder would produce it, without the start token and ``</s>``."""
        return [*self.target_prefix(lang), *self.target_pieces(text)]


class Tokenizer(Framing):
    """Encodes text to ids and back; ``pieces`` gives the subwords as shown to a person."""

    def __init__(self, model_file: str | Path | None = None, model_proto: bytes | None = None) -> None:
        if model_proto is None:
            if model_file is None:
                raise ValueError("give model_file or model_proto")
            model_proto = read_tokenizer_file(model_file)
        self.model_proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)

    @classmethod
    def train(cls, files: Iterable[str | Path], vocab_size: int = 8000, model_type: str = "unigram",
              character_coverage: float = 1.0, max_sentences: int = 0, seed: int = 0) -> Tokenizer:
        """Train a joint vocabulary on text files (one sentence a line); pad 0, unk 1, bos 2, eos 3."""
        sentences: list[str] = []
        for f in files:
            sentences.extend(line.strip() for line in Path(f).read_text(encoding="utf-8").splitlines() if line.strip())
        spm.set_random_generator_seed(seed)
        proto = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=proto, vocab_size=vocab_size,
            model_type=model_type, character_coverage=character_coverage,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            input_sentence_size=max_sentences, shuffle_input_sentence=True,
            hard_vocab_limit=False, minloglevel=2,
        )
        return cls(model_proto=proto.getvalue())

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.model_proto)

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    @staticmethod
    def clean(text: str) -> str:
        """Text that is valid UTF-8: each lone surrogate (which sentencepiece and browsers refuse) becomes ``?``."""
        return text.encode("utf-8", "replace").decode("utf-8")

    def encode(self, text: str, add_eos: bool = False, add_bos: bool = False) -> list[int]:
        ids = self.sp.encode(self.clean(text))
        return ([BOS_ID] if add_bos else []) + ids + ([EOS_ID] if add_eos else [])

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode([self.clean(t) for t in texts])

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode([i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """Subword pieces for display: the ``▁`` word-start marker kept, specials as ``<s>``/``</s>``."""
        return [self.sp.id_to_piece(int(i)) for i in ids]


class SplitTokenizer(Framing):
    """Marian's tokenization (OPUS-MT): a source and a target sentencepiece model over one shared vocabulary
    (``source.spm``, ``target.spm``, ``vocab.json``), with the same interface as :class:`Tokenizer`. As
    transformers' ``MarianTokenizer``: Moses punctuation normalisation, a leading ``>>xx<<`` language code kept
    as one piece, pieces outside the vocabulary -> ``<unk>``."""

    def __init__(self, source_model: str | Path, target_model: str | Path, vocab: dict[str, int],
                 source_lang: str = "en", pad: str = "<pad>", eos: str = "</s>", unk: str = "<unk>") -> None:
        self.source = spm.SentencePieceProcessor(model_proto=read_tokenizer_file(source_model))
        self.target = spm.SentencePieceProcessor(model_proto=read_tokenizer_file(target_model))
        self.vocab = dict(vocab)
        self.inverse = {i: p for p, i in self.vocab.items()}
        self.pad_id, self.eos_id, self.unk_id = self.vocab[pad], self.vocab[eos], self.vocab[unk]
        self.bos_id = self.pad_id  # Marian starts decoding with <pad>
        self.special = {self.pad_id, self.eos_id}
        try:
            from sacremoses import MosesPunctNormalizer

            self.normalize = MosesPunctNormalizer(source_lang).normalize
        except (ImportError, FileNotFoundError):  # as MarianTokenizer: no normaliser without sacremoses
            self.normalize = lambda text: text

    @classmethod
    def from_dir(cls, path: str | Path) -> SplitTokenizer:
        """From a ``MarianMTModel.save_pretrained`` directory."""
        path = Path(path)
        import json

        vocab = json.loads(read_tokenizer_file(path / "vocab.json").decode("utf-8"))
        lang = "en"
        config = path / "tokenizer_config.json"
        if config.is_file():
            lang = json.loads(read_tokenizer_file(config).decode("utf-8")).get("source_lang") or lang
        return cls(path / "source.spm", path / "target.spm", vocab, source_lang=lang)

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    clean = staticmethod(Tokenizer.clean)

    def encode(self, text: str, add_eos: bool = False, add_bos: bool = False) -> list[int]:
        text = self.clean(text)
        text = self.normalize(text) if text else ""
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2:]
        pieces = code + self.source.encode(text, out_type=str)
        ids = [self.vocab.get(p, self.unk_id) for p in pieces]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def target_pieces(self, text: str) -> list[int]:
        """A target text through the target sentencepiece model (as ``MarianTokenizer(text_target=...)``)."""
        text = self.clean(text)
        pieces = self.target.encode(self.normalize(text) if text else "", out_type=str)
        return [self.vocab.get(p, self.unk_id) for p in pieces]

    def decode(self, ids: Sequence[int]) -> str:
        pieces = [self.inverse.get(int(i), "<unk>") for i in ids if int(i) not in self.special]
        return self.source.decode_pieces(pieces).replace("▁", " ").strip()  # shared vocabulary: source spm

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.inverse.get(int(i), "<unk>") for i in ids]
