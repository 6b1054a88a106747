"""Decoding (the paper's section 6.1): greedy and beam search with the length penalty, over the model's key/value
cache.

    settings.py           ``DecodeSettings``: how to decode, validated when made; the length penalty and the
                          output-length rule, each written once
    search.py             greedy search and the one beam search with its two scoring rules (GNMT / fairseq and
                          Hugging Face transformers)
    step.py               a search's step: the next token's log-probabilities (cache or full forward), padding and
                          BOS never, forced tokens; a large batch's best pieces a block of the vocabulary at a time
    beam_transformers.py  ``beam_search_transformers``: that beam search under transformers' rules (Marian / OPUS-MT)
    tree.py               ``BeamTree``: the record of every hypothesis a beam search expanded (the Beam tree view)

The names below are the public entry point (``from transformer.decoding import DecodeSettings``).
"""

from .beam_transformers import beam_search_transformers
from .search import Hypotheses, beam_search, greedy_decode, search
from .settings import (
    DEFAULT_ALPHA,
    DEFAULTS,
    SCORINGS,
    TRANSFORMERS_ALPHA,
    DecodeSettings,
    chosen_alpha,
    chosen_scoring,
    length_penalty,
    max_output_length,
    output_limits,
)
from .tree import BeamNode, BeamTree

__all__ = [
    "DEFAULT_ALPHA", "DEFAULTS", "SCORINGS", "TRANSFORMERS_ALPHA", "BeamNode", "BeamTree", "DecodeSettings",
    "Hypotheses", "beam_search", "beam_search_transformers", "chosen_alpha", "chosen_scoring", "greedy_decode",
    "length_penalty", "max_output_length", "output_limits", "search",
]
