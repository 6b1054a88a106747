"""Address parameters: a tiny registry. The frame (:mod:`app.state`) declares its own; each view declares its
``PARAMS`` beside its ``render`` and :mod:`app.views` registers them here, so the address of a view holds exactly
that view's choices, and ``app.state`` never imports the views.

A :class:`Param` ties a URL name to a session-state key: ``parse`` turns the link's text into a value (None:
not understood), ``dump`` turns the value back into text, and the value equal to ``default`` is left out of the
address.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

FROM_LINK = "_from_link"  # {state key: URL name} of the values the last adopted link set


@dataclass(frozen=True)
class Param:
    """One address parameter: URL ``name``, session-state ``key``, ``parse`` (text -> value or None), ``default``
    (left out of the address) and ``dump`` (value -> text)."""

    name: str
    key: str
    parse: Callable[[str], object]
    default: object = None
    dump: Callable[[object], str] = str

    def text(self, value: object) -> str | None:
        """The value as the address shows it, or None when it is the default (or unset)."""
        if value is None or value == self.default:
            return None
        return self.dump(value)


_VIEWS: dict[str, tuple[Param, ...]] = {}


def register(view: str, params: tuple[Param, ...]) -> None:
    """Declare the address parameters of ``view`` (its module's ``PARAMS``)."""
    names = [p.name for p in params]
    assert len(names) == len(set(names)), f"{view}: a parameter name twice"
    _VIEWS[view] = tuple(params)


def of_view(view: str) -> tuple[Param, ...]:
    """The parameters ``view`` declared (none for an unknown view)."""
    return _VIEWS.get(view, ())


def all_params() -> list[Param]:
    """Every view's parameters, each key once."""
    return list({p.key: p for params in _VIEWS.values() for p in params}.values())


def link_value_dropped(key: str, why: str = "it does not fit this model or sentence") -> None:
    """Tell the visitor when a value the link set for ``key`` could not be used (say it once)."""
    name = st.session_state.get(FROM_LINK, {}).pop(key, None)
    if name is not None:
        st.info(f"The link's {name}= value was ignored: {why}; the default is shown instead.",
                icon=":material/link_off:")


# ------------------------------------------------------------------------------------------------ parsers
# Numbers as a link writes them: ASCII digits only (``int("٣")`` and ``float("1_0")`` are numbers to Python, not to
# an address), no "nan" or "inf"
_INT = re.compile(r"[+-]?[0-9]{1,30}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")


def int_in(low: int, high: int) -> Callable[[str], int | None]:
    """A parser for an int within [low, high]."""
    def parse(value: str) -> int | None:
        text = str(value).strip(" ")
        if not _INT.fullmatch(text):
            return None
        v = int(text)
        return v if low <= v <= high else None
    return parse


def float_in(low: float, high: float, digits: int = 2) -> Callable[[str], float | None]:
    """A parser for a finite float within [low, high], rounded to ``digits``."""
    def parse(value: str) -> float | None:
        text = str(value).strip(" ")
        if not _FLOAT.fullmatch(text):
            return None
        v = float(text)
        return round(v, digits) if math.isfinite(v) and low <= v <= high else None
    return parse


def one_of(*options: str) -> Callable[[str], str | None]:
    """A parser for one of ``options``."""
    return lambda value: value if value in options else None


def int_list(low: int, high: int, most: int = 128) -> Callable[[str], list[int] | None]:
    """A parser for a comma-separated list of ints within [low, high] (empty: an empty list)."""
    one = int_in(low, high)

    def parse(value: str) -> list[int] | None:
        nums = [one(x) for x in value.split(",")[:most] if x]
        return None if any(n is None for n in nums) else sorted(set(nums))
    return parse


def join(values: object) -> str:
    """A list as the address writes it: ``1,3``."""
    return ",".join(str(v) for v in values)


