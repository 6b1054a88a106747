"""The files of one of our checkpoint directories and their low-level readers (no model family involved), and where
a run computes: its device (``resolve_device``) and, under ``torchrun``, its process group (``join_processes``).

``transformer.checkpoint`` (saving and the public entry points) and ``transformer.checkpoint.families`` (which opens
each family's checkpoints) both build on this module; it imports neither.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ..network.config import check_loadable
from ..network.model import Transformer, TransformerConfig, tied_weights
from .regular import megabytes, open_regular, read_regular
from .tokenizer import Tokenizer, TokenizerProtocol

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.model"
METADATA_FILE = "metadata.json"
REQUIRED_FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE)
MAX_CONFIG_BYTES = 1_000_000  # a config.json is a few hundred bytes (a Hugging Face one a few kB)
MAX_METADATA_BYTES = 4_000_000  # a metadata.json with a long training history: tens of kB
MAX_JSON_DEPTH = 32  # objects and lists inside each other (ours: 3)
MAX_HEADER_BYTES = 4 * 2**20  # a safetensors header: NLLB-200 3.3B's, the largest model a family here opens, is
# 123 kB (1,016 tensors; built from transformers' M2M100 at its sizes on the meta device): 4 MB is 30 times that


class CheckpointError(Exception):
    """A checkpoint that cannot be loaded; the message says which file and why."""


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> CUDA when present, else CPU; a CUDA device on a machine without one is a ``CheckpointError``."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise CheckpointError(f"unknown device {device!r}: use 'auto', 'cpu' or 'cuda'") from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("CUDA was chosen but no GPU is available here; pick 'cpu' or 'auto'")
    return resolved


def torchrun_count(name: str, default: int) -> int:
    """A whole number ``torchrun`` puts in the environment (``WORLD_SIZE``, ``LOCAL_RANK``): ASCII digits,
    else a one-line ``ValueError`` naming the variable; ``default`` when unset."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise ValueError(f"{name}={text[:40]!r}: torchrun sets it to a whole number (0, 1, 2, ...)")
    return int(text)


def join_processes(device: torch.device, timeout: timedelta | None = None) -> tuple[int, int, torch.device]:
    """Rank, world size and device: this process alone, or the process group ``torchrun`` describes in the
    environment (``WORLD_SIZE`` > 1): nccl and ``cuda:LOCAL_RANK`` on GPUs, gloo on CPUs. The one place the
    commands that run on several processes (``transformer.train``, ``transformer.corpus``) join them. More
    processes on a machine than it has GPUs: a one-line ``CheckpointError`` before any group is joined."""
    if torchrun_count("WORLD_SIZE", 1) <= 1:
        return 0, 1, device
    if device.type == "cuda":
        local, gpus = torchrun_count("LOCAL_RANK", 0), torch.cuda.device_count()
        here = max(torchrun_count("LOCAL_WORLD_SIZE", 0), local + 1)  # this machine's processes
        if here > gpus:  # every process of the machine says so (nccl cannot share a GPU between two of them)
            raise CheckpointError(f"torchrun started {here} processes on this machine, which has {gpus} GPU(s): "
                                  f"one process a GPU (--nproc-per-node {gpus}), or --device cpu")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timeout)  # None: torch's default
    return dist.get_rank(), dist.get_world_size(), device


