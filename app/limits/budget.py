"""A byte-budgeted, least-recently-used cache for the page's results (no Streamlit here).

``st.cache_data`` bounds entries by count, and one long input's analysis is megabytes, so the results of
many visitors are kept here instead, under ``$ATTN_CACHE_MB`` (default 1024) counted in bytes of the cached
arrays, with the loaded models' weights counted against the same budget.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from transformer import environment

DEFAULT_CACHE_MB = 1024.0
LOW_WATERMARK = 0.8  # once over budget, evict down to this share of it


def budget_bytes() -> int:
    """``$ATTN_CACHE_MB`` in bytes (a positive number of MB, never unlimited), else 1024 MB; anything else is a
    ``SettingError`` naming it (``transformer.environment``)."""
    return int(environment.number("ATTN_CACHE_MB", DEFAULT_CACHE_MB, unit="MB") * 1e6)


def size_of(value: Any) -> int:
    """Bytes held by a result: numpy arrays by ``nbytes``, containers, dataclasses and plotly figures summed, the rest
    shallow."""
    if isinstance(value, np.ndarray):  # a view keeps its whole base alive
        base = value.base if isinstance(value.base, np.ndarray) else value
        return int(max(value.nbytes, base.nbytes))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, (torch.Tensor, torch.nn.Module)):
        return _torch_bytes(value)
    if isinstance(value, (bytes, str)):
        return sys.getsizeof(value)
    figures = sys.modules.get("plotly.basedatatypes")
    if figures is not None and isinstance(value, figures.BaseFigure):  # a described view's chart: its data and layout
        return size_of(value.to_plotly_json())
    if isinstance(value, dict):
        return sum(size_of(k) + size_of(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sys.getsizeof(value) + sum(size_of(v) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return sum(size_of(getattr(value, name)) for name in value.__dataclass_fields__)
    return sys.getsizeof(value)


def _torch_bytes(value: Any) -> int:
    """Bytes of a tensor's storage, or of a module's parameters and buffers (shared storage once)."""
    torch = sys.modules["torch"]
    if isinstance(value, torch.Tensor):
        return int(value.untyped_storage().nbytes())
    if isinstance(value, torch.nn.Module):
        tensors = [*value.parameters(), *value.buffers()]
        return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())
    return sys.getsizeof(value)


def analysis_working_bytes(config: Any) -> int:
    """Memory one analysis of the longest input works in, counted against the budget beside each loaded model:
    its attentions twice (the model's tensors and their numpy copy coexist) and three target-length x vocabulary
    float arrays (logits, log-probabilities, probabilities of the top-k candidates). ``config``: a
    ``TransformerConfig``."""
    n = config.max_len
    heads = config.n_heads * (config.n_encoder_layers + 2 * config.n_decoder_layers)
    return 4 * (2 * heads * n * n + 3 * n * config.tgt_vocab_size)


def release_freed_memory() -> None:
    """Hand freed heap memory back to the system (glibc keeps it otherwise, so resident memory would never drop
    after an eviction); a no-op where there is no ``malloc_trim``."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class ByteLRU:
    """Values by key, least recently used out first once their bytes plus ``reserved()`` pass the budget."""

    def __init__(self, budget: Callable[[], int] = budget_bytes, reserved: Callable[[], int] = lambda: 0) -> None:
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._budget, self._reserved = budget, reserved

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The cached value of ``key``, or ``make()`` stored (the newest entry always stays)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        value = make()  # outside the lock: other visitors are not held up
        size = size_of(value)
        with self._lock:
            if key not in self._items:
                self._items[key] = (value, size)
                self._bytes += size
            limit = self._budget() - self._reserved()
            evicted = 0
            if self._bytes > limit:  # over the budget: evict down to 80% of it, so memory is handed back in bulk
                limit = int(limit * LOW_WATERMARK)
            while self._bytes > limit and len(self._items) > 1:
                _, (_, old) = self._items.popitem(last=False)
                self._bytes -= old
                evicted += old
        if evicted > 8_000_000:
            release_freed_memory()
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
