"""Weights reach the model without a second copy: the file is memory-mapped (nothing read until a weight is used),
the model is built on the "meta" device (no memory, no random initialisation) and the mapped tensors are assigned to
it (``load_state_dict(..., assign=True)``). Peak memory after loading is about the weights once, as with
transformers' ``from_pretrained``.

A weight stored in another dtype than the one asked for (``dtype="bfloat16"``, or a float16 file loaded as float32)
is converted one tensor at a time, and the mapped pages it was read from are handed back at once
(``madvise(MADV_DONTNEED)``, Linux), so a bfloat16 load of a float32 file peaks at about half the file, not
one and a half times it.

Before anything is mapped or converted, the weights the model will hold are compared with the memory this machine has
available (:func:`check_fits`): a model that cannot fit is refused with the numbers. No other size limit applies to a
library call (the app has its own, ``ATTN_MAX_MODEL_MB``).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import pickle
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from ..network.config import model_bytes
from ..network.model import TIED_WEIGHTS, Transformer, TransformerConfig, missing_weights, positional_table
from .files import CheckpointError, safetensors_shapes

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # what ``transformer.load(dtype=...)`` takes


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """``"float32"`` (None: the default) or ``"bfloat16"`` (or their ``torch.dtype``) as a ``torch.dtype``;
    ``CheckpointError`` for anything else."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in DTYPES:
        return DTYPES[dtype.removeprefix("torch.")]
    raise CheckpointError(f"dtype {dtype!r} is not one the model runs in: use {' or '.join(map(repr, DTYPES))}")


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def weights_bytes(config: TransformerConfig, dtype: torch.dtype = torch.float32) -> int:
    """The bytes of the parameters and buffers ``Transformer(config)`` holds in ``dtype`` (from the config alone)."""
    return model_bytes(config) * torch.empty((), dtype=dtype).element_size() // 4


def _cgroup_room() -> int | None:
    """What this process's cgroup (v2) still allows, or None where it sets no limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
    except (OSError, ValueError):
        return None
    return None if limit == "max" or not limit.isdigit() else max(int(limit) - used, 0)


def available_bytes() -> int | None:
    """Memory this machine has available for new data (``MemAvailable``: free and reclaimable, within the cgroup's
    limit where one is set), or None where it cannot be told (not Linux)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        free = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
    room = _cgroup_room()
    return free if room is None else min(free, room)


def check_fits(config: TransformerConfig, dtype: torch.dtype, where: str = "the checkpoint") -> None:
    """``CheckpointError`` with the numbers when the weights of ``config`` in ``dtype`` cannot fit in the memory
    available (:func:`available_bytes`); nothing is allocated. Unknown available memory: no check."""
    need, room = weights_bytes(config, dtype), available_bytes()
    if room is not None and need > room:
        smaller = dtype == torch.float32 and weights_bytes(config, torch.bfloat16) <= room
        raise CheckpointError(
            f"{where} is refused: its weights need {need / 1e6:,.0f} MB in {dtype_name(dtype)} but this machine has "
            f"{room / 1e6:,.0f} MB available" + ("; dtype='bfloat16' would take half" if smaller else ""))


def map_weights(path: Path) -> dict[str, Tensor]:
    """The tensors of a checkpoint directory, memory-mapped: ``model.safetensors``, else ``pytorch_model.bin``
    (``torch.load(mmap=True, weights_only=True)``: tensors only, never code). A truncated or corrupt file is a
    one-line ``CheckpointError``."""
    weights = path / "model.safetensors"
    if weights.is_file():
        safetensors_shapes(weights)  # a regular file, its header within MAX_HEADER_BYTES, before safetensors maps it
        try:
            return load_file(str(weights))
        except (SafetensorError, OSError, ValueError) as err:
            raise CheckpointError(f"{weights} is truncated or corrupt: {err}") from err
    weights = path / "pytorch_model.bin"
    if weights.is_file():
        try:
            state = torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
        except pickle.UnpicklingError as err:  # torch's message advises weights_only=False: never repeated here
            raise CheckpointError(f"{weights.name} holds more than tensors (code or objects), so it is not "
                                  "loaded") from err
        except Exception as err:  # a damaged zip: torch raises several types
            raise CheckpointError(f"{weights.name} is truncated or corrupt ({type(err).__name__})") from err
        if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
            raise CheckpointError(f"{weights} does not hold a dictionary of tensors")
        return state
    raise CheckpointError(f"{path} has neither model.safetensors nor pytorch_model.bin")


_PAGE = mmap.PAGESIZE
_LIBC = None