def json_depth(data: object) -> int:
    """How deeply objects and lists nest in parsed JSON (a number: 0, ``[]``: 1), without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_json(path: Path, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> object:
    """A small JSON file, parsed: ``ValueError`` saying why when it is larger than ``max_bytes``, not UTF-8 JSON, or
    nested deeper than ``max_depth`` (Python's parser would hit its recursion limit) or not a regular file
    (:class:`FileRefused`, a ``ValueError``: a FIFO never blocks); ``FileNotFoundError`` when absent."""
    raw = read_regular(path, max_bytes, path.name)
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError as err:
        raise ValueError(f"{path.name} is nested too deeply (more than {max_depth} levels)") from err
    if json_depth(data) > max_depth:
        raise ValueError(f"{path.name} is nested too deeply (more than {max_depth} levels)")
    return data


def loadable(config: TransformerConfig, where: str) -> TransformerConfig:
    """``config`` when its sizes are within the bounds a checkpoint may ask for (``network.config.check_loadable``;
    no limit on the model's size here); else ``CheckpointError`` naming ``where`` (the config's file)."""
    try:
        check_loadable(config)
    except ValueError as err:
        raise CheckpointError(f"{where} is refused: {err}") from err
    return config


def load_config(path: Path) -> TransformerConfig:
    """``config.json`` of a checkpoint directory as a ``TransformerConfig`` a process may build
    (:func:`loadable`); ``CheckpointError`` when invalid or too large."""
    try:
        config = TransformerConfig.from_dict(read_json(path / CONFIG_FILE, MAX_CONFIG_BYTES))
    except Exception as err:  # bad JSON, unknown or invalid fields, a list instead of an object: one clear message
        raise CheckpointError(f"{path / CONFIG_FILE} is not a valid TransformerConfig: {type(err).__name__}: "
                              f"{err}") from err
    return loadable(config, str(path / CONFIG_FILE))


def safetensors_shapes(weights: Path) -> dict[str, list[int]]:
    """The names and shapes of the tensors in the safetensors file ``weights``, from its header alone (no data
    read): ``CheckpointError`` when it is not a regular file, its header is over ``MAX_HEADER_BYTES`` (read no
    further), malformed, or names more data than the file holds."""
    name = weights.name
    try:
        with open_regular(weights, 2**62, name) as f:
            size, file_size = int.from_bytes(f.read(8), "little"), os.fstat(f.fileno()).st_size
            if 8 + size > file_size:
                raise CheckpointError(f"{name} is truncated or corrupt (a header of {size:,} bytes in a file of "
                                      f"{file_size:,})")
            if size > MAX_HEADER_BYTES:
                raise CheckpointError(f"{name} has a header of {megabytes(size)}, over the "
                                      f"{megabytes(MAX_HEADER_BYTES)} a checkpoint needs (NLLB-200 3.3B's: 123 kB)")
            header = json.loads(f.read(size))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{name} is truncated or corrupt: {str(err)[:200]}") from err
    if not isinstance(header, dict):
        raise CheckpointError(f"{name} is truncated or corrupt (its header is not a JSON object)")
    header.pop("__metadata__", None)
    try:
        end = max((int(t["data_offsets"][1]) for t in header.values()), default=0)
        stored = {k: [int(n) for n in v["shape"]] for k, v in header.items()}
    except (TypeError, KeyError, IndexError, ValueError) as err:
        raise CheckpointError(f"{name} is truncated or corrupt (a malformed header: {type(err).__name__})") from err
    if 8 + size + end > file_size:
        raise CheckpointError(f"{name} is truncated or corrupt ({file_size:,} of {8 + size + end:,} bytes)")
    return stored


def check_weights(weights: Path, config: TransformerConfig) -> None:
    """The safetensors header of ``weights`` against the tensors ``config`` builds (no data read)."""
    stored = safetensors_shapes(weights)
    with torch.device("meta"):
        expected = {k: list(v.shape) for k, v in Transformer(config).state_dict().items()}
    # tied weights are stored once, under any one of their names
    tied = tied_weights(config)
    wrong = [k for k, shape in expected.items() if k not in tied and stored.get(k) != shape]
    if tied and not any(stored.get(k) == expected[k] for k in tied):
        wrong.append("src_embed.weight")
    if wrong or set(stored) - set(expected):
        raise CheckpointError(f"{WEIGHTS_FILE} does not match config.json (e.g. {(wrong or sorted(stored))[0]})")


def check_vocab(tokenizer: TokenizerProtocol, config: TransformerConfig) -> None:
    """The tokenizer's ids fit the model's vocabulary: equal, except that a converted multilingual model may have a
    few unused rows past its tokenizer's ids (NLLB-200: 2)."""
    exact = isinstance(tokenizer, Tokenizer) or not getattr(tokenizer, "languages", None)
    if tokenizer.vocab_size > config.tgt_vocab_size or (exact and tokenizer.vocab_size != config.tgt_vocab_size):
        raise CheckpointError(f"tokenizer has {tokenizer.vocab_size} pieces but config.json says "
                              f"tgt_vocab_size={config.tgt_vocab_size}")


# The type of each key of metadata.json that something reads (any other key is kept as it is)
_TEXT = ("language_pair", "domain", "training_command", "data_dir", "device", "torch", "source", "converted_from",
         "beam_scoring")
_COUNTS = ("steps", "parameters", "world_size", "languages")
_OBJECTS = ("final_validation", "val_beam5")  # "decoding": read leniently (chosen_alpha: else the default)
_LISTS = ("history", "commands_run", "val_choice")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def metadata_problem(metadata: object) -> str | None:
    """Why parsed ``metadata.json`` cannot be used, or None: it must be an object whose keys that the code reads
    have their types (text, counts, objects, lists; ``history``: objects with numeric ``step``, ``val_bleu``,
    ``val_loss``; a ``test...`` score a number or an object)."""
    if not isinstance(metadata, dict):
        return "it is not a JSON object"
    wrong = [k for k in _TEXT if k in metadata and not isinstance(metadata[k], str)]
    wrong += [k for k in _COUNTS if k in metadata and not (isinstance(metadata[k], int)
                                                             and not isinstance(metadata[k], bool))]
    wrong += [k for k in _OBJECTS if k in metadata and not isinstance(metadata[k], dict)]
    wrong += [k for k in _LISTS if k in metadata and not isinstance(metadata[k], list)]
    wrong += [k for k, v in metadata.items() if "test" in str(k).lower() and not (_is_number(v) or isinstance(v, dict))]
    if wrong:
        return f"{', '.join(map(repr, wrong[:5]))} {'has' if len(wrong) == 1 else 'have'} the wrong type"
    if any(not isinstance(h, dict) or any(k in h and not _is_number(h[k]) for k in ("step", "val_bleu", "val_loss"))
           for h in metadata.get("history", [])):
        return "'history' holds an entry that is not an object of numbers (step, val_bleu, val_loss)"
    return None


def read_metadata(path: Path) -> dict:
    """``metadata.json`` as a dict ({} when absent); ``CheckpointError`` when it is not a JSON object, is larger
    than ``MAX_METADATA_BYTES``, nests deeper than ``MAX_JSON_DEPTH`` or has a key of the wrong type
    (:func:`metadata_problem`)."""
    if not (path / METADATA_FILE).is_file():
        return {}
    try:
        metadata = read_json(path / METADATA_FILE, MAX_METADATA_BYTES)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path / METADATA_FILE} is not valid JSON: {err}") from err
    problem = metadata_problem(metadata)
    if problem:
        raise CheckpointError(f"{path / METADATA_FILE} cannot be used: {problem}")
    return metadata
