"""Which route a product or an attention takes, chosen by measurement: the row buckets (:func:`row_bucket`), the
race of two routes' calls by the wall clock and the CPU clock (:class:`Race`), and each product class's measurement,
made once per process (:func:`measure_once`) and listed for the bench (:func:`measured_routes`). :mod:`.linear` uses
it for float32's MKL or oneDNN and for bfloat16's native product or float32; :mod:`.attention` for an attention
without its weights, PyTorch's fused kernel or the written-out arithmetic (:func:`attention_route`; why, and the
measurements: docs/benchmarks.md)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

BUCKET_ROWS = (1, 4, 64)  # the rows each bucket is timed at: one (a greedy step), a few (up to FEW_ROWS: a sentence's
# beams, a small batch), many (a beam batch)
FEW_ROWS = 16
BUCKET_NAMES = ("1 row", f"2-{FEW_ROWS} rows", f"over {FEW_ROWS} rows")


def row_bucket(rows: int) -> int:
    """The bucket of a product of ``rows`` rows: 0 (one), 1 (up to :data:`FEW_ROWS`), 2 (more)."""
    return 0 if rows <= 1 else 1 if rows <= FEW_ROWS else 2


ONEDNN_MARGIN = 0.95  # oneDNN is kept for a bucket where it took at most this share of MKL's time: less is within a
# shared machine's noise and not worth the prepacked copy's memory
GIVE_UP = 2.0  # bfloat16's native product, this many times slower than float32 at a bucket, is not timed at the next
# (it only loses more with more rows, and one call of it at a beam batch's rows can take seconds)
MIN_REPEATS, MAX_REPEATS, MIN_SECONDS = 3, 50, 0.05  # each route is timed at least 3 times, then until
# MIN_SECONDS (at most 50 times): the least of many short calls is the one a shared machine disturbed least
SLOW_SECONDS = 0.2  # ... but once where the two first calls took this long (a large model's batch product)


@dataclass(frozen=True)
class Measured:
    """One product class's measurement: ``routes`` (the two timed, the plain one first), the least seconds of each at
    each bucket's rows (``nan``: not timed), in wall time (``seconds``) and in CPU time (``cpu_seconds``: this
    thread's with one thread, the process's with more), and the route kept for each bucket."""

    dtype: str
    out_features: int
    in_features: int
    column_major: bool
    bias: bool
    threads: int
    routes: tuple[str, str]
    seconds: tuple[tuple[float, float], ...]
    chosen: tuple[str, ...]
    cpu_seconds: tuple[tuple[float, float], ...] = ()

    def line(self) -> str:
        """One line for the bench: the class, each bucket's two times (wall, and CPU) and the route kept."""
        layout = "column-major" if self.column_major else "row-major"
        return (f"{self.dtype} {self.in_features} -> {self.out_features} ({layout}{', bias' if self.bias else ''}, "
                f"{self.threads} threads): "
                + _cells(BUCKET_NAMES, BUCKET_ROWS, self.routes, self.seconds, self.cpu_seconds, self.chosen))


def _cells(names: tuple[str, ...], sizes: tuple[int, ...], routes: tuple[str, str],
           seconds: tuple[tuple[float, float], ...], cpu_seconds: tuple[tuple[float, float], ...],
           chosen: tuple[str, ...]) -> str:
    """Each bucket's two routes' times (wall, and CPU; ``nan``: not timed) and the route kept, for a bench line."""
    cells = []
    cpu = cpu_seconds or ((math.nan, math.nan),) * len(seconds)
    for name, size, wall, used, pick in zip(names, sizes, seconds, cpu, chosen):
        times = ", ".join(f"{route} {'-' if math.isnan(s) else f'{s * 1e6:.0f} us'}"
                          + ("" if math.isnan(c) else f" (CPU {c * 1e6:.0f} us)")
                          for route, s, c in zip(routes, wall, used))
        cells.append(f"{name} (timed at {size}): {times} -> {pick}")
    return "; ".join(cells)


_MEASURED: dict[tuple, Measured] = {}  # product class -> its measurement, once per process (a CPU's property)
_LOCK = threading.RLock()  # one measurement at a time, each made once, whichever thread asks first (re-entrant:
# bfloat16's float32 route, raced against the native one, measures its blocks' library in its first call)


def measured_routes() -> list[Measured]:
    """Every product class measured in this process so far (the bench prints them)."""
    with _LOCK:
        return list(_MEASURED.values())


def _key(weight: Tensor, bias: bool) -> tuple:
    """A product class: dtype, shape, layout, bias, threads (a measurement holds for all weights alike)."""
    return (weight.dtype, *weight.shape, weight.stride(), bias, torch.get_num_threads())


