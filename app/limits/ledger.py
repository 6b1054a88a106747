"""One request's work ledger and the server's heavy-job slots (no Streamlit here).

``$ATTN_MAX_WORK`` is the ceiling per request, in work units (:mod:`app.limits.work` estimates each job): 1000 in
public mode (``ATTN_PUBLIC=1``), unlimited otherwise, for the **sum** of every job one request (one script run,
:func:`request`) starts. Each job is planned against what is :func:`left` of it and :func:`spend` s its estimate;
what the page cut to stay within it is recorded with :func:`cut` and shown once per request.

Light work (a request whose jobs together stay within ``LIGHT_WORK``: the translation and attentions of a few short
sentences) runs at once; heavy work queues behind ``$ATTN_HEAVY_JOBS`` slots per server process (:data:`HEAVY`),
one wait per request (a request keeps its slot until it ends), and hands freed memory back to the system.
"""

from __future__ import annotations

import gc
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from transformer import environment
from transformer.environment import cores

from ..models.catalog import public_mode
from .budget import release_freed_memory

PUBLIC_MAX_WORK = 1000.0
LIGHT_WORK = 200.0  # a request whose jobs together pass this many units queues with the heavy jobs: above three
# Multi30k caption sentences at the page's beam 4 and the analysis of one (docs/limits.md)


def max_work() -> float:
    """``$ATTN_MAX_WORK`` (units; ``0``, ``none`` or ``inf``: unlimited), else 1000 in public mode, unlimited
    otherwise; anything else is a ``SettingError`` naming it (``transformer.environment``)."""
    return environment.number("ATTN_MAX_WORK", PUBLIC_MAX_WORK if public_mode() else math.inf, unlimited=True,
                              unit="work units")


def amount(value: float) -> str:
    """Work units as the notices write them: whole units, or three digits below ten."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"


# ------------------------------------------------------------------------------------------------ one request


@dataclass
class Request:
    """One request's work (one script run): the ceiling for all of its jobs together, what they were given, what
    the view keeps for its own jobs while the page's analysis runs, and what was cut to stay within the ceiling."""

    ceiling: float
    spent: float = 0.0
    reserved: float = 0.0
    cuts: list[str] = field(default_factory=list)
    on_end: list[Callable[[], None]] = field(default_factory=list)  # a heavy slot held until the request ends

    def left(self) -> float:
        return max(0.0, self.ceiling - self.spent - self.reserved) if math.isfinite(self.ceiling) else math.inf

    def keep(self, share: float) -> None:
        """Keep ``share`` of the ceiling for jobs still to come (the view's own), out of what is left now."""
        self.reserved = self.ceiling * share if math.isfinite(self.ceiling) else 0.0

    def notice(self) -> str | None:
        """The one notice of what this request cut (None: nothing was)."""
        if not self.cuts:
            return None
        return (f"This page did less than asked to stay within this server's limit of {amount(self.ceiling)} work "
                "units per request (ATTN_MAX_WORK), shared by everything the page runs: "
                f"{'; '.join(dict.fromkeys(self.cuts))}.")


_local = threading.local()


def current() -> Request | None:
    """The request this thread is serving, if any."""
    return getattr(_local, "request", None)


@contextmanager
def request() -> Iterator[Request]:
    """One request's work ledger for the block (the page's script run); a heavy slot it took is freed at the end.
    Inside another request, that one."""
    outer = current()
    if outer is not None:
        yield outer
        return
    req = _local.request = Request(max_work())
    try:
        yield req
    finally:
        _local.request = None
        for end in req.on_end:
            end()


def left() -> float:
    """Units this request may still start (``max_work()`` outside a request)."""
    req = current()
    return max_work() if req is None else req.left()


def spend(estimate: float) -> None:
    """Count a job's estimate against this request (cached or not, so a page plans the same way on every rerun)."""
    req = current()
    if req is not None:
        req.spent += estimate


def cut(notices: list[str] | tuple[str, ...]) -> None:
    """Record what was cut; the page shows it once, in one notice."""
    req = current()
    if req is not None:
        req.cuts.extend(notices)


