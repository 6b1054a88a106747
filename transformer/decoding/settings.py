"""How to decode: :class:`DecodeSettings` (beam size, length penalty, output-length rule, scoring rules, languages),
the one object the translator, the app and the benches pass around, validated when made; what ``alpha=None`` and
``scoring=None`` mean (:func:`chosen_alpha`, :func:`chosen_scoring`); the length penalty (:func:`length_penalty`,
the paper's section 6.1) and the output-length rule (:func:`max_output_length`), each written once here for every
search (:mod:`transformer.decoding.search`). Every default of decoding is here: :data:`DEFAULTS` (the searches' and
the commands' defaults are its fields), :data:`DEFAULT_ALPHA`, :data:`TRANSFORMERS_ALPHA`."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from ..network.model import Transformer

SCORINGS = ("gnmt", "transformers")
DEFAULT_ALPHA = 0.6  # GNMT's length penalty (the paper's alpha), for checkpoints that name none
TRANSFORMERS_ALPHA = 1.0  # Hugging Face generate()'s own length penalty, the default under its scoring rules


def chosen_alpha(metadata: object) -> float:
    """The length penalty a checkpoint's ``metadata.json`` names (``decoding.alpha``, a number in [0, 10]), else
    :data:`DEFAULT_ALPHA`: the one place ``alpha=None`` is decided."""
    decoding = metadata.get("decoding") if isinstance(metadata, dict) else None
    value = decoding.get("alpha") if isinstance(decoding, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 10.0:
        return float(value)
    return DEFAULT_ALPHA


def chosen_scoring(metadata: object) -> str:
    """The beam-scoring rules a checkpoint's ``metadata.json`` names (``beam_scoring``, one of ``SCORINGS``), else
    ``"gnmt"``: the one place ``scoring=None`` is decided."""
    value = metadata.get("beam_scoring", "gnmt") if isinstance(metadata, dict) else "gnmt"
    return value if value in SCORINGS else "gnmt"


def _integer(name: str, value: object, low: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or (low is not None and value < low):
        raise ValueError(f"{name} must be an integer{'' if low is None else f' of at least {low}'}, not {value!r}")


def _number(name: str, value: object, low: float | None) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or (low is not None and value < low):
        raise ValueError(f"{name} must be a finite number{'' if low is None else f' of at least {low:g}'}, "
                         f"not {value!r}")


@dataclass(frozen=True)
class DecodeSettings:
    """How to decode, the one object the translator, the app and the benches pass around, validated when made
    (whether by the constructor, :meth:`but` or a translator's keywords). ``beam_size`` 1 is greedy search;
    ``alpha``: the length penalty (None: the checkpoint's own, :meth:`filled`); at most
    ``floor(max_len_a * source + max_len_b)`` output tokens (:func:`max_output_length`); ``scoring``: beam search's
    rules, one of ``SCORINGS`` (None: the checkpoint's); ``src_lang`` / ``tgt_lang``: a multilingual model's
    language codes (None: its defaults)."""

    beam_size: int = 4
    alpha: float | None = None
    max_len_a: float = 1.5
    max_len_b: int = 10
    src_lang: str | None = None
    tgt_lang: str | None = None
    scoring: str | None = None

    def __post_init__(self) -> None:
        _integer("beam_size", self.beam_size, 1)
        if self.alpha is not None:
            _number("alpha", self.alpha, None)
        _number("max_len_a", self.max_len_a, 0.0)
        _integer("max_len_b", self.max_len_b, None)
        if self.scoring is not None and self.scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {SCORINGS}, not {self.scoring!r}")
        for name in ("src_lang", "tgt_lang"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a language code (a string), not {getattr(self, name)!r}")

    def but(self, **changes: object) -> DecodeSettings:
        """These settings with the ``changes`` that are not None (keyword sugar: ``translate(text, beam_size=5)``);
        a name that is no field is a ``TypeError``, a wrong value a ``ValueError``."""
        given = {k: v for k, v in changes.items() if v is not None}
        unknown = set(given) - {f.name for f in fields(self)}
        if unknown:
            raise TypeError(f"not a decoding setting: {', '.join(sorted(unknown))}")
        return replace(self, **given) if given else self

    def filled(self, metadata: object = None) -> DecodeSettings:
        """These settings with the length penalty and the scoring rules they leave None taken from a checkpoint's
        ``metadata.json`` (:func:`chosen_alpha`, :func:`chosen_scoring`; no metadata: :data:`DEFAULT_ALPHA`,
        ``"gnmt"``)."""
        return self.but(alpha=chosen_alpha(metadata) if self.alpha is None else None,
                        scoring=chosen_scoring(metadata) if self.scoring is None else None)

    def max_output_length(self, model: Transformer, src_len: int | Tensor) -> int | Tensor:
        """:func:`max_output_length` under these settings."""
        return max_output_length(model, src_len, self.max_len_a, self.max_len_b)


DEFAULTS = DecodeSettings()  # the decoding defaults, the one home of every default a search or a command uses


def length_penalty(length: Tensor | int, alpha: float, scoring: str = "gnmt") -> Tensor:
    """What a finished hypothesis' log-probability is divided by, for ``|Y|`` = ``length`` output tokens (EOS
    included): ``"gnmt"``, the GNMT penalty ((5 + |Y|) / 6)^alpha (Wu et al., 2016), used by the paper with alpha 0.6;
    ``"transformers"``, Hugging Face's |Y|^alpha."""
    length = torch.as_tensor(length)
    if scoring == "transformers":
        return length.double() ** alpha  # in double, as transformers' Python floats (a 0-dim divisor: float32 after)
    return ((5.0 + length.float()) / 6.0) ** alpha


def max_output_length(model: Transformer, src_len: int | Tensor, max_len_a: float, max_len_b: int) -> int | Tensor:
    """The one output-length formula: at most ``floor(a * src_len + b)`` generated tokens, within
    ``[1, max_len - 1]``. ``src_len`` an int (returns an int) or a tensor of lengths (returns a long tensor)."""
    lengths = torch.as_tensor(src_len, dtype=torch.float64)
    limit = (max_len_a * lengths + max_len_b).floor().long().clamp(1, model.config.max_len - 1)
    return int(limit) if not isinstance(src_len, Tensor) else limit


def output_limits(model: Transformer, src: Tensor, max_len_a: float, max_len_b: int) -> Tensor:
    """Each sentence's own maximum output length ``(B,)``, from its unpadded length, so a sentence
    decodes the same alone as in a padded batch."""
    return max_output_length(model, (src != model.config.pad_id).sum(dim=1), max_len_a, max_len_b)