@dataclass(frozen=True)
class Race:
    """Two calls timed in turns: the least seconds of each (plain, other) by the wall clock and by the CPU clock."""

    wall: tuple[float, float]
    cpu: tuple[float, float]

    def other_wins(self, margin: float) -> bool:
        """Whether the other call took at most ``margin`` of the plain one's time by both clocks. On a busy machine
        the wall clock counts the waits for a core (a shared 2-core machine's choice by it alone changed from one
        measurement to the next) and a multi-threaded call's CPU time its threads' spinning: a route is taken
        from the plain one only when neither doubts it."""
        return all(other <= margin * plain for plain, other in (self.wall, self.cpu))


def _race(plain: Callable[[], object], other: Callable[[], object]) -> Race:
    """The least seconds of each of two calls, timed in turns (a shared machine disturbs both alike), by the wall
    clock and by the CPU clock (this thread's with one thread: the time a busy machine keeps it waiting for a core
    is not the product's; the process's with more: the other threads' work is the product's too)."""
    cpu = time.thread_time if torch.get_num_threads() == 1 else time.process_time
    start = time.perf_counter()
    plain(), other()  # warm: first calls allocate and pack
    least = MIN_REPEATS if time.perf_counter() - start < SLOW_SECONDS else 1  # a slow product: timed once more
    walls: tuple[list[float], list[float]] = ([], [])
    cpus: tuple[list[float], list[float]] = ([], [])
    start = time.perf_counter()
    while len(walls[0]) < MAX_REPEATS and (len(walls[0]) < least or time.perf_counter() - start < MIN_SECONDS):
        for fn, wall, used in zip((plain, other), walls, cpus):
            t0, c0 = time.perf_counter(), cpu()
            fn()
            used.append(cpu() - c0)
            wall.append(time.perf_counter() - t0)
    return Race((min(walls[0]), min(walls[1])), (min(cpus[0]), min(cpus[1])))


Calls = tuple[Callable[[], object], Callable[[], object]]  # the plain route's call and the other's


def _time_buckets(sizes: tuple[int, ...], calls: Callable[[int, torch.Generator], Calls], routes: tuple[str, str],
                  margin: float, give_up: bool = False) -> tuple[tuple, tuple, tuple]:
    """Race ``calls(size, generator)`` at each bucket's size (the inputs drawn from one seeded generator): each
    bucket's least seconds of the two (wall, CPU) and the route kept, the other where it took at most ``margin`` of
    the plain one's time by both clocks. ``give_up``: once the other took :data:`GIVE_UP` times the plain one's,
    the larger buckets are not timed (``nan``; the plain route)."""
    seconds, cpu_seconds, chosen, lost = [], [], [], False
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for size in sizes:
            if lost:
                seconds.append((math.nan, math.nan))
                cpu_seconds.append((math.nan, math.nan))
                chosen.append(routes[0])
                continue
            race = _race(*calls(size, gen))
            seconds.append(race.wall)
            cpu_seconds.append(race.cpu)
            chosen.append(routes[1] if race.other_wins(margin) else routes[0])
            lost = give_up and all(o > GIVE_UP * p for p, o in (race.wall, race.cpu))
    return tuple(seconds), tuple(cpu_seconds), tuple(chosen)


def _once(table: dict, key: tuple, measure: Callable[[], object]) -> object:
    """``table[key]``, measured by ``measure()`` once per process, under the lock (a thread that waited takes the
    one made meanwhile); a dict lookup once it is there (this runs at every product and attention)."""
    found = table.get(key)
    if found is None:
        with _LOCK:
            found = table.get(key)
            if found is None:
                found = table[key] = measure()
    return found


def _measure(weight: Tensor, bias: Tensor | None, routes: tuple[str, str],
             products: Callable[[Tensor], Calls], give_up: bool, margin: float, rows_dtype: torch.dtype) -> Measured:
    """Time ``products(x)`` (the plain route's call and the other's) at each bucket's rows (:func:`_time_buckets`)."""
    seconds, cpu_seconds, chosen = _time_buckets(
        BUCKET_ROWS, lambda rows, gen: products(torch.randn(rows, weight.size(1), generator=gen).to(rows_dtype)),
        routes, margin, give_up)  # rows as the model's
    return Measured(str(weight.dtype).removeprefix("torch."), weight.size(0), weight.size(1),
                    weight.dim() == 2 and weight.stride(0) == 1 and weight.size(1) > 1, bias is not None,
                    torch.get_num_threads(), routes, seconds, chosen, cpu_seconds)


def measured(weight: Tensor, bias: bool) -> Measured | None:
    """The measurement of ``weight``'s product class (with a bias or not) made in this process, if any."""
    return _MEASURED.get(_key(weight, bias))


def measure_once(weight: Tensor, bias: Tensor | None, routes: tuple[str, str],
                 products: Callable[[Tensor], Calls], *, give_up: bool,
                 margin: float, rows_dtype: torch.dtype) -> Measured:
    """The measurement of ``weight``'s class: made once per process, under a lock (a thread that waited takes the
    one made meanwhile), by timing ``products(x)`` (the plain route's call and the other's) on rows of
    ``rows_dtype`` at each bucket; the other route kept where it took at most ``margin`` of the plain one's time by
    both clocks (:class:`Race`). ``give_up``: once the other took :data:`GIVE_UP` times the plain one's, the larger
    buckets are not timed."""
    return _once(_MEASURED, _key(weight, bias is not None),
                 lambda: _measure(weight, bias, routes, products, give_up, margin, rows_dtype))


