"""Address parameters: a tiny registry. The frame (:mod:`app.page.state`) declares its own (``register_frame``); each
view declares its ``PARAMS`` beside its ``render`` and :mod:`app.views` registers them here, so the address of a view
holds exactly that view's choices, and ``app.page.state`` never imports the views.

A :class:`Param` ties a URL name to a session-state key: ``parse`` turns the link's text into a value (None:
not understood), ``dump`` turns the value back into text, and the value equal to ``default`` is left out of the
address. A parameter that is more than one key's value (the frame's search, model, text) says so with ``adopt``
(how a parsed value enters the state, or why it may not) and ``write`` (its text, read from the state).
:func:`adopt` (a link into the state) and :func:`address` (the state into a link) are the one loop each way over
the frame's parameters, then the shown view's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import streamlit as st

FROM_LINK = "_from_link"  # {state key: URL name} of the values the last adopted link set


@dataclass(frozen=True)
class Param:
    """One address parameter: URL ``name``, session-state ``key``, ``parse`` (text -> value or None), ``default``
    (left out of the address) and ``dump`` (value -> text). Optional: ``adopt(value, state)`` puts a parsed value into
    the state itself and returns why it refused it (None: taken), ``write(state)`` gives the address's text itself
    (None: left out), ``clears`` names the keys a link without this parameter resets (None: ``key`` alone), and
    ``everywhere(state)`` gives its text in the address of every other view too (None: left out there; the Whole test
    set's open line, which every view shows), which a link to any view may then set."""

    name: str
    key: str
    parse: Callable[[str], object]
    default: object = None
    dump: Callable[[object], str] = str
    adopt: Callable[[Any, MutableMapping[str, Any]], str | None] | None = None
    write: Callable[[Mapping[str, Any]], str | None] | None = None
    clears: tuple[str, ...] | None = None
    everywhere: Callable[[Mapping[str, Any]], str | None] | None = None

    def text(self, value: object) -> str | None:
        """The value as the address shows it, or None when it is the default (or unset)."""
        if value is None or value == self.default:
            return None
        return self.dump(value)

    def take(self, text: str, state: MutableMapping[str, Any]) -> str | None:
        """Adopt a link's ``text`` into ``state``: None when taken, else why not ("": not understood, also when
        parsing or adopting it raised: a link never replaces the page with an error)."""
        try:
            value = self.parse(text)
            if value is None:
                return ""
            if self.adopt is not None:
                return self.adopt(value, state)
        except Exception:  # a parser's or an adopter's slip on a stranger's text: not understood, as any other
            state.pop(self.key, None)
            return ""
        state[self.key] = value
        return None

    def address(self, state: Mapping[str, Any]) -> str | None:
        """This parameter's text in the address of ``state`` (None: left out)."""
        return self.write(state) if self.write is not None else self.text(state.get(self.key))

    @property
    def cleared(self) -> tuple[str, ...]:
        """The keys a newly adopted link resets before it sets its own values."""
        return (self.key,) if self.clears is None else self.clears


_FRAME: list[Param] = []
_VIEWS: dict[str, tuple[Param, ...]] = {}
_TITLES: dict[str, str] = {}  # each view's title, for the notices


def _check(params: tuple[Param, ...], others: list[Param], owner: str) -> None:
    """A parameter's name is one address's word and its key one value: never twice, never the frame's and a view's."""
    names = [p.name for p in params]
    assert len(names) == len(set(names)), f"{owner}: a parameter name twice"
    clash = set(names) & {p.name for p in others} | {p.key for p in params} & {p.key for p in others}
    assert not clash, f"{owner}: named like another's parameter (or its key): {clash}"


def register_frame(params: tuple[Param, ...]) -> None:
    """Declare the frame's address parameters (text, model, decoding, sentence, view), in the address's order; they
    come before the shown view's own in every address."""
    _check(tuple(params), all_params(), "the frame")
    _FRAME[:] = params


def register(view: str, params: tuple[Param, ...], title: str | None = None) -> None:
    """Declare the address parameters of ``view`` (its key; its module's ``PARAMS``; ``title``: what the notices
    call it)."""
    _check(tuple(params), _FRAME, view)
    _VIEWS[view] = tuple(params)
    _TITLES[view] = title or view


def frame() -> tuple[Param, ...]:
    """The frame's parameters, in the address's order."""
    return tuple(_FRAME)


def is_view(view: str) -> bool:
    """Whether ``view`` is a registered view's key."""
    return view in _VIEWS


def of_view(view: str) -> tuple[Param, ...]:
    """The parameters ``view`` declared (none for an unknown view)."""
    return _VIEWS.get(view, ())


def all_params() -> list[Param]:
    """Every view's parameters, each key once."""
    return list({p.key: p for params in _VIEWS.values() for p in params}.values())


def adopt(query: Mapping[str, str], state: MutableMapping[str, Any], view: Callable[[], str]) -> list[tuple[str, str]]:
    """Adopt a link's ``query`` into ``state``: every registered parameter's keys reset, then the frame's parameters
    taken, then those of the view that ``view()`` names once the frame's are in. Returns what was ignored: (name, why
    or ""), a name no parameter of the frame or of that view has among them; what was taken is kept in
    ``FROM_LINK`` so that a control which drops it later can say so (:func:`link_value_dropped`)."""
    for param in (*_FRAME, *all_params()):
        for key in param.cleared:
            state.pop(key, None)
    ignored: list[tuple[str, str]] = []
    from_link: dict[str, str] = {}

    def take(param: Param) -> None:
        why = param.take(query[param.name], state)
        if why is None:
            from_link[param.key] = param.name
        else:
            ignored.append((param.name, why))

    frame_names = {p.name for p in _FRAME}
    for param in _FRAME:
        if param.name in query:
            take(param)
    shown = view()
    own = {p.name: p for p in (*carried(), *of_view(shown))}
    elsewhere = {p.name for p in all_params()}
    for name in query:
        if name in own:
            take(own[name])
        elif name not in frame_names:
            ignored.append((name, f"not used by the {_TITLES.get(shown, shown)} view" if name in elsewhere else ""))
    state[FROM_LINK] = from_link
    return ignored


def address(state: Mapping[str, Any], view: str) -> dict[str, str]:
    """The address of ``state`` with ``view`` shown: the frame's parameters, then the view's own, in their declared
    order, each where it has something to say."""
    own = of_view(view)
    texts = [(p.name, p.address(state)) for p in (*_FRAME, *own)]
    texts += [(p.name, p.everywhere(state)) for p in carried() if p not in own]
    return {name: text for name, text in texts if text is not None}


def carried() -> list[Param]:
    """The views' parameters carried in every view's address (``Param.everywhere``)."""
    return [p for p in all_params() if p.everywhere is not None]


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