def is_light(estimate: float) -> bool:
    """Whether a job runs at once, off the heavy slots: this request's work with it stays within ``LIGHT_WORK``
    (outside a request: the job's own estimate)."""
    req = current()
    return (estimate if req is None else req.spent) <= LIGHT_WORK


# ------------------------------------------------------------------------------------------------ heavy jobs


def heavy_slots() -> int:
    """``$ATTN_HEAVY_JOBS`` (a whole number from 1), else 1 in public mode and otherwise the CPUs this process may
    run on (``cores``: a container narrowed to 2 of a host's 64 gets 2); anything else is a ``SettingError`` naming
    it."""
    return int(environment.number("ATTN_HEAVY_JOBS", 1 if public_mode() else cores(), whole=True))


def release_memory() -> None:
    """After a heavy job: collect the garbage and hand freed heap memory back to the system."""
    gc.collect()
    release_freed_memory()


class HeavyJobs:
    """At most ``slots`` heavy jobs of this server process at a time; the others wait their turn, first come first
    served (a queue of tickets, not a semaphore: a visitor who just arrived never overtakes one who is waiting, so
    a link's wait is bounded by the jobs ahead of it, each bounded by ``ATTN_MAX_WORK``)."""

    def __init__(self, slots: Callable[[], int] = heavy_slots) -> None:
        self._slots = slots
        self._turn = threading.Condition()
        self._queue: deque[object] = deque()  # the waiting requests' tickets, oldest first
        self._local = threading.local()  # a heavy job that starts another runs it in its own slot
        self.running = 0

    def _ready(self, ticket: object) -> bool:
        """Whether ``ticket`` is first in the queue and a slot is free; if so it takes the slot (under the lock)."""
        if self._queue[0] is not ticket or self.running >= max(1, self._slots()):
            return False
        self._queue.popleft()
        self.running += 1
        self._turn.notify_all()  # the next in the queue may take a second free slot
        return True

    def _take(self, waiting: Callable[[float], None] | None, poll: float) -> None:
        """Wait for this thread's turn (calling ``waiting(seconds waited)`` every ``poll`` s, outside the lock: it
        may draw on the page, or stop the run, which gives the turn up)."""
        ticket, start = object(), time.monotonic()
        with self._turn:
            self._queue.append(ticket)
        try:
            while True:
                with self._turn:
                    if self._ready(ticket):
                        return
                    self._turn.wait(poll)
                    if self._ready(ticket):
                        return
                if waiting is not None:
                    waiting(time.monotonic() - start)
        except BaseException:  # a run stopped while it waited (a newer click): out of the queue
            with self._turn:
                if ticket in self._queue:
                    self._queue.remove(ticket)
                    self._turn.notify_all()
            raise

    @contextmanager
    def slot(self, waiting: Callable[[float], None] | None = None, poll: float = 0.5,
             release: bool = True) -> Iterator[None]:
        """Hold one slot for the block, or inside a :func:`request` until the request ends (calling
        ``waiting(seconds waited)`` while none is free); memory is released when the slot is freed (unless not
        ``release``: a job whose result stays in the cache, whose garbage collection would only hold the
        interpreter lock for a long while on a loaded server, stalling every other visitor's run)."""
        if getattr(self._local, "held", False):
            yield
            return
        self._take(waiting, poll)
        self._local.held = True
        req = current()
        if req is not None:  # kept until the request ends: a request waits for a slot once, not once per job
            req.on_end.append(self._free)
            yield
            return
        try:
            yield
        finally:
            self._free(release)

    def threads(self) -> int:
        """The threads a heavy job may run at once (``transformer.interpret.attribute``'s ``workers``): the CPUs this
        process may use, shared among the heavy jobs running now (at least 1; a lone job on two cores: 2)."""
        with self._turn:
            return max(1, cores() // max(1, self.running))

    def _free(self, release: bool = True) -> None:
        self._local.held = False
        with self._turn:
            self.running -= 1
            self._turn.notify_all()
        if release:
            release_memory()


HEAVY = HeavyJobs()
