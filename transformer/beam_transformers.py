"""Beam search with Hugging Face transformers' scoring rules, so a Marian / OPUS-MT checkpoint run here gives
exactly what ``MarianMTModel.generate(num_beams=K, length_penalty=alpha)`` gives: the one
:func:`transformer.decoding.beam_search` with ``scoring="transformers"`` (how the two rules differ: its module's
docstring; the tests check this one against ``generate()``)."""

from __future__ import annotations

from torch import Tensor

from .decoding import Hypotheses, beam_search
from .model import Transformer


def beam_search_transformers(model: Transformer, src: Tensor, beam_size: int = 4, alpha: float = 1.0,
                             max_len_a: float = 1.5, max_len_b: int = 10,
                             head_mask: dict[str, Tensor] | None = None, forced: Tensor | None = None) -> Hypotheses:
    """``beam_search(..., scoring="transformers")`` (transformers' own default alpha, 1.0): scores are the
    log-probability divided by ``|Y| ** alpha``."""
    return beam_search(model, src, beam_size, alpha, max_len_a, max_len_b, head_mask=head_mask, forced=forced,
                       scoring="transformers")