def _madvise() -> object | None:
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None, use_errno=True).madvise if hasattr(mmap, "MADV_DONTNEED") else False
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC or None


def release(tensor: Tensor, mapped: list[tuple[int, int]]) -> None:
    """Hand the whole pages a memory-mapped ``tensor`` occupies back to the system (they are re-read from the file
    if touched again): called once its values have been converted into a new tensor and it is no longer used.
    Nothing happens off Linux or for a tensor outside the file mappings ``mapped`` (:func:`file_mappings`; its
    storage is then freed when dropped)."""
    advise = _madvise()
    ptr = tensor.data_ptr()
    if advise is None or tensor.device.type != "cpu" or not any(low <= ptr < high for low, high in mapped):
        return
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    first, last = -(-start // _PAGE) * _PAGE, end // _PAGE * _PAGE  # the whole pages inside [start, end)
    if last > first:
        with contextlib.suppress(Exception):
            advise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), mmap.MADV_DONTNEED)


MADV_POPULATE_READ = 22  # Linux 5.14+: map every page of a range in one call (from the page cache, reading the file)


def populate(tensors: list[Tensor], mapped: list[tuple[int, int]]) -> None:
    """Map in, in one call per file mapping, the pages of the memory-mapped ``tensors``: a first translation would
    otherwise take one page fault per 4 kB page (3.3 million at NLLB-3.3B's 13 GB: seconds). Nothing happens where
    the kernel lacks ``MADV_POPULATE_READ`` or off Linux."""
    advise = _madvise()
    if advise is None:
        return
    used = {span for t in tensors for span in mapped if span[0] <= t.data_ptr() < span[1]}
    for low, high in sorted(used):
        with contextlib.suppress(Exception):
            advise(ctypes.c_void_p(low), ctypes.c_size_t(high - low), MADV_POPULATE_READ)


def file_mappings() -> list[tuple[int, int]]:
    """The address ranges of this process's file mappings (``/proc/self/maps`` lines naming a file); [] off Linux."""
    spans = []
    try:
        with open(f"/proc/{os.getpid()}/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5].startswith("/"):
                    low, _, high = parts[0].partition("-")
                    spans.append((int(low, 16), int(high, 16)))
    except (OSError, ValueError):
        return []
    return spans


def build_model(config: TransformerConfig, state: dict[str, Tensor], dtype: torch.dtype = torch.float32,
                family: str = "checkpoint's") -> Transformer:
    """Our ``Transformer`` of ``config`` holding ``state``'s tensors (our names; a tied table under any one of its
    names) in ``dtype``, without copying those already in it (memory-mapped ones stay mapped): built on the meta
    device, checked (every weight there with its shape, nothing else), converted one tensor at a time where the
    dtype differs (:func:`release` hands the source's pages back), assigned, then the ties and the positional table
    restored. CPU, eval mode; ``CheckpointError`` when the weights do
    not fit ``config``."""
    with torch.device("meta"):
        model = Transformer(config)
    expected = model.state_dict()
    state = dict(state)
    tied = [k for k in TIED_WEIGHTS if k in state] if config.share_embeddings else []
    for name in TIED_WEIGHTS if tied else ():
        state[name] = state[tied[0]]
    absent = missing_weights(config, [k for k in expected if k not in state])
    unexpected = sorted(set(state) - set(expected))
    if absent or unexpected:
        raise CheckpointError(f"the {family} weights do not match config.json (missing {absent[:3]}, unexpected "
                              f"{unexpected[:3]})")
    wrong = [k for k, v in expected.items() if tuple(state[k].shape) != tuple(v.shape)]
    if wrong:
        raise CheckpointError(f"the {family} weights do not match config.json: {wrong[0]} is "
                              f"{list(state[wrong[0]].shape)}, config.json makes it {list(expected[wrong[0]].shape)}")
    converted: dict[int, Tensor] = {}  # one conversion per stored tensor (a tied table is one)
    mapped = file_mappings()
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            raise CheckpointError(f"the {family} weight {name} is {tensor.dtype}, not a floating-point tensor")
        if tensor.dtype != dtype or tensor.device.type != "cpu":
            key = id(tensor)
            if key not in converted:
                converted[key] = tensor.to("cpu", dtype)
                release(tensor, mapped)
            state[name] = converted[key]
    model.load_state_dict(state, strict=True, assign=True)
    model.tie_embeddings()
    populate([t for t in state.values() if t.dtype == dtype], file_mappings())
    with torch.device("cpu"):
        model.register_buffer("pe", positional_table(config), persistent=False)
    return model.eval()
