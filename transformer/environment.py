"""The one reader of the settings a server takes from its environment (``ATTN_MAX_WORK``, ``ATTN_CACHE_MB``,
``ATTN_DTYPE``, ...; the table of them is in docs/limits.md), with one rule for every number:

- unset or empty (spaces only): the variable's default;
- a positive number written in ASCII (``250``, ``0.5``, ``1e3``; a count: digits only, from 1): that number;
- ``0``, ``inf``, ``none`` or ``unlimited``: no limit, where the variable is a limit that may be lifted
  (``unlimited=True``: ``math.inf``); refused elsewhere (a cache, a thread count);
- anything else (text, a negative number, ``nan``, ``²``, a number too large for a float): refused.

Also the one count of the CPUs this process may run on (:func:`cores`), which the server's limits and the benchmarks
size their threads by.

Refused means :class:`SettingError` (a ``ValueError``), one line that names the variable, says what it holds (cut
when long) and what it takes; never a silent default. A choice (``ATTN_DTYPE``) is one of its options, else refused
the same way.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence

NO_LIMIT = ("0", "inf", "none", "unlimited")
_NUMBER = re.compile(r"\+?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")
_COUNT = re.compile(r"\+?[0-9]{1,9}")


class SettingError(ValueError):
    """An environment variable this program does not understand; the message is one line naming it."""


def _shown(raw: str) -> str:
    return repr(raw) if len(raw) <= 24 else repr(raw[:24] + "…")


def number(name: str, default: float, *, whole: bool = False, unlimited: bool = False, unit: str = "") -> float:
    """``$name`` read by the module's rule: ``default`` when unset or empty; a positive number (``whole``: a count,
    digits only, as an int); ``math.inf`` for ``0`` / ``inf`` / ``none`` / ``unlimited`` where ``unlimited``;
    else :class:`SettingError` (``unit``: what the number counts, in the message)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if unlimited and raw.lower() in NO_LIMIT:
        return math.inf
    if (_COUNT if whole else _NUMBER).fullmatch(raw):
        value = int(raw) if whole else float(raw)
        if value > 0 and math.isfinite(value):
            return value
    kind = "a whole number from 1" if whole else "a positive number"
    takes = f"{kind}{' of ' + unit if unit else ''}" + (", or 0 / inf for no limit" if unlimited else "")
    raise SettingError(f"{name}={_shown(raw)} is not understood: give {takes}, or leave it unset for the default")


def choice(name: str, options: Sequence[str], default: str) -> str:
    """``$name`` as one of ``options`` (case and spaces ignored), ``default`` when unset or empty, else
    :class:`SettingError`."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() in options:
        return raw.lower()
    raise SettingError(f"{name}={_shown(raw)} is not understood: give {' or '.join(options)}, or leave it unset for "
                       f"{default}")


def cores() -> int:
    """The CPUs this process may run on: its affinity where the system says (a container narrowed to 2 of 64 CPUs:
    2), else the CPU count; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this system (macOS)
        return max(1, os.cpu_count() or 1)


def is_set(name: str) -> bool:
    """Whether ``$name`` holds anything but spaces (a caption names a variable only where it decided something)."""
    return bool(os.environ.get(name, "").strip())


def amount(value: float) -> str:
    """A limit as a message writes it: whole numbers from 10, three digits below (never "0 MB" for a small one)."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"
