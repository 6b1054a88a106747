"""Beam search with Hugging Face transformers' scoring rules, so a Marian / OPUS-MT checkpoint run here gives
exactly what ``MarianMTModel.generate(num_beams=K, length_penalty=alpha)`` gives: the one
:func:`transformer.decoding.beam_search` with ``scoring="transformers"`` (how the two rules differ: its module's
docstring; the tests check this one against ``generate()``)."""

from __future__ import annotations

from torch import Tensor

from ..network.model import Transformer
from .search import Hypotheses, beam_search
from .settings import DEFAULTS, TRANSFORMERS_ALPHA


def beam_search_transformers(model: Transformer, src: Tensor, beam_size: int = DEFAULTS.beam_size,
                             alpha: float = TRANSFORMERS_ALPHA, max_len_a: float = DEFAULTS.max_len_a,
                             max_len_b: int = DEFAULTS.max_len_b, head_mask: dict[str, Tensor] | None = None,
                             forced: Tensor | None = None) -> Hypotheses:
    """``beam_search(..., scoring="transformers")`` (transformers' own default alpha, ``TRANSFORMERS_ALPHA``):
    scores are the log-probability divided by ``|Y| ** alpha``."""
    return beam_search(model, src, beam_size, alpha, max_len_a, max_len_b, head_mask=head_mask, forced=forced,
                       scoring="transformers")
