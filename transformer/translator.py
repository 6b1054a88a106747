"""``Translator``: text in, translation and every attention weight out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .checkpoint.families import family_of_dir
from .checkpoint.files import CheckpointError, resolve_device
from .checkpoint.hub import resolve_checkpoint_dir
from .checkpoint.mapped import resolve_dtype
from .checkpoint.tokenizer import TokenizerProtocol
from .decoding.search import search
from .decoding.settings import DEFAULT_ALPHA, SCORINGS, DecodeSettings, chosen_alpha, chosen_scoring
from .decoding.tree import BeamTree
from .network.kinds import decoder_input
from .network.linear import gemm_setting
from .network.masks import pad_sequences
from .network.model import Transformer
from .network.weights import decoding_layout


@dataclass
class TranslationResult:
    """One translation. Attentions are per layer, ``(n_heads, query_len, key_len)`` each, on CPU,
    exactly as a teacher-forced forward pass over ``source_ids`` and ``[BOS] + target_ids`` gives them:
    ``encoder_attentions`` ``(H, S, S)``, ``decoder_attentions`` ``(H, T, T)``, ``cross_attentions`` ``(H, T, S)``.
    Query ``t`` of the decoder is the step that predicted ``target_tokens[t]``. ``target_ids`` ends in EOS when the
    model produced it; a translation cut at the length limit has none (decoder input: BOS + ``target_ids[:-1]``), and
    ``hit_max_len`` says so: the output stopped at the maximum length (``max_len_a * source + max_len_b``) before the
    model ended the sentence, so the text is cut and its score is a partial hypothesis's. (``truncated`` is about
    the source: cut to the model's length before translating.)
    """

    text: str
    score: float
    source_tokens: list[str]
    target_tokens: list[str]
    source_ids: list[int]
    target_ids: list[int]
    encoder_attentions: tuple[Tensor, ...] = ()
    decoder_attentions: tuple[Tensor, ...] = ()
    cross_attentions: tuple[Tensor, ...] = ()
    truncated: bool = False
    decoder_input_tokens: list[str] = field(default_factory=list)
    tree: BeamTree | None = None  # with ``return_tree=True`` and beam search: every hypothesis it expanded
    hit_max_len: bool = False  # the output stopped at the maximum length, without EOS (cut, not whole)
    settings: DecodeSettings | None = None  # how it was decoded (the checkpoint's own alpha filled in)
    source_pieces: int = 0  # the source's pieces before the cut to the model's length (``truncated``)

    def for_bertviz(self) -> dict[str, Any]:
        """The keyword arguments of BertViz's ``model_view`` / ``head_view`` for this translation:
        ``model_view(**result.for_bertviz())``. Each attention gets BertViz's batch axis, ``(1, H, q, k)`` per
        layer; the encoder's tokens are ``source_tokens`` (S) and the decoder's are ``decoder_input_tokens``
        (T: BOS + the output but its last piece), the positions the decoder and cross attentions have."""
        if not self.encoder_attentions:
            raise ValueError("this translation has no attentions: translate with return_attention=True")
        out = {
            "encoder_attention": tuple(a.unsqueeze(0) for a in self.encoder_attentions),  # (H, S, S) -> (1, H, S, S)
            "decoder_attention": tuple(a.unsqueeze(0) for a in self.decoder_attentions),  # (H, T, T) -> (1, H, T, T)
            "cross_attention": tuple(a.unsqueeze(0) for a in self.cross_attentions),  # (H, T, S) -> (1, H, T, S)
            "encoder_tokens": list(self.source_tokens),
            "decoder_tokens": list(self.decoder_input_tokens),
        }
        s, t = len(out["encoder_tokens"]), len(out["decoder_tokens"])
        for name, shape in (("encoder_attention", (s, s)), ("decoder_attention", (t, t)), ("cross_attention", (t, s))):
            if any(tuple(a.shape[-2:]) != shape for a in out[name]):
                raise ValueError(f"{name} does not match {s} source and {t} decoder input tokens")
        return out


__all__ = ["DEFAULT_ALPHA", "SCORINGS", "DecodeSettings", "TranslationResult", "Translator", "chosen_alpha", "load"]


class Translator:
    """A model, its tokenizer and decoding settings. Beam search scores hypotheses by the ``scoring`` rules:
    ``"gnmt"`` (fairseq's search, GNMT length penalty) or ``"transformers"`` (Hugging Face ``generate``'s, so an
    OPUS-MT model translates here exactly as there; see ``decoding.beam_transformers``); by default the rules
    named in the checkpoint's metadata (``beam_scoring``), else ``"gnmt"``."""

    def __init__(self, model: Transformer, tokenizer: TokenizerProtocol, metadata: dict[str, Any] | None = None,
                 path: Path | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.metadata = metadata or {}
        self.path = path

    @property
    def config(self):
        return self.model.config

    @property
    def scoring(self) -> str:
        """The checkpoint's own beam-scoring rules (``metadata["beam_scoring"]``), else ``"gnmt"``."""
        return chosen_scoring(self.metadata)

    @property
    def default_alpha(self) -> float:
        """The length penalty the checkpoint was scored with (``metadata["decoding"]["alpha"]``, chosen on val),
        else :data:`DEFAULT_ALPHA`; what ``alpha=None`` means below."""
        return chosen_alpha(self.metadata)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def languages(self) -> tuple[str, ...]:
        """The language codes a multilingual model takes (``src_lang`` / ``tgt_lang`` below); empty otherwise."""
        return tuple(getattr(self.tokenizer, "languages", ()))

    @property
    def max_source_tokens(self) -> int:
        """Longest source (pieces, special tokens such as EOS or a language code excluded) the model takes."""
        before, after = self.tokenizer.source_frame()
        return self.config.max_len - len(before) - len(after)

    def encode_source(self, text: str, src_lang: str | None = None,
                      pieces: Sequence[int] | None = None) -> tuple[list[int], bool]:
        """Source ids with the family's special tokens (EOS; NLLB / M2M100: the source language's code first); cut
        to the model's length (``truncated`` says so). ``pieces``: the text's ``tokenizer.encode``, when the caller
        has it already (the text is then not tokenized again)."""
        before, after = self.tokenizer.source_frame(src_lang)
        ids = list(self.tokenizer.encode(text) if pieces is None else pieces)
        room = self.config.max_len - len(before) - len(after)
        return [*before, *ids[:room], *after], len(ids) > room

    def _forced(self, n: int, tgt_lang: str | None) -> Tensor | None:
        """The first output tokens every sentence must start with ``(n, P)`` (a target-language code), or None."""
        prefix = self.tokenizer.target_prefix(tgt_lang)
        return torch.tensor([prefix] * n, dtype=torch.long, device=self.device) if prefix else None

    def _pad(self, seqs: Sequence[Sequence[int]]) -> Tensor:
        return pad_sequences(seqs, self.config.pad_id).to(self.device)

    def settings(self, settings: DecodeSettings | None = None, **changes: Any) -> DecodeSettings:
        """``settings`` (None: the defaults) with the keyword ``changes`` that are not None (any field of
        :class:`DecodeSettings`, by name), and this checkpoint's own length penalty and scoring rules where they name
        none (:meth:`DecodeSettings.filled`)."""
        if settings is not None and not isinstance(settings, DecodeSettings):
            raise TypeError(f"settings must be a DecodeSettings, not {type(settings).__name__} (beam_size=... is a "
                            "keyword)")
        return (settings or DecodeSettings()).but(**changes).filled(self.metadata)

    @torch.no_grad()
    def generate(self, sources: Sequence[Sequence[int]], settings: DecodeSettings | None = None, *,
                 head_mask: dict[str, Tensor] | None = None, **changes: Any) -> tuple[list[list[int]], list[float]]:
        """Decode id sequences (each ending in EOS); returns output ids (without BOS/EOS) and scores. ``settings``,
        or its fields as keywords (``beam_size``, ``alpha``, ``max_len_a``, ``max_len_b``, ``scoring``, ``tgt_lang``:
        :meth:`settings`; ``alpha=None``: the checkpoint's, :attr:`default_alpha`)."""
        outputs, _, scores, *_ = self._decode(sources, self.settings(settings, **changes), head_mask)
        return outputs, scores

    def _decode(self, sources: Sequence[Sequence[int]], settings: DecodeSettings,
                head_mask: dict[str, Tensor] | None, record_tree: bool = False, return_attention: bool = False,
                ) -> tuple[list[list[int]], list[bool], list[float], list[BeamTree] | None, Any]:
        """Like ``generate``, and also whether each output ended with EOS (False: cut at the length limit), with
        ``record_tree`` (beam search only) each sentence's search tree, and with ``return_attention`` greedy search's
        own attentions (``Hypotheses.attentions``; None from beam search). The target language's code (if any) is
        imposed as every output's first token (it is part of the outputs)."""
        hyp = search(self.model, self._pad(sources), settings, head_mask=head_mask, record_tree=record_tree,
                     forced=self._forced(len(sources), settings.tgt_lang), return_attention=return_attention)
        outputs, ended = [], []
        for row in hyp.tokens.tolist():
            ids, stop = [], False
            for t in row:
                if t in (self.config.eos_id, self.config.pad_id):
                    stop = t == self.config.eos_id
                    break
                ids.append(t)
            outputs.append(ids)
            ended.append(stop)
        return outputs, ended, hyp.scores.tolist(), hyp.trees, hyp.attentions

    @torch.no_grad()
    def attentions(self, source_ids: Sequence[int], target_ids: Sequence[int],
                   head_mask: dict[str, Tensor] | None = None, logits: bool = True) -> Any:
        """Teacher-forced pass over one pair: decoder input ``[BOS] + target_ids`` -> ``Seq2SeqOutput`` (so
        ``len(target_ids) + 1`` decoder positions; a translation's own attentions are this pass over its
        ``target_ids[:-1]``, see :meth:`TranslationResult.for_bertviz`). ``logits=False``: no output projection
        (the attentions only; ``logits`` is then ``(0, V)``)."""
        src = self._pad([list(source_ids)])
        tgt = self._pad([[self.config.bos_id, *target_ids]])
        none = None if logits else torch.zeros(tgt.shape, dtype=torch.bool, device=tgt.device)  # (1, T): no position
        return self.model(src, tgt, return_attention=True, head_mask=head_mask, logits_mask=none)

    def translate(self, text: str, settings: DecodeSettings | None = None, *, return_attention: bool = True,
                  head_mask: dict[str, Tensor] | None = None, return_tree: bool = False,
                  pieces: Sequence[int] | None = None, **changes: Any) -> TranslationResult:
        """Translate one sentence; with its attentions unless ``return_attention=False``, and with beam search's
        tree of hypotheses when ``return_tree=True`` (recorded by the ``"gnmt"`` rules only: ``ValueError`` under
        others). How to decode: ``settings`` (:class:`DecodeSettings`; None: the defaults), or any of its fields as
        keywords, which override it
        (``translate(text, beam_size=5, alpha=1.0)``; also ``max_len_a``, ``max_len_b``, ``scoring``, ``src_lang``,
        ``tgt_lang``). ``alpha=None``: the checkpoint's length penalty (:attr:`default_alpha`). ``src_lang`` /
        ``tgt_lang``: language codes of a multilingual model (:attr:`languages`; None: the tokenizer's defaults); the
        target code is the translation's first token, forced. ``pieces``: the text's ``tokenizer.encode``, when the
        caller has it already (the text is then not tokenized again)."""
        return self.translate_batch([text], settings, return_attention=return_attention, head_mask=head_mask,
                                    return_tree=return_tree, pieces=None if pieces is None else [pieces],
                                    **changes)[0]

    def translate_batch(self, texts: Sequence[str], settings: DecodeSettings | None = None, *,
                        return_attention: bool = False, head_mask: dict[str, Tensor] | None = None,
                        return_tree: bool = False, pieces: Sequence[Sequence[int]] | None = None,
                        **changes: Any) -> list[TranslationResult]:
        """Translate many sentences in one batch (settings, their keywords and languages as in :meth:`translate`;
        ``pieces``: each text's ``tokenizer.encode``, when the caller has them already)."""
        chosen = self.settings(settings, **changes)  # checked even for no text
        if not texts:
            return []
        if pieces is not None and len(pieces) != len(texts):
            raise ValueError(f"{len(pieces)} pieces lists for {len(texts)} texts")
        pieces = [self.tokenizer.encode(t) for t in texts] if pieces is None else [list(p) for p in pieces]
        encoded = [self.encode_source(t, chosen.src_lang, p) for t, p in zip(texts, pieces)]
        sources = [ids for ids, _ in encoded]
        outputs, ended, scores, trees, found = self._decode(sources, chosen, head_mask, record_tree=return_tree,
                                                            return_attention=return_attention)
        results = []
        for i, ((src_ids, truncated), out_ids, eos, score) in enumerate(zip(encoded, outputs, ended, scores)):
            target_ids = [*out_ids, self.config.eos_id] if eos else list(out_ids)  # no EOS: cut at the limit
            result = TranslationResult(
                text=self.tokenizer.decode(out_ids), score=float(score),
                source_tokens=self.tokenizer.pieces(src_ids), target_tokens=self.tokenizer.pieces(target_ids),
                source_ids=list(src_ids), target_ids=target_ids, truncated=truncated,
                decoder_input_tokens=self.tokenizer.pieces(decoder_input(self.config.bos_id, target_ids)),
                tree=trees[i] if trees else None, hit_max_len=not eos, settings=chosen, source_pieces=len(pieces[i]),
            )
            if return_attention:
                s, t = len(src_ids), len(target_ids)
                if found is not None:  # greedy search's own: row i's part
                    row, kinds = i, found
                else:  # beam search: the pass over the output
                    out = self.attentions(src_ids, target_ids[:-1], head_mask, logits=False)
                    row, kinds = 0, (out.encoder_attentions, out.decoder_attentions, out.cross_attentions)
                (result.encoder_attentions, result.decoder_attentions, result.cross_attentions) = (
                    tuple(a[row, :, :q, :k].to("cpu", copy=True) for a in layers)
                    for layers, (q, k) in zip(kinds, ((s, s), (t, t), (t, s))))
            results.append(result)
        return results


def load(path_or_hub_id: str | Path, device: str | torch.device = "auto",
         progress: Callable[[int, int, str], None] | None = None,
         dtype: str | torch.dtype = "float32") -> Translator:
    """Load a checkpoint directory or Hugging Face Hub repo id into a ``Translator``.

    ``device="auto"`` takes CUDA when present. The checkpoint's family (``checkpoint.families``: ours, Marian /
    OPUS-MT, NLLB-200 / M2M100, from its ``config.json``) opens it; a ``save_pretrained`` directory or Hub id of
    another family is converted on load. The weights are memory-mapped and reach the model without a second copy
    (``checkpoint.mapped``); ``dtype="bfloat16"`` keeps them in bfloat16 (half the memory; attention weights are
    still computed and returned in float32). A model whose weights cannot fit in the memory available is refused
    before anything is allocated; no other size limit applies here. A Hub download calls
    ``progress(done_bytes, total_bytes, file)`` as it goes. Raises ``CheckpointError`` with a clear message (a bad
    ``ATTN_GEMM`` too, before anything is read).
    """
    try:
        gemm_setting()
    except ValueError as err:
        raise CheckpointError(str(err)) from None
    dev = resolve_device(device)
    chosen = resolve_dtype(dtype)
    path = resolve_checkpoint_dir(path_or_hub_id, progress)
    model, tokenizer, metadata = family_of_dir(path).load(path, str(path_or_hub_id), chosen)
    model = model.to(dev).eval()
    return Translator(decoding_layout(model), tokenizer, metadata, path)  # loaded for decoding: fast layout