# ----------------------------------------------------------------------------------------------
# Attention without its weights: PyTorch's fused kernel or the written-out arithmetic

QUERY_ROWS = (1, 4, 32)  # the queries a row each attention bucket is timed at (the same buckets as BUCKET_ROWS'
# counts: one, a decoding step; a few, a sentence's beams attending together to its source; many, a whole sentence)
QUERY_NAMES = ("1 query", f"2-{FEW_ROWS} queries", f"over {FEW_ROWS} queries")
TIMED_KEYS, TIMED_HEAD_ROWS = 32, 256  # each bucket timed over 32 keys, for as many rows as make 256 (row, head)
# pairs (a beam batch: 64 sentences of 4 beams at 4 heads), the last 4 keys padding
WRITTEN_MARGIN = 0.95  # the written-out attention is taken for a bucket where it took at most this share of the
# fused kernel's time by both clocks


@dataclass(frozen=True)
class MeasuredAttention:
    """One attention class's measurement (dtype, heads, head width, threads): the least seconds of the fused kernel
    (``F.scaled_dot_product_attention``) and of the written-out arithmetic at each query bucket, by the wall clock
    (``seconds``) and the CPU clock (``cpu_seconds``), and the route kept for each bucket."""

    dtype: str
    heads: int
    d_head: int
    threads: int
    seconds: tuple[tuple[float, float], ...]
    cpu_seconds: tuple[tuple[float, float], ...]
    chosen: tuple[str, ...]
    routes: tuple[str, str] = ("fused", "written")

    def line(self) -> str:
        """One line for the bench: the class, each bucket's two times (wall, and CPU) and the route kept."""
        return (f"attention {self.dtype}, {self.heads} heads of {self.d_head} ({self.threads} threads): "
                + _cells(QUERY_NAMES, QUERY_ROWS, self.routes, self.seconds, self.cpu_seconds, self.chosen))


_MEASURED_ATTENTION: dict[tuple, MeasuredAttention] = {}  # attention class -> its measurement, once per process


def measured_attention() -> list[MeasuredAttention]:
    """Every attention class measured in this process so far (the bench prints them)."""
    with _LOCK:
        return list(_MEASURED_ATTENTION.values())


def attention_measurement(dtype: torch.dtype, heads: int, d_head: int) -> MeasuredAttention | None:
    """The measurement of an attention class at this thread count made in this process, if any."""
    return _MEASURED_ATTENTION.get((dtype, heads, d_head, torch.get_num_threads()))


def attention_route(dtype: torch.dtype, heads: int, d_head: int, queries: int,
                    calls: Callable[[Tensor, Tensor, Tensor, Tensor], Calls]) -> str:
    """The route, "fused" or "written", of an attention without its weights, of ``heads`` heads ``d_head`` wide
    in ``dtype`` with ``queries`` queries a row: the class measured once per process and thread count, under a
    lock, by timing ``calls(q, k, v, mask)`` (the fused kernel's call and the written-out one's) at each query
    bucket (:data:`QUERY_ROWS`) on rows of :data:`TIMED_KEYS` keys; the written-out one kept where it took at most
    :data:`WRITTEN_MARGIN` of the fused kernel's time by both clocks (:class:`Race`)."""
    found = _once(_MEASURED_ATTENTION, (dtype, heads, d_head, torch.get_num_threads()),
                  lambda: _measure_attention(dtype, heads, d_head, calls))
    return found.chosen[0 if queries <= 1 else 1 if queries <= FEW_ROWS else 2]  # row_bucket's, inlined


def _measure_attention(dtype: torch.dtype, heads: int, d_head: int,
                       calls: Callable[[Tensor, Tensor, Tensor, Tensor], Calls]) -> MeasuredAttention:
    """Time both routes at each query bucket (see :func:`attention_route`)."""
    rows = max(1, TIMED_HEAD_ROWS // heads)

    def bucket(queries: int, gen: torch.Generator) -> Calls:
        # laid out as the model's: (N, T, H, d) -> (N, H, T, d), a view
        q, k, v = (torch.randn(rows, n, heads, d_head, generator=gen).to(dtype).transpose(1, 2)
                   for n in (queries, TIMED_KEYS, TIMED_KEYS))
        mask = torch.ones(rows, 1, 1, TIMED_KEYS, dtype=torch.bool)  # (N, 1, 1, S): a padding mask
        mask[..., -4:] = False
        return calls(q, k, v, mask)

    seconds, cpu_seconds, chosen = _time_buckets(QUERY_ROWS, bucket, MeasuredAttention.routes, WRITTEN_MARGIN)
    return MeasuredAttention(str(dtype).removeprefix("torch."), heads, d_head, torch.get_num_threads(), seconds,
                             cpu_seconds, chosen)
